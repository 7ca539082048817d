"""The console report: header, cluster table, totals, and (optionally) rejections and the
unknown ops that sit between compute ops (no candidate group holds them, so no rejection
names them)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ..analysis.barriers import find_barriers
from ..analysis.types import Cluster, Rejection
from ..ir.graph import FusionGraph
from ..ir.spelling import said
from ..pipeline import Analysis
from ..units import counted
from .left_unfused import left_unfused
from .units import fmt_bytes, short_path


def report_console() -> Console:
    """On a terminal rich wraps to its width. Piped, prose lines stay whole (soft wrap: no
    break mid-sentence) and tables get COLUMNS columns when set, else 140."""
    if sys.stdout.isatty():
        return Console()
    return Console(width=None if os.environ.get("COLUMNS", "").isdigit() else 140,
                   soft_wrap=True)


TABLE_TITLE = "Fusable clusters (estimated memory traffic)"


def cluster_table(analysis: Analysis, maps: dict[int, str] | None = None,
                  lines: dict[int, str] | None = None, narrow: int = 0) -> Table:
    """One row per cluster. Only the ops column wraps (a long chain between its ops, an op
    name longer than the column folded), so no cell is cut short and the category stays
    one word. `narrow` (a console too slim even for that): 1 drops the box lines, 2 also
    breaks categories at their hyphens."""
    table = Table(title=TABLE_TITLE, title_justify="left",
                  **({"box": None, "pad_edge": False} if narrow else {}))
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("category", no_wrap=True)
    table.add_column("ops", overflow="fold")
    for head in ("traffic\n(unfused)", "traffic\n(fused)", "traffic\nsaved"):
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column("map", no_wrap=True)
    table.add_column("lines", no_wrap=True)
    for c in analysis.clusters:
        t = c.traffic
        category = c.category.replace("-", "-\n") if narrow > 1 else c.category
        table.add_row(str(c.index), category, c.chain, fmt_bytes(t.unfused_bytes),
                      fmt_bytes(t.fused_bytes), f"{t.saved_fraction:.0%}",
                      (maps or {}).get(c.index, "pending"),
                      (lines or {}).get(c.index) or (str(c.lines) if c.lines else "-"))
    return table


def totals_line(analysis: Analysis) -> str:
    unfused = sum(c.traffic.unfused_bytes for c in analysis.clusters)
    saved = sum(c.traffic.saved_bytes for c in analysis.clusters)
    return (f"Across {counted(len(analysis.clusters), 'cluster')}: {fmt_bytes(saved)} of "
            f"{fmt_bytes(unfused)} cluster-local traffic avoided.")


def recompute_lines(analysis: Analysis) -> list[str]:
    """Which cluster recomputes a value instead of another cluster storing it."""
    g = analysis.graph
    owner = {n: c.index for c in analysis.clusters for n in c.nodes}
    out = []
    for c in analysis.clusters:
        for name in c.recomputes:
            if owner.get(name) == c.index:  # slices of one value (``slice_recompute.py``)
                out.append(f"Cluster {c.index} computes {said(g, name)} again for each part "
                           "of it that it reads, rather than storing it.")
                continue
            by = f"; cluster {owner[name]} does not store it" if name in owner else ""
            out.append(f"Cluster {c.index} recomputes {said(g, name)} from its "
                       f"inputs rather than reading it back{by}.")
        if c.recomputes and c.traffic.saved_bytes < 0:
            # The eager op and the write it no longer needs belong to the cluster that
            # computes the value; only the re-read operands land here.
            owners = sorted({owner[n] for n in c.recomputes if n in owner})
            there = (f"credited to cluster {', '.join(map(str, owners))}" if owners
                     else "credited where the value is computed")
            out.append(f"  Cluster {c.index} alone shows {c.traffic.saved_fraction:.0%}: it "
                       f"re-reads the operands, while the store this avoids is {there}; "
                       "the total above counts both.")
    return out


FRONTEND_NAMES = {"fx": "FX tracing", "export": "torch.export"}


def header(analysis: Analysis) -> list[str]:
    """The model, its size, the capture frontend; on an auto fallback, why FX failed."""
    frontend = analysis.graph.frontend
    lines = [f"{analysis.model_name} ({analysis.n_nodes} nodes, "
             f"{counted(len(analysis.clusters), 'fusable cluster')}, "
             f"captured with {FRONTEND_NAMES.get(frontend, frontend)})"]
    if analysis.capture_fallback:
        lines.append("FX could not capture it, so torch.export was used: "
                     + analysis.capture_fallback)
    if analysis.capture_choice:
        lines.append(f"Capture: {analysis.capture_choice}")
    lines += [item.note for item in left_unfused(analysis.graph, short_path)]
    return lines


def _least_width(console: Console, table: Table) -> int:
    """The narrowest `table` prints at with no cell cut: its no-wrap columns whole, the ops
    column at its longest op."""
    return console.measure(table, options=console.options.update_width(10**4)).minimum


def print_cluster_lines(analysis: Analysis, console: Console,
                        maps: dict[int, str] | None = None,
                        lines: dict[int, str] | None = None) -> None:
    """The table's content as wrapped prose, for a console too slim for any table."""
    console.print(TABLE_TITLE, highlight=False)
    for c in analysis.clusters:
        t = c.traffic
        where = (lines or {}).get(c.index) or (str(c.lines) if c.lines else "-")
        console.print(f"{c.index}. {c.category}: {c.chain}; traffic {fmt_bytes(t.unfused_bytes)}"
                      f" unfused, {fmt_bytes(t.fused_bytes)} fused ({t.saved_fraction:.0%} "
                      f"saved); map {(maps or {}).get(c.index, 'pending')}; lines {where}",
                      highlight=False, markup=False)


def print_analysis(analysis: Analysis, console: Console, explain_rejections: bool = False,
                   maps: dict[int, str] | None = None, lines: dict[int, str] | None = None,
                   notes: Sequence[str] = ()) -> None:
    """`notes`: lines for the header, under the model line (e.g. what this install lacks)."""
    for line in (*header(analysis), *notes):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print()
    if analysis.clusters:
        # A long chain wraps inside its column; only a console too slim for the other
        # columns beside the chain's longest op drops the borders, then splits categories,
        # and one too slim for any table gets a paragraph per cluster (rich would cut cells
        # or drop whole columns).
        tables = (cluster_table(analysis, maps, lines, narrow) for narrow in range(3))
        table = next((t for t in tables if _least_width(console, t) <= console.width), None)
        if table is not None:
            console.print(table)
        else:
            print_cluster_lines(analysis, console, maps, lines)
    console.print(totals_line(analysis), highlight=False)
    for line in recompute_lines(analysis):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print("Estimates are a DRAM upper bound with no cache model.")
    if explain_rejections:
        print_rejections(analysis, console)
    elif analysis.rejections:  # a fusion not made always gets a reason, if asked for
        n = len(analysis.rejections)
        console.print(f"{counted(n, 'candidate group')} failed a legality check: "
                      "--explain-rejections says which and why.", highlight=False, soft_wrap=True)


def print_rejections(analysis: Analysis, console: Console) -> None:
    console.print()
    print_barriers(analysis, console)
    if not analysis.rejections:
        console.print("Rejected candidates: none")
        return
    console.print(f"Rejected candidates ({len(analysis.rejections)})")
    for r in analysis.rejections:
        where = ""
        if r.lines:
            where = f" at {short_path(r.lines.file)}:{str(r.lines)[1:]}"
        ops = " → ".join(r.ops) if len(r.ops) <= 6 else (
            " → ".join(r.ops[:3]) + f" → … ({len(r.ops)} ops)")
        console.print(f"  [bold]{r.check}[/bold]  {ops}{where}", highlight=False)
        console.print(f"      {r.reason}{retried(analysis.graph, r, analysis.clusters)}",
                      highlight=False, markup=False)


def retried(g: FusionGraph, r: Rejection, clusters: Sequence[Cluster] = ()) -> str:
    """What the search did next, naming the dropped ops as the user wrote them (`mul`
    (line 23)), not by the graph's node names (`mul_2`), and the cluster each ended in
    after all (a value pruned for fan-out may end the group computing it, detect.py)."""
    if r.check == "dead-code":
        return ""
    dropped = ", ".join(said(g, n) if n in g else f"`{n}`" for n in r.culprits)
    owner = {n: c.index for c in clusters for n in c.nodes}
    later = "".join(f"; {said(g, n) if n in g else f'`{n}`'} is in cluster {owner[n]}"
                    for n in r.culprits if n in owner)
    return f"; dropped {dropped} and retried{later}"


def print_barriers(analysis: Analysis, console: Console) -> None:
    """Calls fusion-advisor has no rule for, between compute ops it could otherwise fuse or
    next to a cluster that stops at them."""
    found = [b for b in find_barriers(analysis.graph, analysis.clusters, one_sided=True)
             if b.unknown]
    if not found:
        return
    console.print(f"Fusion barriers ({len(found)})")
    for b in found:
        console.print(f"  {b.describe(analysis.graph, short_path)}", highlight=False, markup=False,
                      soft_wrap=True)
    console.print()
