"""The fusion report: a terminal table, a Markdown file and a JSON file.

Reads the session's test records (plain dicts), the baseline writes applied and
the stale baselines found; returns text. ``summary_lines`` is always shown when
something needs attention (created/updated/stale/improved/missing); ``table_lines``,
``markdown`` and ``json_doc`` only with ``--fusion-report``. Each ends with the update
commands that create or accept what the run found, quoted for a shell.
"""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

from .compare import fmt_bytes

REPORT_SCHEMA_VERSION = 1
FAILED = ("missing", "error", "regressed", "unaccepted")
NOT_CHECKED = "not checked: test failed before check"


def update_command(mode: str, nodeids: list[str]) -> str:
    """`pytest --fusion-update-baselines=MODE` for exactly these tests, quoted for a shell
    (`[...]` of a parametrized id is a glob in zsh)."""
    return f"pytest --fusion-update-baselines={mode} " + " ".join(map(shlex.quote, nodeids))


def ratchet_command(nodeids: list[str]) -> str:
    """The update command for exactly these tests (`=all` on node ids judges no stale file)."""
    return update_command("all", nodeids)


def _ids(records: list[dict[str, Any]], *statuses: str) -> list[str]:
    return [r["nodeid"] for r in records if r["status"] in statuses]


def missing_line(records: list[dict[str, Any]]) -> list[str]:
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


def unjudged_line(records: list[dict[str, Any]], required: bool = False) -> str:
    """`no timing judged on NVIDIA H200: 5 tests have no baseline for this GPU (…), 2 have
    only launch-bound kernels`, when the run's fusion tests judged no timing ("" when one
    did, or when nothing was timed on a GPU and timings are not `required`)."""
    if not records or any(r.get("timings_judged") for r in records):
        return ""
    keys = Counter(r["hw_key"] for r in records if r.get("hw_key"))
    if not keys and not required:
        return ""  # a CPU run: nothing to time, nothing to say
    # The device's name, without the compute capability the hardware key adds.
    where = f" on {keys.most_common(1)[0][0].rsplit(' sm_', 1)[0]}" if keys else ""
    gaps = Counter(r.get("timing_gap") or "error" for r in records)
    parts = []
    for gap, (one, many, how) in GAP_WORDS.items():
        n = gaps.get(gap, 0)
        if n:
            noun = ("test " if n == 1 else "tests ") if not parts else ""
            parts.append(f"{n} {noun}{one if n == 1 else many}{how}")
    return f"no timing judged{where}: " + ", ".join(parts)


def model_timing_cell(speedup: float | None, note: str, wall: float | None = None) -> str:
    """`model 1.45× slower fused; <note>`: the model's speedup worded by its direction.
    With `wall` (the wall-time speedup, when `speedup` is device time) the wall figure
    leads, as it is what a caller gets: `model 1.05× faster fused (wall time; device time
    1.66× faster); <note>`."""
    import fusion_core  # the units module only: no torch

    if not speedup:
        return note
    if wall:
        return (f"model {fusion_core.speedup_words(wall)} fused (wall time; device time "
                f"{fusion_core.speedup_words(speedup)}); {note}")
    return f"model {fusion_core.speedup_words(speedup)} fused; {note}"


def _timings(r: dict[str, Any]) -> str:
    return model_timing_cell(r.get("model_speedup"), r.get("timing_note") or "—",
                             r.get("model_wall_speedup"))


def _row(r: dict[str, Any]) -> tuple[str, ...]:
    return (r["nodeid"], r["model"], str(r["clusters"]), fmt_bytes(r["saved_bytes"]),
            r["status"], _timings(r))


HEADER = ("test", "model", "clusters", "traffic saved", "baseline", "timings")


def table_lines(records: list[dict[str, Any]]) -> list[str]:
    rows = [HEADER] + [_row(r) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True))
            + "  " + row[-1] for row in rows]


def summary_lines(records: list[dict[str, Any]], writes: list[dict[str, Any]],
                  stale: list[dict[str, Any]], removed: bool) -> list[str]:
    out = []
    for w in writes:
        out.append(f"{w['action']} {w['path_shown']} ({w['test']})")
        out += [f"    {c}" for c in w["changes"] if w["action"] != "created"]
    for s in stale:
        if removed:
            out.append(f"removed stale {s['path']} (test {s['test']} no longer exists)")
        else:
            out.append(f"stale {s['path']}: test {s['test']} no longer exists; remove it with "
                       "pytest --fusion-prune-stale")
    ratchet = [r for r in records if r["status"] in ("improved", "unaccepted", "changed")]
    for r in ratchet:
        word = {"improved": "improved", "unaccepted": "improved (fails until accepted)",
                "changed": "changed (not a regression)"}[r["status"]]
        out.append(f"{r['nodeid']}: {word}")
        out += [f"    {m}" for m in r["messages"]]
    if ratchet:
        out.append("accept with: " + ratchet_command([r["nodeid"] for r in ratchet]))
    return out + missing_line(records)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(records: list[dict[str, Any]], writes: list[dict[str, Any]],
             stale: list[dict[str, Any]], removed: bool, provenance: dict[str, str]) -> str:
    prov = ", ".join(f"{k} {v}" for k, v in provenance.items() if k != "date")
    failed = sum(r["status"] in FAILED for r in records)
    lines = ["## Fusion report", "",
             f"{len(records)} test(s) checked, {failed} failing. {prov}.", ""]
    if records:
        lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(_md_cell(c) for c in _row(r)) + " |" for r in records]
        lines.append("")
    details = [r for r in records if r["messages"]]
    for r in details:
        lines.append(f"**{_md_cell(r['nodeid'])}** — {r['status']}")
        lines += [f"- {m}" for m in r["messages"]]
        lines.append("")
    from .compiled_report import markdown_lines  # the compiled records' section, if any

    lines += markdown_lines(records)
    if writes:
        lines += ["### Baselines written", ""]
        lines += [f"- {w['action']} `{w['path_shown']}`" for w in writes]
        lines.append("")
    if stale:
        lines += ["### Stale baselines", ""]
        lines += [f"- {'removed ' if removed else ''}`{s['path']}` (test `{s['test']}`)"
                  for s in stale]
        lines.append("")
    return "\n".join(lines + _accept_md(records))


def _accept_md(records: list[dict[str, Any]]) -> list[str]:
    """The commands that create or accept what this run found, last in the report."""
    steps = [("Create the missing baselines:", "new", _ids(records, "missing")),
             ("Accept the regressions above, if they are intended:", "failing",
              _ids(records, "regressed")),
             ("Record the improvements and changes:", "all",
              _ids(records, "improved", "changed"))]
    lines = []
    for text, mode, ids in steps:
        if ids:
            lines += [text, "", "```sh", update_command(mode, ids), "```", ""]
    return ["### Accept", "", *lines] if lines else []


def json_doc(records: list[dict[str, Any]], writes: list[dict[str, Any]],
             stale: list[dict[str, Any]], removed: bool,
             provenance: dict[str, str]) -> dict[str, Any]:
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "provenance": provenance,
        "tests": records,
        "baselines_written": [{"path": w["path_shown"], "action": w["action"], "test": w["test"],
                               "changes": w["changes"]} for w in writes],
        "stale": [{**s, "removed": removed} for s in stale],
    }
