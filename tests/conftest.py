"""Shared fixtures for the unit tests (interpreter setup and gpu rule: ../conftest.py)."""

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def torch_warm():
    """Run one analysis before pytester snapshots sys.modules.

    pytester removes the modules an in-process run imported; torch's lazily
    imported internals must not be imported a second time (that aborts).
    """
    import torch

    import fusion_core

    fusion_core.analyze(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Sigmoid()), (2, 4))
    # Each inner run ends with pytest's full gc.collect(); freezing torch's millions of
    # long-lived objects keeps that from scanning them every time.
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="session", autouse=True)
def _no_terminal_width():
    """The CLI sizes piped tables by COLUMNS when it is set, and pytest-xdist's workers
    export COLUMNS=80: tests that want a width ask for it themselves."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("COLUMNS", raising=False)
        mp.delenv("LINES", raising=False)
        yield


@pytest.fixture
def proj(pytester, monkeypatch):
    """A plugin test project: model.py (variant `base`) and one marked test, no baselines."""
    from fusion_plugin_helpers import make_proj

    return make_proj(pytester, monkeypatch)


@pytest.fixture(scope="session")
def example_report(tmp_path_factory) -> tuple[Path, str]:
    """`pytest -n 2 examples/test_examples_fusion.py --fusion-report=DIR` (DIR, its output):
    the HTML report's tests read its index and pages, with and without a browser."""
    pytest.importorskip("xdist")
    from fusion_plugin_helpers import PLUGIN_ARGS

    out = tmp_path_factory.mktemp("examples-report")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PLUGIN_ARGS, "-n", "2",
         "examples/test_examples_fusion.py", f"--fusion-report={out}"], cwd=ROOT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stdout[-2000:]
    return out, done.stdout
