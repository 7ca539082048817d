"""Values whose sizes come from a tensor's contents, which no kernel here can be planned for.

``torch.export`` captures `n = t.max().item(); h = x[:n]` (or `x.reshape(n, -1)`, `x[mask]`)
with an unbacked symbol (`u0`) as a size: nothing known before the model runs. Every pass
after capture reads sizes as ints (views' index steps, contiguity, traffic), so such a
value and every value read from it become opaque nodes of their own op, ``UNSIZED``, and
the report says which line sized them (``describe``). FX never gets here: its shape
propagation stops at the `.item()` with one line (``ShapePropagationError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from ..units import counted
from .graph import FusionGraph, Node, SourceLoc

UNSIZED = "sized-by-value"  # the op of such a node
READ_AT = "size_read_at"  # its param: where the scalar its size came from was read


def unsized(val: Any) -> bool:
    """A tensor (or tuple of them) with a size or stride not known before the model runs."""
    if isinstance(val, (tuple, list)):
        return any(unsized(v) for v in val)
    return isinstance(val, torch.Tensor) and bool(free_unbacked_symbols(val))


def scalar_reads(gm: fx.GraphModule) -> dict[Any, fx.Node]:
    """Each unbacked symbol -> the node that read it from a tensor (`.item()`); symbols
    a tensor op made (`nonzero` in a boolean mask's index) have none."""
    out: dict[Any, fx.Node] = {}
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            for s in free_unbacked_symbols(val):
                out.setdefault(s, n)
    return out


def read_at(n: fx.Node, reads: dict[Any, fx.Node], parse: Callable[[Any], SourceLoc | None]
            ) -> SourceLoc | None:
    """Where the scalar sizing `n` was read (the first one, in graph order: `reads` is)."""
    symbols = free_unbacked_symbols(n.meta.get("val"))
    return next((parse(r.meta.get("stack_trace")) for s, r in reads.items() if s in symbols),
                None)


def unsized_nodes(graph: FusionGraph) -> list[Node]:
    """The values sized at run time, in graph order."""
    return [n for n in graph.nodes if n.op == UNSIZED]


def describe(graph: FusionGraph, path: Callable[[str], str] = str) -> str | None:
    """One line for the report: the first unsized value, at its line, what sized it, and
    the fix; None when there is none."""
    nodes = unsized_nodes(graph)
    if not nodes:
        return None
    first, loc = nodes[0], nodes[0].source
    where = f"`{loc.code}` at {path(loc.file)}:{loc.line}" if loc else f"`{first.name}`"
    more = f" (and {counted(len(nodes) - 1, 'op')} reading it)" if len(nodes) > 1 else ""
    read = dict(first.params).get(READ_AT)
    if isinstance(read, SourceLoc):
        cause = f"a number read from a tensor at line {read.line} (`{read.code}`)"
        fix = ("compute the size from shapes (`x.shape[0]`) or pass it as a Python int to the "
               "model's constructor")
    else:  # a boolean mask's selection (`x[mask]`), `nonzero`
        cause, fix = "a tensor's values", "keep the shape (`torch.where(mask, x, 0)`)"
    return (f"Left unfused: {where}{more}: its size comes from {cause}, unknown until the "
            f"model runs; to fuse it, {fix}")
