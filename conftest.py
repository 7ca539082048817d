"""Root conftest: applies to tests/ and examples/.

TRITON_INTERPRET must be set before any @triton.jit decorator runs, so without a
GPU it is set here, before test modules (and generated kernel files) import triton.
GPU-marked tests skip cleanly without CUDA; cpu-marked tests (what a machine without CUDA
reports: interpreter kernels, no timings) skip where CUDA is available.
"""

import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def worker_threads(worker_count: str | None, cores: int) -> int | None:
    """An xdist worker's share of the cores (`worker_count`: xdist's
    PYTEST_XDIST_WORKER_COUNT), at least one; None outside xdist."""
    if not worker_count:
        return None
    return max(1, cores // int(worker_count))


# Each xdist worker runs torch on its share of the cores, and so do the processes it starts
# (through OMP_NUM_THREADS); else every worker's torch takes one thread a core. The CPU suite
# at -n 2 on 2 cores took 514-591 s so, 380 s with one thread a worker (2026-12-07). A value
# the user set is kept.
THREADS_SET = None
if "OMP_NUM_THREADS" not in os.environ:
    THREADS_SET = worker_threads(os.environ.get("PYTEST_XDIST_WORKER_COUNT"), cores())
    if THREADS_SET is not None:
        os.environ["OMP_NUM_THREADS"] = str(THREADS_SET)
        torch.set_num_threads(THREADS_SET)

# Installed, the fusion plugin loads through its `pytest11` entry point; a checkout run
# with PYTHONPATH=. (no install) loads it here.
_INSTALLED = any(ep.value.startswith("pytest_fusion")
                 for ep in entry_points(group="pytest11"))
pytest_plugins = ["pytester"] if _INSTALLED else ["pytester", "pytest_fusion.plugin"]


@pytest.fixture(autouse=True)
def _interpreter_switch_undone():
    """Triton picks interpreted or compiled as each @triton.jit decorator runs: a test that
    leaves TRITON_INTERPRET changed (the CLI sets it where it sees no CUDA) makes the later
    tests of a GPU machine's worker decorate their kernels for the interpreter, against
    triton's own compiled functions ("Cannot call @triton.jit'd outside of the scope of a
    kernel"). Runs after the test's monkeypatch is undone; puts the variable back and fails."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    after = os.environ.get("TRITON_INTERPRET")
    if after != before:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
        pytest.fail(f"the test left TRITON_INTERPRET={after!r} (it was {before!r})")


# Folders a test must not write into: the root (`tmp_path / "//"` is "/", where every test
# and xdist worker then shares one file) and the checkout. Dot-names (caches) are left out,
# and only the top level is watched: new entries in both, and in the checkout files written
# again (a machine's own files in "/" may change while the suite runs).
ROOT_DIR, CHECKOUT = Path("/"), Path(__file__).resolve().parent


def _entries() -> dict[Path, float | None]:
    """Each watched top-level entry and, for a file of the checkout, when it was written."""
    found: dict[Path, float | None] = {}
    for folder in (ROOT_DIR, CHECKOUT):
        with os.scandir(folder) as entries:
            for e in entries:
                if not e.name.startswith("."):
                    file = folder == CHECKOUT and e.is_file(follow_symlinks=False)
                    found[Path(e.path)] = e.stat(follow_symlinks=False).st_mtime if file else None
    return found


@pytest.fixture(autouse=True)
def _writes_stay_in_tmp_path():
    """A test writes under its tmp_path: one that leaves a new entry in the root or the
    checkout, or writes a file of the checkout again, fails, naming it. (On an H100 two workers'
    kernels met in /cluster0.py and one compiled the other's.) Under xdist a test running
    beside it on another worker may be named too: the entry says which."""
    before = _entries()
    yield
    after = _entries()
    left = sorted(str(p) for p, written in after.items()
                  if p not in before or (written is not None and written != before[p]))
    if left:
        pytest.fail(f"the test left {', '.join(left)} outside its tmp_path (new or written "
                    "again)")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test module that changes TRITON_INTERPRET as it is imported (a helper's
    `os.environ.setdefault`) turns every later kernel of that worker into an interpreted one
    on a GPU machine; collecting it is an error that names the module, and the variable is
    put back."""
    before = os.environ.get("TRITON_INTERPRET")
    report = yield
    after = os.environ.get("TRITON_INTERPRET")
    if after != before and isinstance(collector, pytest.Module):
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
        report.outcome = "failed"
        report.longrepr = (f"importing {collector.path.name} set TRITON_INTERPRET={after!r} "
                           f"(it was {before!r}): set it in a runner's main(), not at import")
    return report


def pytest_collection_modifyitems(config, items):
    # gpu tests need CUDA; cpu tests check what a machine without CUDA reports
    # (interpreter kernels, no timings), which one with CUDA does not.
    marker, reason = (("cpu", "checks the no-CUDA answers; this machine has CUDA")
                      if HAS_CUDA else ("gpu", "needs a CUDA GPU"))
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if marker in item.keywords:
            item.add_marker(skip)
