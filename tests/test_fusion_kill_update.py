"""Kill `pytest --fusion-update-baselines=all` at random moments: every baseline stays
complete (the old one or the new one, never half), and the next run leaves no temp file."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest
import yaml
from fusion_plugin_helpers import PLUGIN_ARGS, marked_test, model_source, run

from pytest_fusion.schema import from_data

N_TESTS = 6
# Slow each fsync down, in the killed process only: it widens the moment between a temp
# file's write and its rename, the moment a kill must not turn into a torn baseline.
SLOW_FSYNC = """\
import os
import time

_fsync = os.fsync

def _slow_fsync(fd):
    time.sleep(0.02)
    _fsync(fd)

os.fsync = _slow_fsync
"""

pytestmark = pytest.mark.usefixtures("torch_warm")


def _tests_source() -> str:
    # N_TESTS tests, each with its own baseline file.
    return "\n".join(marked_test(f"test_{i}") for i in range(N_TESTS))


def _temps(folder):
    return sorted(folder.glob(".*.fusion-tmp"))


def _writing(folder, old: dict) -> tuple[bool, bool]:
    """(writes started, writes under way): a temp file, or some baselines changed."""
    changed = [p.stat().st_mtime_ns != m for p, m in old.items()]
    return bool(_temps(folder)) or any(changed), bool(_temps(folder)) or (
        any(changed) and not all(changed))


def _kill_during_update(root, old: dict, rng: random.Random) -> bool:
    """Start an `=all` run and SIGKILL it at a random moment; True if a write was under way.

    `old`: baseline path -> its mtime before the run."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider", "-p",
         "no:hypothesispytest", "-q", "--fusion-update-baselines=all"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = root / "fusion_baselines"
    if rng.random() < 0.25:  # any moment of the run: startup, collection, tests, writes
        time.sleep(rng.uniform(0.5, 4.0))
    else:  # a moment inside the writes: after the first one starts
        deadline = time.monotonic() + 60
        while (proc.poll() is None and not _writing(folder, old)[0]
               and time.monotonic() < deadline):
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.08))
    mid_write = _writing(folder, old)[1]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return mid_write and proc.returncode == -signal.SIGKILL


@pytest.mark.slow  # ~25 s on 2 shared cores: three killed subprocess runs (torch import each)
# The kill moments are drawn for a run without CUDA: with a GPU the update runs also time
# every kernel, and the writes come after a wait these moments do not reach.
@pytest.mark.cpu
def test_killed_update_runs_leave_complete_baselines_and_no_temp_file(pytester, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(model=model_source("base"), test_net=_tests_source())
    run(pytester, "--fusion-update-baselines=new").assert_outcomes(passed=N_TESTS)
    folder = pytester.path / "fusion_baselines"
    old = {p: p.read_bytes() for p in folder.glob("*.yaml")}
    assert len(old) == N_TESTS
    pytester.makepyfile(model=model_source("grown"))  # every baseline gets rewritten by =all
    pytester.makeconftest(SLOW_FSYNC)
    interrupted = 0
    for seed in range(3):
        for path, text in old.items():  # each kill starts from the old baselines
            path.write_bytes(text)
        mtimes = {p: p.stat().st_mtime_ns for p in old}
        interrupted += _kill_during_update(pytester.path, mtimes, random.Random(seed))
        assert sorted(folder.glob("*.yaml")) == sorted(old)  # none lost, none added
        for path, text in old.items():
            data = yaml.safe_load(path.read_text())
            snap = from_data(data, path.name)  # complete: parses and validates
            if path.read_bytes() != text:  # the new one: the grown cluster, whole
                assert [c.ops for c in snap.clusters] == [("mul", "relu", "add", "sigmoid")]
    assert interrupted, "no kill landed during the baseline writes"
    (pytester.path / "conftest.py").unlink()
    r = run(pytester)
    r.assert_outcomes(passed=N_TESTS)  # old baselines: "improved"; new ones: pass
    assert _temps(folder) == []
