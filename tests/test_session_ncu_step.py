"""`bash benchmarks/h200_session.sh ncu` without a GPU: stand-ins for `ncu` and `nvidia-smi`
on PATH (the first prints a saved H100 report of case 9, or fails), so the step's loop, its
budget and its table are what is checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAVED = ROOT / "benchmarks" / "measured" / "h100_2026-12-07_afternoon" / "ncu.txt"


def _stand_ins(folder: Path, ncu_rc: int) -> Path:
    """A folder holding `ncu` (prints case 9's saved process, exits `ncu_rc`) and
    `nvidia-smi`."""
    folder.mkdir()
    lines = SAVED.read_text().splitlines()
    case9 = "\n".join(lines[:5] + lines[11:147])  # its launches, its line, its first report
    (folder / "case9.txt").write_text(case9 + "\n")
    (folder / "ncu").write_text(f"#!/bin/sh\ncat '{folder / 'case9.txt'}'\nexit {ncu_rc}\n")
    (folder / "nvidia-smi").write_text("#!/bin/sh\necho 'a stand-in GPU, 0'\n")
    for name in ("ncu", "nvidia-smi"):
        (folder / name).chmod(0o755)
    return folder


def _session(tmp_path: Path, ncu_rc: int = 0, **env: str) -> tuple[str, Path]:
    out = tmp_path / "out"
    bin_dir = _stand_ins(tmp_path / "bin", ncu_rc)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent),
                            os.environ.get("PATH", "")])
    run = subprocess.run(["bash", str(ROOT / "benchmarks" / "h200_session.sh"), "ncu"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PATH": path, "OUT": str(out), **env})
    assert run.returncode == 0, run.stderr
    return run.stdout, out


def test_each_case_runs_in_its_own_process_and_the_table_has_its_row(tmp_path):
    stdout, out = _session(tmp_path, NCU_CASES="9,37")
    table = (out / "ncu_table.md").read_text().splitlines()
    # the stand-in prints case 9 for both calls: two processes, two rows
    assert [r.split(" | ")[0] for r in table[2:]] == [
        "| 9: layer_norm->gelu 1024x16384 bfloat16 ([4096, 1, 16, 1])"] * 2
    assert table[2].split(" | ")[3:6] == ["32.1", "44", "66"]
    assert "ncu: case" not in stdout


def test_a_case_whose_limit_does_not_fit_the_budget_is_not_started(tmp_path):
    stdout, out = _session(tmp_path, NCU_CASES="9,37", NCU_BUDGET="30",
                           NCU_CASE_TIMEOUT="90")
    assert "ncu: NCU_BUDGET spent; not run: case 9 and those after it" in stdout
    assert (out / "ncu.txt").read_text() == ""


def test_a_failed_case_is_named_with_its_exit_code(tmp_path):
    stdout, _ = _session(tmp_path, ncu_rc=3, NCU_CASES="9")
    assert "ncu: case 9 rc=3 (124: past NCU_CASE_TIMEOUT)" in stdout
