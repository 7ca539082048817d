"""The fusion report: one object, ``FusionReport``, rendered as every report the run gives.

Built once at the end of the run from the session's typed records (``TestRecord``), the
baseline writes applied and the stale baselines found; returns text and rows, writes
nothing. Every rendering reads one row per test from ``rows`` (the terminal table, the
Markdown table, the HTML index), so a column is worded in one place. ``summary_lines`` is
always shown when something needs attention (created/updated/stale/improved/missing);
``table_lines``, ``markdown``, ``json_doc`` and ``index_rows`` only with
``--fusion-report``. Each ends with the update commands that create or accept what the
run found, quoted for a shell.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fusion_core.units import counted  # no torch: fusion_core loads lazily

from .compare import fmt_bytes
from .records import NOT_CHECKED, BaselineWrite, StaleBaseline, TestRecord

__all__ = ["NOT_CHECKED", "FusionReport", "table_lines", "unjudged_line"]
REPORT_SCHEMA_VERSION = 1


def update_command(mode: str, nodeids: list[str]) -> str:
    """`pytest --fusion-update-baselines=MODE` for exactly these tests, quoted for a shell
    (`[...]` of a parametrized id is a glob in zsh)."""
    return f"pytest --fusion-update-baselines={mode} " + " ".join(map(shlex.quote, nodeids))


def ratchet_command(nodeids: list[str]) -> str:
    """The update command for exactly these tests (`=all` on node ids judges no stale file)."""
    return update_command("all", nodeids)


def _ids(records: Iterable[TestRecord], *statuses: str) -> list[str]:
    return [r.nodeid for r in records if r.status in statuses]


def missing_line(records: Iterable[TestRecord]) -> list[str]:
    """One line creating every missing baseline of the run (each test's failure names its
    own; one command is what a first run of many tests needs)."""
    ids = _ids(records, "missing")
    if not ids:
        return []
    what = "1 fusion baseline is" if len(ids) == 1 else f"{len(ids)} fusion baselines are"
    return [f"{what} missing; create {'it' if len(ids) == 1 else 'them'} with: "
            + update_command("new", ids)]


# Why tests judged no timing (TestRecord.timing_gap), in the order the summary says them:
# (singular, plural) of what follows the count.
GAP_WORDS = {
    "no-baseline": ("has no baseline for this GPU", "have no baseline for this GPU",
                    " (record with `--fusion-update-baselines=new`)"),
    "other-timing": ("has timings of another clock or shape",
                     "have timings of another clock or shape",
                     " (record this run's with `--fusion-update-baselines=new`)"),
    "launch-bound": ("has only launch-bound kernels", "have only launch-bound kernels", ""),
    "few-samples": ("has too few timing samples", "have too few timing samples", ""),
    "not-measured": ("was not measured here", "were not measured here", ""),
    "no-cuda": ("was not timed (no CUDA device)", "were not timed (no CUDA device)", ""),
    "not-checked": ("does not check timings", "do not check timings", ""),
    "error": ("failed before its timings were compared",
              "failed before their timings were compared", ""),
}


HOST_BOUND_FACTOR = 1.1  # as fusion_core's model line: wall time past this is host time


def model_timing_cell(speedup: float | None, note: str, wall: float | None = None,
                      host_factor: float | None = None, launches: int | None = None) -> str:
    """`model 1.45× slower fused; <note>`: the model's speedup worded by its direction.
    With `wall` (the wall-time speedup, when `speedup` is device time) the wall figure
    leads, as it is what a caller gets: `model 1.05× faster fused (wall time; device time
    1.66× faster); <note>`; with `host_factor` (its wall time / its device time) above the
    CLI's HOST_BOUND_FACTOR, why they differ: `...; host-bound: 152 launches, wall 2.79×
    device time)` (the launch count when measured)."""
    import fusion_core  # the units module only: no torch

    if not speedup:
        return note
    if wall:
        count = f"{launches} launches, " if launches else ""
        bound = (f"; host-bound: {count}wall {host_factor:.2f}× device time"
                 if host_factor and host_factor > HOST_BOUND_FACTOR else "")
        return (f"model {fusion_core.speedup_words(wall)} fused (wall time; device time "
                f"{fusion_core.speedup_words(speedup)}{bound}); {note}")
    return f"model {fusion_core.speedup_words(speedup)} fused; {note}"


HEADER = ("test", "model", "clusters", "traffic saved", "baseline", "timings")
RATCHET_WORDS = {"improved": "improved", "unaccepted": "improved (fails until accepted)",
                 "changed": "changed (not a regression)"}


def _row(r: TestRecord) -> tuple[str, ...]:
    """One test's cells under HEADER: the only place a column is worded."""
    return (r.nodeid, r.model, str(r.clusters), fmt_bytes(r.saved_bytes), r.status,
            model_timing_cell(r.model_speedup, r.timing_note or "—", r.model_wall_speedup,
                              r.model_host_factor, r.model_launches))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


@dataclass(frozen=True)
class FusionReport:
    """The run's fusion report; see the module docstring."""

    records: tuple[TestRecord, ...]  # sorted by test id
    written: tuple[BaselineWrite, ...] = ()
    stale: tuple[StaleBaseline, ...] = ()
    stale_removed: bool = False

    @property
    def rows(self) -> tuple[tuple[str, ...], ...]:
        return tuple(_row(r) for r in self.records)

    @property
    def failing(self) -> int:
        return sum(r.failing for r in self.records)

    def table_lines(self) -> list[str]:
        """The terminal table: HEADER and one line per test, columns padded."""
        rows = [HEADER, *self.rows]
        widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
        return ["  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True))
                + "  " + row[-1] for row in rows]

    def index_rows(self, pages: Mapping[str, str]) -> list[dict[str, str]]:
        """The HTML index's rows: the same cells by column name, and `href`, the test's
        page (`pages`: test id -> its page's path relative to the index; "" when none)."""
        return [{**dict(zip(HEADER, row, strict=True)), "href": pages.get(r.nodeid, "")}
                for r, row in zip(self.records, self.rows, strict=True)]

    def summary_lines(self) -> list[str]:
        """What needs attention: writes, stale files, improvements, missing baselines."""
        out = []
        for w in self.written:
            out.append(f"{w.action} {w.shown} ({w.test})")
            out += [f"    {c}" for c in w.changes if w.action != "created"]
        for s in self.stale:
            if self.stale_removed:
                out.append(f"removed stale {s.shown} (test {s.test} no longer exists)")
            else:
                out.append(f"stale {s.shown}: test {s.test} no longer exists; remove it with "
                           "pytest --fusion-prune-stale")
        ratchet = [r for r in self.records if r.status in RATCHET_WORDS]
        for r in ratchet:
            out.append(f"{r.nodeid}: {RATCHET_WORDS[r.status]}")
            out += [f"    {m}" for m in r.messages]
        if ratchet:
            out.append("accept with: " + ratchet_command([r.nodeid for r in ratchet]))
        return out + missing_line(self.records)

    def unjudged_line(self, required: bool = False) -> str:
        """`no timing judged on NVIDIA H200: 5 tests have no baseline for this GPU (…), 2
        have only launch-bound kernels`, when the run's fusion tests judged no timing (""
        when one did, or when nothing was timed on a GPU and timings are not `required`).
        A test whose baseline this run wrote had nothing to be judged against: it is left out
        (a run that records every test's timings has nothing to say)."""
        if any(r.timings_judged for r in self.records):
            return ""
        written = {w.test for w in self.written}
        records = [r for r in self.records if r.nodeid not in written]
        if not records:
            return ""
        keys = Counter(r.hw_key for r in records if r.hw_key)
        if not keys and not required:
            return ""  # a CPU run: nothing to time, nothing to say
        # The device's name, without the compute capability the hardware key adds.
        where = f" on {keys.most_common(1)[0][0].rsplit(' sm_', 1)[0]}" if keys else ""
        gaps = Counter(r.timing_gap or "error" for r in records)
        parts = []
        for gap, (one, many, how) in GAP_WORDS.items():
            n = gaps.get(gap, 0)
            if n:
                noun = ("test " if n == 1 else "tests ") if not parts else ""
                parts.append(f"{n} {noun}{one if n == 1 else many}{how}")
        return f"no timing judged{where}: " + ", ".join(parts)

    def markdown(self, provenance: Mapping[str, str]) -> str:
        prov = ", ".join(f"{k} {v}" for k, v in provenance.items() if k != "date")
        lines = ["## Fusion report", "",
                 f"{counted(len(self.records), 'test')} checked, {self.failing} failing. "
                 f"{prov}.", ""]
        if self.records:
            lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in self.rows]
            lines.append("")
        for r in self.records:
            if r.messages:
                lines.append(f"**{_md_cell(r.nodeid)}** — {r.status}")
                lines += [f"- {m}" for m in r.messages]
                lines.append("")
        from .compiled_report import markdown_lines  # the compiled records' section, if any

        lines += markdown_lines(self.records)
        if self.written:
            lines += ["### Baselines written", ""]
            lines += [f"- {w.action} `{w.shown}`" for w in self.written]
            lines.append("")
        if self.stale:
            removed = "removed " if self.stale_removed else ""
            lines += ["### Stale baselines", ""]
            lines += [f"- {removed}`{s.shown}` (test `{s.test}`)" for s in self.stale]
            lines.append("")
        return "\n".join(lines + self._accept_md())

    def _accept_md(self) -> list[str]:
        """The commands that create or accept what this run found, last in the report."""
        steps = [("Create the missing baselines:", "new", _ids(self.records, "missing")),
                 ("Accept the regressions above, if they are intended:", "failing",
                  _ids(self.records, "regressed")),
                 ("Record the improvements and changes:", "all",
                  _ids(self.records, "improved", "changed"))]
        lines = []
        for text, mode, ids in steps:
            if ids:
                lines += [text, "", "```sh", update_command(mode, ids), "```", ""]
        return ["### Accept", "", *lines] if lines else []

    def json_doc(self, provenance: Mapping[str, str]) -> dict[str, Any]:
        return {
            "schema_version": REPORT_SCHEMA_VERSION,
            "provenance": dict(provenance),
            "tests": [r.to_data() for r in self.records],
            "baselines_written": [{"path": w.shown, "action": w.action, "test": w.test,
                                   "changes": list(w.changes)} for w in self.written],
            "stale": [{"path": s.shown, "test": s.test, "removed": self.stale_removed}
                      for s in self.stale],
        }


def table_lines(records: Sequence[TestRecord]) -> list[str]:
    """The terminal table of `records` (in their order)."""
    return FusionReport(tuple(records)).table_lines()


def unjudged_line(records: Sequence[TestRecord], required: bool = False) -> str:
    """``FusionReport.unjudged_line`` of `records`."""
    return FusionReport(tuple(records)).unjudged_line(required)
