"""Time the fusion plugin adds to a pytest run that has no fusion test.

    python benchmarks/plugin_startup.py [--repeat 15]

Writes a throwaway project with one ordinary test, then runs pytest on it in fresh
subprocesses, alternating a run without the plugin (`-p no:fusion`) and a run with
it, --repeat times each; prints both medians and the difference (the plugin's cost:
importing it, its header line, its hooks, and its session-end bookkeeping). Runs use
the default verbosity (the header is printed), and both disable the cache provider and
hypothesis' plugin (whose end-of-run import of all of hypothesis swamps the difference),
so the two differ only by the fusion plugin. Each run is timed twice: wall clock, and the
CPU time (user + system) the pytest process used, which a machine shared with other work
disturbs far less; the target applies to both. Bytecode is cached under the temporary
folder (PYTHONPYCACHEPREFIX), as in an installed environment, even where the shell sets
PYTHONDONTWRITEBYTECODE. Reads nothing of the checkout but the installed plugin; writes
only the temporary folder. Target: < 50 ms added.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

TEST = "def test_one():\n    assert 1 + 1 == 2\n"


def _plugin_args() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(args without the plugin, args with it): by entry point when installed, else by name."""
    installed = any(ep.value.startswith("pytest_fusion")
                    for ep in metadata.entry_points(group="pytest11"))
    if installed:
        return ("-p", "no:fusion"), ()
    return (), ("-p", "pytest_fusion.plugin")


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_once(project: Path, extra: tuple[str, ...]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one pytest run."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
           *extra]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(project.parent / "pycache")
    cpu, start = _child_cpu(), time.perf_counter()
    done = subprocess.run(cmd, cwd=project, capture_output=True, text=True, env=env)
    elapsed, cpu = time.perf_counter() - start, _child_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"pytest failed in {project}:\n{done.stdout}{done.stderr}")
    return elapsed, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15, help="runs of each kind")
    args = ap.parse_args()
    without, with_plugin = _plugin_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        (project / "pytest.ini").write_text("[pytest]\n")
        (project / "test_one.py").write_text(TEST)
        _run_once(project, without)  # warm the file cache once, untimed
        _run_once(project, with_plugin)
        off, on = [], []
        for _ in range(args.repeat):  # alternate, so load drift hits both alike
            off.append(_run_once(project, without))
            on.append(_run_once(project, with_plugin))
    figures = []
    for i, what in enumerate(("wall", "CPU")):
        m_off = statistics.median(t[i] for t in off)
        m_on = statistics.median(t[i] for t in on)
        figures.append(f"{what} {m_off * 1000:.0f} → {m_on * 1000:.0f} ms "
                       f"({(m_on - m_off) * 1000:+.0f} ms)")
    print(f"{datetime.date.today().isoformat()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, torch {metadata.version('torch')}, {args.repeat} runs "
          f"each, medians without → with the plugin, a run with no fusion test: "
          + "; ".join(figures))


if __name__ == "__main__":
    main()
