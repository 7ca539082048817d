"""Nsight Compute's text report of a `benchmarks/ncu_rows.py` run as one Markdown table: a row
per panel case and kernel, with the counters that say why a row misses 85% of a copy.

Run from the repository root on the saved output (no GPU needed):

    python tools/ncu_table.py benchmarks/measured/h100_2026-12-07_afternoon/ncu.txt

Reads the `ncu` stdout of `ncu_rows.py` (sections SpeedOfLight, Occupancy, WarpStateStats,
LaunchStats). `ncu_rows.py` prints "case N: label, default [...]" after each case's launches,
and `ncu` prints a "==PROF== Profiling" line per launch as it happens and the reports, in
launch order, when the process ends: a report belongs to the first launch of its kernel not
yet matched, and a launch to the case whose line follows it. Of a kernel launched several
times the last report is kept (warm caches, as the panel's replays run). Stalls are read
from the WarpStateStats rules ("each warp ... spends X cycles being stalled ... This stall
type represents about Y% of the total average of Z cycles"), the two largest named.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

PROFILING = re.compile(r'^==PROF== Profiling "(?P<kernel>[^"]+)"')
CASE = re.compile(r"^case (?P<number>\d+): (?P<label>.*), default (?P<config>\[.*\])\s*$")
REPORT = re.compile(r"^  (?P<kernel>\w+) \((?P<grid>[\d, ]+)\)x\((?P<block>[\d, ]+)\), Context")
METRIC = re.compile(r"^ {4}(?P<name>\S.*?\S) {2,}(?:(?P<unit>\S+) {2,})?(?P<value>[\d,.]+)\s*$")
STALL = re.compile(r"spends (?P<cycles>[\d.]+) cycles being stalled (?P<why>(?:(?!spends).)*?)\. "
                   r"(?:(?!spends).)*?represents about (?P<share>[\d.]+)% of the total average "
                   r"of (?P<between>[\d.]+) cycles")
# the stall's words in the rule, and the name it goes by here
STALL_NAMES = (("scoreboard dependency on a L1TEX", "L1TEX scoreboard"),
               ("micro scheduler to select", "not selected"),
               ("sibling warps at a CTA barrier", "barrier"),
               ("scoreboard dependency on a MIO", "MIO scoreboard"),
               ("execution pipe to be available", "pipe busy"),
               ("fixed latency execution dependency", "execution dependency"),
               ("MIO (memory input/output) instruction queue", "MIO throttle"),
               ("memory barrier", "membar"))


@dataclass(frozen=True)
class Report:
    """One kernel launch's counters: {(metric, unit): value} and its stalls, largest first
    (name, share of the cycles between issues in %, those cycles)."""

    kernel: str
    grid: str
    block: str
    metrics: dict[tuple[str, str], float]
    stalls: tuple[tuple[str, float, float], ...]

    def get(self, name: str, unit: str = "") -> float | None:
        return self.metrics.get((name, unit))


@dataclass(frozen=True)
class Case:
    number: int
    label: str
    config: str
    reports: tuple[Report, ...]  # the last of each kernel, in launch order


def stall_name(why: str) -> str:
    for words, name in STALL_NAMES:
        if words in why:
            return name
    return why.removeprefix("waiting for ")[:40]


def _finish(header: tuple[str, str, str], metrics: dict[tuple[str, str], float],
            text: list[str]) -> Report:
    """The report whose header line gave (kernel, grid, block) and whose lines are `text`."""
    joined = " ".join(" ".join(text).split())
    stalls = [(stall_name(m["why"]), float(m["share"]), float(m["between"]))
              for m in STALL.finditer(joined)]
    return Report(*header, metrics, tuple(sorted(stalls, key=lambda s: -s[1])))


def _owned(launches: list[str], owners: list[tuple[int, str, str, int]],
           reports: list[Report]) -> list[Case]:
    """One process's cases: each report goes to the first launch of its kernel not yet
    matched (a launch ncu printed no report for is skipped, not given the next report),
    and a launch to the first case whose line came after it."""
    matched: list[list[Report]] = [[] for _ in owners]
    at = 0
    for report in reports:
        while at < len(launches) and launches[at] != report.kernel:
            at += 1
        if at == len(launches):
            break  # more reports than launches of that name: not this tool's output
        owner = next((i for i, o in enumerate(owners) if o[3] > at), None)
        if owner is not None:  # launches after the last case line have no case
            matched[owner].append(report)
        at += 1
    cases = []
    for (number, label, config, _), own in zip(owners, matched, strict=True):
        last: dict[str, Report] = {}
        for report in own:
            last.pop(report.kernel, None)  # keeps launch order of the kept ones
            last[report.kernel] = report
        cases.append(Case(number, label, config, tuple(last.values())))
    return cases


def parse(text: str) -> list[Case]:
    """The cases of one or more `ncu` runs' output, in order."""
    cases: list[Case] = []
    launches: list[str] = []  # this process's launches, in order
    owners: list[tuple[int, str, str, int]] = []  # (number, label, config, launches so far)
    reports: list[Report] = []
    header: tuple[str, str, str] | None = None  # the report being read: kernel, grid, block
    metrics: dict[tuple[str, str], float] = {}
    lines: list[str] = []

    def close_report() -> None:
        nonlocal header
        if header is not None:
            reports.append(_finish(header, metrics, lines))
            header = None

    def close_process() -> None:
        close_report()
        cases.extend(_owned(launches, owners, reports))
        owners.clear()
        reports.clear()
        launches.clear()

    for line in text.splitlines():
        if line.startswith("==PROF== Connected"):  # a new process: the last one is done
            close_process()
        elif m := PROFILING.match(line):
            launches.append(m["kernel"])
        elif m := CASE.match(line):
            owners.append((int(m["number"]), m["label"], m["config"], len(launches)))
        elif m := REPORT.match(line):
            close_report()
            header, metrics, lines = (m["kernel"], _dims(m["grid"]), _dims(m["block"])), {}, []
        elif header is not None:
            lines.append(line)
            if m := METRIC.match(line):
                value = m["value"].replace(",", "")
                metrics.setdefault((m["name"], m["unit"] or ""), float(value))
    close_process()
    return cases


def _dims(spelled: str) -> str:
    """"64, 4, 1" as "64,4": trailing dims of 1 dropped."""
    dims = [d.strip() for d in spelled.split(",")]
    while len(dims) > 1 and dims[-1] == "1":
        dims.pop()
    return ",".join(dims)


def _num(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def table(cases: list[Case]) -> str:
    head = ("| case (default configuration) | kernel | grid × block | µs | DRAM % | SM % | regs "
            "| occupancy theoretical / achieved % | waves | top stalls (share of the cycles "
            "between issues) |")
    rows = [head, "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for case in cases:
        for i, r in enumerate(case.reports):
            name = f"{case.number}: {case.label} ({case.config})" if i == 0 else ""
            stalls = ", ".join(f"{s} {share:.0f}%" for s, share, _ in r.stalls[:2])
            if r.stalls:
                stalls += f" ({r.stalls[0][2]:.1f} cycles)"
            occupancy = (f"{_num(r.get('Theoretical Occupancy', '%'))} / "
                         f"{_num(r.get('Achieved Occupancy', '%'))}")
            rows.append(
                f"| {name} | {r.kernel} | {r.grid} × {r.block} "
                f"| {_num(r.get('Duration', 'us'), 1)} "
                f"| {_num(r.get('DRAM Throughput', '%'))} "
                f"| {_num(r.get('Compute (SM) Throughput', '%'))} "
                f"| {_num(r.get('Registers Per Thread', 'register/thread'))} | {occupancy} "
                f"| {_num(r.get('Waves Per SM'), 2)} | {stalls or '–'} |")
        if not case.reports:
            rows.append(f"| {case.number}: {case.label} ({case.config}) | no report | | | | | | "
                        "| | |")
    return "\n".join(rows)


def _refuse(why: str) -> int:
    print(f"ncu_table: {why}", file=sys.stderr)
    return 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="ncu's stdout of a benchmarks/ncu_rows.py run")
    args = parser.parse_args()
    try:
        text = args.report.read_text()
    except OSError as e:
        return _refuse(f"cannot read {args.report}: {e.strerror}; pass the file ncu's output "
                       "was saved to")
    cases = parse(text)
    if not cases:
        return _refuse(f"{args.report} names no case; pass the output of `ncu ... python "
                       "benchmarks/ncu_rows.py`")
    print(table(cases))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
