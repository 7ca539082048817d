"""Shared fixtures for the unit tests (interpreter setup and gpu rule: ../conftest.py)."""

import gc

import pytest


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
