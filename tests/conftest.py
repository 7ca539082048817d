"""Shared fixtures for the unit tests (interpreter setup and gpu rule: ../conftest.py)."""

import gc
import json
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


@pytest.fixture(scope="session", autouse=True)
def _no_tuning_cache():
    """No test reads or writes the user's tuning cache (on CUDA a generated launcher would
    keep its timed choices there, and a later run would skip the timing a test counts on):
    the tests of the cache set FUSION_ADVISOR_CACHE_DIR themselves."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FUSION_ADVISOR_CACHE_DIR", "")
        yield


@pytest.fixture
def proj(pytester, monkeypatch):
    """A plugin test project: model.py (variant `base`) and one marked test, no baselines."""
    from fusion_plugin_helpers import make_proj

    return make_proj(pytester, monkeypatch)


def built_once(tmp_path_factory, name: str, build):
    """`build()` (a JSON value) once for the whole run: under xdist the first worker to ask
    builds it and the others read its answer, or its failure (the fixtures below run whole
    pytest sessions, 10-25 s each, and tests of two files on different workers ask for them)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not os.environ.get("PYTEST_XDIST_WORKER") or not run:
        return build()
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # this run's, common to its workers
    answer = shared / f"{name}-{run}.json"

    def keep(found: dict) -> None:
        partial = answer.with_suffix(".part")
        partial.write_text(json.dumps(found))
        os.replace(partial, answer)

    with FileLock(str(answer.with_suffix(".lock"))):
        if not answer.exists():
            try:
                value = build()
            except pytest.skip.Exception as skipped:
                keep({"skipped": str(skipped)})
                raise
            except BaseException as failed:  # the other workers fail too, not rebuild
                keep({"failed": f"{type(failed).__name__}: {failed}"[:3000]})
                raise
            keep({"value": value})
            return value
        found = json.loads(answer.read_text())
    if "skipped" in found:
        pytest.skip(found["skipped"])
    if "failed" in found:
        pytest.fail(f"building {name} failed on another worker: {found['failed']}")
    return found["value"]


@pytest.fixture(scope="session")
def example_report(tmp_path_factory) -> tuple[Path, str]:
    """`pytest -n 2 examples/test_examples_fusion.py --fusion-report=DIR` (DIR, its output):
    the HTML report's tests read its index and pages, with and without a browser."""
    pytest.importorskip("xdist")
    out, stdout = built_once(tmp_path_factory, "example_report",
                             lambda: _example_report(tmp_path_factory))
    return Path(out), stdout


def _example_report(tmp_path_factory) -> tuple[str, str]:
    from fusion_plugin_helpers import PLUGIN_ARGS

    out = tmp_path_factory.mktemp("examples-report")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PLUGIN_ARGS, "-n", "2",
         "examples/test_examples_fusion.py", f"--fusion-report={out}",
         # The pages are under test, not the timings: on a GPU shared with the rest of the
         # suite, kernel times would follow that load (the examples judge them on their own).
         "-o", "fusion_timing_tolerance=1000"], cwd=ROOT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stdout[-2000:]
    return str(out), done.stdout


# Two ordinary edits of tests/verdict_project.py's blocks.py: the squeeze-excite gate becomes
# a custom op (the conv test's `sigmoid → mul → add` loses its sigmoid), and the MLP residual
# is scaled (the transformer's `add → add → layer_norm`, whose first add recomputed the
# previous block's output, no longer holds that copy).
CUSTOM_GATE = ("import torch.nn.functional as F\n", """import torch.nn.functional as F


@torch.library.custom_op("demo::gate", mutates_args=())
def gate(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x)


@gate.register_fake
def _(x):
    return torch.empty_like(x)
""")
VERDICT_EDITS = (CUSTOM_GATE,
                 ("s = torch.sigmoid(self.expand(s))", "s = gate(self.expand(s))"),
                 ("return x + self.out(h)", "return x + self.out(h) * 0.5"))


@pytest.fixture(scope="session")
def verdict_report(tmp_path_factory) -> Path:
    """tests/verdict_project.py with its baselines recorded, then VERDICT_EDITS, run with
    `--fusion-report=rep` in a fresh interpreter (a custom op registers once per process):
    the report's folder of test pages."""
    return Path(built_once(tmp_path_factory, "verdict_report",
                           lambda: _verdict_report(tmp_path_factory)))


def _verdict_report(tmp_path_factory) -> str:
    from types import SimpleNamespace

    from fusion_plugin_helpers import PLUGIN_ARGS
    from verdict_project import BLOCKS, TESTS, edited

    proj = tmp_path_factory.mktemp("verdict")
    (proj / "pytest.ini").write_text("[pytest]\n")
    (proj / "blocks.py").write_text(BLOCKS)
    (proj / "test_blocks.py").write_text(TESTS)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PLUGIN_ARGS]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([*args, "--fusion-update-baselines=new"], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:]
    edited(SimpleNamespace(path=proj), *VERDICT_EDITS)
    done = subprocess.run([*args, "--fusion-report=rep"], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=600)
    # the custom op shrinks the conv's cluster (a regression); the transformer's residual
    # scale is an improvement and a change: pages for both
    assert done.returncode == 1 and "1 failed, 2 passed" in done.stdout, done.stdout[-2000:]
    return str(proj / "rep-tests")


class StubGpu:
    """What `stub_gpu` stands in for CUDA: a fixed device (4000 GB/s, 60 MiB of L2), a host
    clock reading `host_us` per call, CUDA-graph device time `device_us` per call, the GPU's
    per-kernel floor `floor_us`; callables of a type in `uncapturable` fail their capture."""

    def __init__(self) -> None:
        self.host_us = 30.0
        self.device_us = 4.0
        self.floor_us = 1.0
        self.uncapturable: list[type] = []


@pytest.fixture
def stub_gpu(monkeypatch) -> StubGpu:
    """`validate` on the CPU as if on a CUDA machine: its timers, device query and CUDA-graph
    capture stubbed (``StubGpu``), its recordings run at the reduced shape on the CPU."""
    import torch

    from fusion_core.validate import bench, devicetime, run
    from fusion_core.validate.inputs import reduced_specs
    from fusion_core.validate.prepare import recording

    stub = StubGpu()

    def device_time(fn, arg_sets, samples=devicetime.SAMPLES):
        if isinstance(fn, tuple(stub.uncapturable)):
            raise devicetime.CaptureError("RuntimeError: operation not permitted")
        fn(*arg_sets[0])
        return devicetime.DeviceTime((stub.device_us,) * samples, 0.01, len(arg_sets))

    def device_times(calls, samples=devicetime.SAMPLES):
        return tuple(device_time(fn, arg_sets, samples) for fn, arg_sets in calls)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(bench, "time_us", lambda fn, samples=5: (stub.host_us,) * samples)
    monkeypatch.setattr(bench, "device_info", lambda peak=None: bench.Device(
        "Stub GPU", (9, 0), 60 * 2**20, peak or 4000.0, "--peak-gbps" if peak else "detected"))
    monkeypatch.setattr(devicetime, "device_time", device_time)
    monkeypatch.setattr(devicetime, "device_times", device_times)
    monkeypatch.setattr(devicetime, "floor_us", lambda index=0: stub.floor_us)
    monkeypatch.setattr(run, "recording", lambda analysis, candidates, **kw: recording(
        analysis, [reduced_specs(analysis)], **{**kw, "device": "cpu"}))
    return stub


@pytest.fixture
def generate_calls(monkeypatch) -> list[int]:
    """The cluster index of every kernel generation from here on: `fusion_core.generate`
    counted where the plugin reaches it (fusion_core) and where the HTML page and `measure`
    do (fusion_core.codegen)."""
    import fusion_core
    import fusion_core.codegen as codegen

    calls: list[int] = []
    original = codegen.generate

    def counting(analysis, cluster, *args, **kwargs):
        calls.append(cluster.index)
        return original(analysis, cluster, *args, **kwargs)

    monkeypatch.setattr(codegen, "generate", counting)
    monkeypatch.setattr(fusion_core, "generate", counting, raising=False)
    return calls


@pytest.fixture(params=["cpu", "cuda"])
def apply_target(request, monkeypatch) -> str:
    """The device the CLI analyses for (`cli.analysis_device`): a CUDA target splits conv
    biases off into the next kernel (ir/conv_bias.py), which needs no GPU to analyse; the
    kernels still validate under the interpreter on the CPU."""
    from fusion_core import cli

    monkeypatch.setattr(cli, "analysis_device", lambda: request.param)
    return request.param
