"""`x.max(dim).values` as `x.amax(dim)`: the reduction the registry knows.

Reads a shape-propagated ``fx.GraphModule`` (either frontend); rewrites it in place.
``x.max(dim=-1, keepdim=True).values``, ``torch.max(x, 1)[0]`` and ``v, _ = x.min(1)``
(export: ``aten.max.dim`` and a ``getitem``) return values and indices; attention code
writes them for the row maximum of a softmax. When nothing reads the indices, the values
are exactly ``amax``/``amin`` over that dim, which fuses into the softmax as Inductor
fuses it; left as a tuple-returning call, the max was an opaque op that split the softmax
(and messages named the `.values` read as `getattr`). A call whose indices are read, or
without a dim (`x.max()`, `torch.max(a, b)`), stays as it is.

The new node records the method the user called in ``meta[SPELLED]`` (`max`), so source
mapping and messages still find it on its line.
"""

from __future__ import annotations

import builtins
import operator
from typing import Any

import torch
import torch.fx as fx

SPELLED = "fusion_spelled"  # the name the user called: `max` for the amax written here

_AMAX = {"max": (torch.amax, torch.ops.aten.amax.default),
         "min": (torch.amin, torch.ops.aten.amin.default)}
_ATEN = {torch.ops.aten.max.dim: "max", torch.ops.aten.min.dim: "min"}
_TORCH = {torch.max: "max", torch.min: "min"}


def _dim_call(n: fx.Node) -> tuple[str, fx.Node, int, bool] | None:
    """(max or min, input, dim, keepdim) of a reduction over one dim returning indices."""
    if n.op == "call_method" and n.target in _AMAX:
        name = str(n.target)
    elif n.op == "call_function" and n.target in _TORCH:
        name = _TORCH[n.target]
    elif n.op == "call_function" and n.target in _ATEN:
        name = _ATEN[n.target]
    else:
        return None
    values = dict(zip(("input", "dim", "keepdim"), n.args, strict=False)) | dict(n.kwargs)
    x, dim, keepdim = values.get("input"), values.get("dim"), values.get("keepdim", False)
    # `torch.max(a, b)` is an elementwise maximum: its second operand is a tensor.
    if not isinstance(x, fx.Node) or type(dim) is not int or type(keepdim) is not bool \
            or set(values) - {"input", "dim", "keepdim"}:
        return None
    return name, x, dim, keepdim


def _part(u: fx.Node, tuple_node: fx.Node) -> int | None:
    """0 for a read of the values (`[0]`, `.values`), 1 for the indices, None otherwise."""
    if u.op != "call_function" or len(u.args) != 2 or u.args[0] is not tuple_node:
        return None
    key = u.args[1]
    if u.target is operator.getitem and key in (0, 1):
        return int(key)
    if u.target is builtins.getattr and key in ("values", "indices"):
        return 0 if key == "values" else 1
    return None


def _rewritable(n: fx.Node) -> list[fx.Node] | None:
    """The value reads of `n` when nothing reads its indices (an unused `_` of
    `v, _ = x.max(1)` is a getitem with no users)."""
    reads: list[fx.Node] = []
    for u in n.users:
        part = _part(u, n)
        if part is None or (part == 1 and u.users):
            return None
        if part == 0:
            reads.append(u)
    return reads or None


def values_as_amax(gm: fx.GraphModule) -> list[str]:
    """Rewrite each max/min over a dim whose indices nobody reads; returns the new nodes."""
    done = []
    graph = gm.graph
    for n in list(graph.nodes):
        call = _dim_call(n)
        reads = _rewritable(n) if call is not None else None
        if call is None or reads is None:
            continue
        name, x, dim, keepdim = call
        fx_fn, aten_fn = _AMAX[name]
        exported = n.target in _ATEN
        with graph.inserting_before(n):
            new = graph.create_node(
                "call_function", aten_fn if exported else fx_fn,
                (x, [dim], keepdim) if exported else (x,),
                {} if exported else {"dim": dim, "keepdim": keepdim}, name=f"{n.name}_values")
        new.meta.update(_meta(n, reads[0]))
        new.meta[SPELLED] = name
        for u in list(n.users):
            u.replace_all_uses_with(new)
            graph.erase_node(u)
        graph.erase_node(n)
        done.append(new.name)
    if done:
        gm.recompile()
    return done


def _meta(call: fx.Node, read: fx.Node) -> dict[str, Any]:
    """The call's metadata (its line, its module) with the values' shape and dtype."""
    meta = dict(call.meta)
    for key in ("val", "tensor_meta"):
        if key in read.meta:
            meta[key] = read.meta[key]
        else:
            meta.pop(key, None)
    return meta
