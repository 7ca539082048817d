"""Other calls of edited lines: the ops another cluster runs there, which the edit computes.

A function called twice (a UNet's `ResBlock.forward`, for `self.b1` and for `self.b2`) runs
its lines twice, and the analysis may fuse the second call's ops on them with ops elsewhere
(the previous block's residual add into this block's first norm). An edit of the lines runs
in both calls: in the other one it computes those ops with this edit's kernel, and the rest
of the other cluster stays as the source writes it. That is exact when those ops match the
lines as the edit's own clusters do; ``group_edit.py`` matches each part like one of them
(``match.unify``), and ``serves.py`` checks that the kernel runs the part's shapes.

Reads an ``Analysis`` and a ``Span``; writes each part as a ``Cluster`` (the holder's index,
its nodes on those lines in one call, their inputs and outputs) with its lifted calls.
Once every cluster is mapped, ``note_served`` says in a holder's pointer which of its ops
those edits run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch.fx as fx

from ..analysis.group import escaping, external_inputs
from ..analysis.types import Cluster
from ..ir.graph import Node, SourceLoc
from ..ir.spelling import layer_said, said
from ..pipeline import Analysis
from .callkeys import instance_path
from .callsite import LiftedCall, lift, site_line
from .frames import Frames
from .source_mapping import SourceMapping
from .span import Span
from .two_calls import chain_site
from .unliftable import Unliftable


@dataclass(frozen=True)
class Part:
    cluster: Cluster  # the holder's index; the nodes its call runs on the span's lines
    calls: tuple[LiftedCall, ...]  # user modules or helpers on those lines it runs whole
    site: str  # the call it ran in, `at line 34 (`h = self.b2(h, emb)`) on `self.b2``


def _depth(chain: tuple[SourceLoc, ...], span: Span) -> int:
    """The index in `chain` (a node's frames) of its frame in the span's function."""
    return max((i for i, f in enumerate(chain) if f.file == span.src.path
                and span.src.scope_at(f.line) is span.scope), default=0)


def call_of(node: Node, span: Span, fx_nodes: Mapping[str, fx.Node]) -> tuple:
    """Which call of the span's function `node` ran in: the frames that led to it (a line of
    the caller) and the module it ran on (blocks in a loop share the caller's line)."""
    chain = node.source.chain if node.source is not None else ()
    return (tuple((f.file, f.line) for f in chain[:_depth(chain, span)]),
            instance_path(fx_nodes.get(node.name), span.scope.class_name))


def parts_on(analysis: Analysis, span: Span, group: list[Cluster], frames: Frames
             ) -> list[Part]:
    """Each other cluster's ops that one other call runs on `span`'s lines (copies of values
    computed elsewhere aside: the source computes those once, where the original stands)."""
    g = analysis.graph
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    own = {c.index for c in group}
    out = []
    for c in analysis.clusters:
        if c.index in own:
            continue
        by_call: dict[tuple, list[str]] = {}
        for name in c.nodes:
            node = g[name]
            line = site_line(node.source, span.src, span.scope)
            if node.copy_of or line is None or not span.start <= line <= span.end:
                continue
            # Two calls from one line (`act(h) + act(2 * h)`) share a key, as do other ops of
            # the edit's own call: matching each part to the lines decides, as for the edit's.
            by_call.setdefault(call_of(node, span, fx_nodes), []).append(name)
        op_of = dict(zip(c.nodes, c.ops, strict=True))
        for nodes in by_call.values():
            part = replace(c, nodes=tuple(nodes), ops=tuple(op_of[n] for n in nodes),
                           inputs=external_inputs(g, nodes), outputs=tuple(escaping(g, nodes)),
                           recomputes=(), shape_reads=())
            try:
                lifted = lift(analysis, part, frames)
            except Unliftable:
                continue  # a call on the lines runs it half: the lines keep their reason
            first = g[nodes[0]]
            on = instance_path(fx_nodes.get(first.name), span.scope.class_name)
            chain = frames.chain(first.source)  # the user's call, not a wrapper's line
            depth = _depth(chain, span)
            caller = chain[depth - 1] if depth else None
            site = chain_site(chain, depth) + (f" on {layer_said(on, caller)}" if on else "")
            out.append(Part(part, lifted.calls, site))
    return out


def note_served(analysis: Analysis, maps: list[SourceMapping]) -> list[SourceMapping]:
    """A pointer's reason says which of its ops other clusters' edits run (served.py) and
    which stay unfused."""
    g = analysis.graph
    notes: dict[int, dict[str, None]] = {}  # holder -> notes, each once per edit
    ran: dict[int, set[str]] = {}
    for m in maps:
        for s in m.serves if m.exact else ():
            lines = f"line {m.start}" if m.start == m.end else f"lines {m.start}-{m.end}"
            names = ", ".join(str(i) for i in sorted((m.cluster_index, *m.shared_with)))
            notes.setdefault(s.part.index, {})[
                f"the edit of {lines} (cluster{'s' if m.shared_with else ''} {names}) runs "
                f"its {' → '.join(s.part.ops)} in the call {s.site}"] = None
            ran.setdefault(s.part.index, set()).update(s.part.nodes)
    out = []
    for m in maps:
        if m.cluster_index not in notes or m.exact or not m.reason:
            out.append(m)
            continue
        rest = [n for n in analysis.clusters[m.cluster_index].nodes
                if n not in ran[m.cluster_index] and not g[n].copy_of]
        left = ", ".join(said(g, n) for n in rest[:3]) + (", …" if len(rest) > 3 else "")
        said_notes = "; ".join(notes[m.cluster_index]) + (
            f", leaving {left} unfused" if left else "")
        out.append(replace(m, reason=f"{m.reason}; {said_notes}"))
    return out
