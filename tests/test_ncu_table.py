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
    """The second run's case 21 failed before its first launch and printed no line: three
    cases, no fourth (the synthetic cases below cut a process after its launches)."""
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


def _run(report: Path) -> tuple[int, list[str]]:
    """The tool run on `report` in a process of its own: its exit code and stderr lines."""
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "ncu_table.py"), str(report)],
                         capture_output=True, text=True)
    return run.returncode, run.stderr.strip().splitlines()


def test_a_file_naming_no_case_is_refused_in_one_line(tmp_path):
    empty = tmp_path / "out.txt"
    empty.write_text("==PROF== Connected to process 1\n")
    assert _run(empty) == (2, [f"ncu_table: {empty} names no case; pass the output of `ncu ... "
                               "python benchmarks/ncu_rows.py`"])


def test_a_missing_file_is_refused_in_one_line(tmp_path):
    missing = tmp_path / "none.txt"
    assert _run(missing) == (2, [f"ncu_table: cannot read {missing}: No such file or directory; "
                                 "pass the file ncu's output was saved to"])


def _report(kernel: str, us: float, stalls: tuple[tuple[float, str], ...] = ()) -> list[str]:
    """A report block as ncu prints it: header, a Duration metric, stall rules."""
    lines = [f"  {kernel} (8, 1, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0",
             "    Section: GPU Speed Of Light Throughput",
             f"    Duration                         us        {us}", ""]
    for share, why in stalls:
        lines += ["    OPT   Est. Local Speedup: 10%",
                  "          On average, each warp of this workload spends 2.0 cycles being "
                  f"stalled waiting for {why}.",
                  "          Some advice. This stall type represents about "
                  f"{share}% of the total average of 9.5 cycles", "          between issuing."]
    return lines


def _process(events: list[str], reports: list[list[str]]) -> list[str]:
    return ["==PROF== Connected to process 1 (/usr/bin/python3)", *events,
            "==PROF== Disconnected from process 1", *(line for r in reports for line in r)]


def _profiling(kernel: str) -> str:
    return f'==PROF== Profiling "{kernel}": 0%....50%....100% - 18 passes'


def test_a_process_killed_before_its_case_line_lends_its_launches_to_no_later_case():
    """The first process was cut after two launches (no case line, no reports); the next
    one's cases get their own kernels."""
    text = "\n".join([
        "==PROF== Connected to process 1 (/usr/bin/python3)",
        _profiling("cluster0_joined"), _profiling("cluster0_joined"),
        *_process([_profiling("cluster0_kernel"), "case 9: ln bfloat16, default [1]",
                   _profiling("cluster0_joined"), "case 37: ln2 float32, default [2]"],
                  [_report("cluster0_kernel", 1.5), _report("cluster0_joined", 2.5)])])
    cases = ncu_table.parse(text)
    assert [(c.number, [(r.kernel, r.get("Duration", "us")) for r in c.reports])
            for c in cases] == [(9, [("cluster0_kernel", 1.5)]), (37, [("cluster0_joined", 2.5)])]


def test_a_launch_ncu_printed_no_report_for_shifts_no_later_case():
    """Case 4's partials launch got no report (a failed profile): its finish report stays
    case 4's and case 9's kernel stays case 9's."""
    text = "\n".join(_process(
        [_profiling("cluster0_partials"), _profiling("cluster0_finish"),
         "case 4: softmax float16, default [1]",
         _profiling("cluster0_kernel"), "case 9: ln bfloat16, default [2]"],
        [_report("cluster0_finish", 3.0), _report("cluster0_kernel", 4.0)]))
    cases = ncu_table.parse(text)
    assert [(c.number, [r.kernel for r in c.reports]) for c in cases] == [
        (4, ["cluster0_finish"]), (9, ["cluster0_kernel"])]


def test_stalls_printed_smaller_first_are_listed_larger_first():
    text = "\n".join(_process(
        [_profiling("cluster0_kernel"), "case 9: ln bfloat16, default [1]"],
        [_report("cluster0_kernel", 1.0, ((12.5, "sibling warps at a CTA barrier"),
                                          (40.0, "a scoreboard dependency on a L1TEX "
                                                 "(local, global) operation")))]))
    (case,) = ncu_table.parse(text)
    assert case.reports[0].stalls == (("L1TEX scoreboard", 40.0, 9.5), ("barrier", 12.5, 9.5))
