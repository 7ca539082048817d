"""The compiled record in the fusion report: per test, our clusters beside Inductor's
kernels, the agreements and each disagreement with its reason.

``summary`` reads a test's snapshot clusters (their op chains and lines), its compiled
records as baseline data and the agreement ``fusion_core.compiled_record`` made of them
(``fusion_core.inductor.match.to_dict``); it returns the plain data the test's record keeps
(``TestRecord.compiled``), so the JSON report has it as is. ``terminal_lines`` and
``markdown_lines`` read the session's records and return text for the terminal summary and
the Markdown report. No torch import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fusion_core.units import counted

SAME = "same group"  # match.SAME: the verdict of a cluster Inductor fuses exactly so


def summary(clusters: Sequence[Any], records: Mapping[str, dict[str, Any]],
            agreements: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{backend: counts, our clusters with Inductor's verdict, Inductor's missed kernels}.
    `clusters`: the snapshot's, in the analysis' order (cluster i is `clusters[i]`)."""
    chains = {i: (c.chain, c.lines) for i, c in enumerate(clusters)}
    out: dict[str, dict[str, Any]] = {}
    for backend, data in sorted(records.items()):
        kernels = data.get("kernels", ())
        entry: dict[str, Any] = {
            "kernels": sum(k.get("kind") != "extern" for k in kernels),
            "library_calls": sum(k.get("kind") == "extern" for k in kernels),
            "graphs": data.get("graphs", 1),
            "graph_breaks": len(data.get("graph_breaks", ())),
            "recompiles": data.get("recompiles", 0),
            "bytes_moved": data.get("bytes_moved"),
        }
        agreement = agreements.get(backend)
        if agreement:
            entry["clusters"] = [
                {"cluster": v["cluster"], "ops": chains.get(v["cluster"], ("?", "?"))[0],
                 "where": chains.get(v["cluster"], ("?", "?"))[1], "verdict": v["verdict"],
                 "kernels": list(v["kernels"]), "detail": v["detail"]}
                for v in agreement.get("cluster_verdicts", ())]
            entry["missed"] = [
                {"kernel": k["name"], "ops": list(k["ops"]), "lines": list(k["lines"]),
                 "reason": k.get("reason") or ""}
                for k in agreement.get("kernels", ()) if k.get("status") == "missed"]
        out[backend] = entry
    return out


def _counts(entry: dict[str, Any]) -> str:
    def n(count: int, noun: str) -> str:
        return f"{count} {noun}{'' if count == 1 else 's'}"

    return ", ".join([n(entry["kernels"], "kernel"), n(entry["library_calls"], "library call"),
                      n(entry["graphs"], "graph"), n(entry["graph_breaks"], "graph break"),
                      n(entry["recompiles"], "recompile")])


def _agreement_words(entry: dict[str, Any]) -> str:
    rows = entry.get("clusters")
    if rows is None:
        return "no agreement (no analysis)"
    same = sum(r["verdict"] == SAME for r in rows)
    return (f"{same} of {counted(len(rows), 'cluster')} of ours fused the same by Inductor, "
            f"{counted(len(entry.get('missed', ())), 'Inductor kernel')} we do not propose")


def _disagreements(entry: dict[str, Any]) -> list[str]:
    out = [f"cluster {r['cluster']} `{r['ops']}` at {r['where']}: {r['verdict']}"
           + (f": {r['detail']}" if r["detail"] else "")
           for r in entry.get("clusters", ()) if r["verdict"] != SAME]
    out += [f"Inductor's `{m['kernel']}` ({' → '.join(m['ops'])}"
            + (f"; lines {', '.join(map(str, m['lines']))}" if m["lines"] else "")
            + f") is no cluster of ours: {m['reason'] or 'a single op of ours per line'}"
            for m in entry.get("missed", ())]
    return out


def terminal_lines(records: Sequence[Any]) -> list[str]:
    """Per test and backend: counts, agreement, then each disagreement indented."""
    out = []
    for r in records:
        for backend, entry in sorted((r.compiled or {}).items()):
            out.append(f"{r.nodeid} [{backend}]: {_counts(entry)}; {_agreement_words(entry)}")
            out += [f"    {line}" for line in _disagreements(entry)]
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _verdict(row: dict[str, Any]) -> str:
    detail = row["detail"] if row["verdict"] != SAME else ""  # same: the detail is the name
    return row["verdict"] + (f": {detail}" if detail else "")


def markdown_lines(records: Sequence[Any]) -> list[str]:
    """A "torch.compile" section: per test, a table of our clusters beside Inductor's
    kernels, then the kernels we do not propose. Nothing when no test took a record."""
    lines: list[str] = []
    for r in records:
        for backend, entry in sorted((r.compiled or {}).items()):
            lines += [f"**{_cell(r.nodeid)}** on {backend}: {_counts(entry)}; "
                      f"{_agreement_words(entry)}", ""]
            rows = entry.get("clusters")
            if rows:
                lines += ["| our cluster | at | Inductor's kernels | verdict |",
                          "|---|---|---|---|"]
                lines += [f"| `{_cell(c['ops'])}` | {_cell(c['where'])} | "
                          f"{_cell(', '.join(f'`{k}`' for k in c['kernels']) or '—')} | "
                          f"{_cell(_verdict(c))} |" for c in rows]
                lines.append("")
            lines += [f"- {_cell(m)}" for m in _disagreements(entry)
                      if m.startswith("Inductor's")]
            if entry.get("missed"):
                lines.append("")
    return ["### torch.compile: our clusters beside Inductor's kernels", "", *lines] \
        if lines else []
