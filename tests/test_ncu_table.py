"""tools/ncu_table.py on Nsight Compute output saved from H100 runs of benchmarks/ncu_rows.py:
each case gets its own kernels' last reports, the counters as ncu printed them, the stalls by
share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import ncu_table  # noqa: E402

MEASURED = ROOT / "benchmarks" / "measured" / "h100_2026-12-07_afternoon"


def test_each_case_takes_the_reports_of_its_own_launches():
    cases = ncu_table.parse((MEASURED / "ncu.txt").read_text())
    assert [(c.number, [r.kernel for r in c.reports]) for c in cases] == [
        (9, ["cluster0_kernel"]), (37, ["cluster0_joined"]),
        (4, ["cluster0_partials", "cluster0_finish"])]
    assert cases[2].config == "[8192, 1, 16, 4]"
    assert cases[2].label == "softmax(x/8) 64x262144 float16"


def test_a_kernel_launched_twice_keeps_its_second_report():
    (case9, *_) = ncu_table.parse((MEASURED / "ncu.txt").read_text())
    (report,) = case9.reports
    # the first launch read 32.06 us and 83.44% achieved occupancy, the second these
    assert report.get("Duration", "us") == 32.16
    assert report.get("Achieved Occupancy", "%") == 85.65
    assert report.get("Registers Per Thread", "register/thread") == 32
    assert report.get("Waves Per SM") == 1.94
    assert (report.grid, report.block) == ("1024", "512")


def test_stalls_are_named_and_ordered_by_share():
    cases = ncu_table.parse((MEASURED / "call2" / "ncu.txt").read_text())
    rms = next(c for c in cases if c.number == 49)
    (joined,) = rms.reports
    assert [name for name, _, _ in joined.stalls][:2] == ["L1TEX scoreboard", "barrier"]
    assert joined.stalls[0][1] == 48.3 and joined.stalls[0][2] == 49.7
    (case9, *_) = ncu_table.parse((MEASURED / "ncu.txt").read_text())
    assert {name for name, _, _ in case9.reports[0].stalls} == {"not selected",
                                                                "L1TEX scoreboard"}


def test_a_run_cut_short_lists_the_cases_it_reached():
    """The second run's case 21 failed before printing its line: three cases, no fourth."""
    cases = ncu_table.parse((MEASURED / "call2" / "ncu.txt").read_text())
    assert [c.number for c in cases] == [17, 22, 49]


def test_two_runs_in_one_file_keep_their_own_reports():
    text = (MEASURED / "ncu.txt").read_text() + (MEASURED / "call2" / "ncu.txt").read_text()
    cases = ncu_table.parse(text)
    assert [c.number for c in cases] == [9, 37, 4, 17, 22, 49]
    assert cases[3].reports[0].get("Registers Per Thread", "register/thread") == 56


def test_the_table_has_a_row_per_kernel():
    table = ncu_table.table(ncu_table.parse((MEASURED / "ncu.txt").read_text()))
    rows = table.splitlines()[2:]
    assert len(rows) == 4  # case 4 has two kernels
    assert rows[3].startswith("|  | cluster0_finish | 64,4 × 512 | 21.9 | 64 | 32 | 32 | 100 / 44")


def test_a_file_naming_no_case_is_refused_in_one_line(tmp_path):
    empty = tmp_path / "out.txt"
    empty.write_text("==PROF== Connected to process 1\n")
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "ncu_table.py"), str(empty)],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"ncu_table: {empty} names no case; pass the output of `ncu ... python "
        "benchmarks/ncu_rows.py`"]


def test_a_missing_file_is_refused_in_one_line(tmp_path):
    missing = tmp_path / "none.txt"
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "ncu_table.py"), str(missing)],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"ncu_table: cannot read {missing}: No such file or directory; pass the file ncu's "
        "output was saved to"]
