"""Views inside a cluster whose results keep the sizes seen at analysis, for `--apply`.

The kernel file's launcher (and the operator's fake, which runs it on fake tensors)
recomputes every view step from the shapes it is called with: a permute, a merge or split of
dims, a size-1 dim added or removed, a reduction's dims, broadcasting. Some steps keep the
sizes seen at analysis, so the written call would run at those sizes only (the launcher
refuses any other) where the user's lines run at any: a reshape to sizes that are no merge
or split, a slice, select or expand, and a reshape or flatten recorded as a squeeze because
the dims it merges were 1 at the analysed sizes (`flatten(1)` of a 1×1 map merges a 3×3 one),
unless a reduction made them 1 at every size (a pool to 1×1, `mean(..., keepdim=True)`).
A reshape sized at run time that merges a permuted value's leading dim with others (Swin's
windows, `view(B, H // w, w, W // w, w, C).permute(...).reshape(-1, w * w, C)`) is written
split at its analysed factors (``codegen/regroup_space.py``): that call would run at the
analysed batch only.

Reads an ``Analysis``; writes nothing.
"""

from __future__ import annotations

import torch

from ..codegen.literal_sizes import literal_pins
from ..ir.graph import FusionGraph, OpKind
from ..ir.reductions import keeps_dims, node_reduced_dims, rule_of
from ..ir.sizes import SIZES
from ..ir.spelling import said
from ..ir.view_factors import result_factors, source_dims
from ..ir.views import INDEX_STEPS, Reshape, Squeeze, Step, Strided, ViewError, apply
from ..pipeline import Analysis


def ones_at_any_size(g: FusionGraph, name: str, dims: set[int]) -> bool:
    """Whether dims `dims` (non-negative) of value `name` are 1 whatever the inputs' sizes:
    a reduction that keeps the dims it collapses made them so, or a parameter has them,
    seen through pointwise ops (a broadcast dim is 1 where every operand's is)."""
    node = g[name]
    if node.meta is None:
        return False
    rank = len(node.meta.shape)
    if node.kind is OpKind.CONSTANT:
        return all(node.meta.shape[d] == 1 for d in dims)
    rule = rule_of(node)
    if rule is not None:
        source = g[node.refs[0]].meta if node.refs else None
        reduced = node_reduced_dims(node, rank)
        return (source is not None and len(source.shape) == rank and reduced is not None
                and not rule.keeps_row and keeps_dims(rule, dict(node.params))
                and dims <= set(reduced))
    if node.kind in (OpKind.POINTWISE_UNARY, OpKind.POINTWISE_BINARY) and node.refs:
        for ref in node.refs:
            meta = g[ref].meta
            if meta is None:
                return False
            # right-aligned: a dim the operand lacks is broadcast, 1 at any size
            lead = rank - len(meta.shape)
            own = {d - lead for d in dims if d >= lead}
            if own and not ones_at_any_size(g, ref, own):
                return False
        return True
    return False


def _fixed_step(g: FusionGraph, name: str, steps: tuple[Step, ...]) -> Step | None:
    node = g[name]
    for s in steps:
        if isinstance(s, (Reshape, Strided)):
            return s
        if isinstance(s, Squeeze) and node.op != "squeeze" and node.refs:
            source = g[node.refs[0]].meta
            rank = len(source.shape) if source is not None else 0
            if not rank or not ones_at_any_size(g, node.refs[0], {d % rank for d in s.dims}):
                return s
    return None


def _batch_split(g: FusionGraph, name: str) -> tuple[int, ...] | None:
    """The analysed factors of the view's result dim that merges its permuted source's dim 0
    with others (the kernel splits it at those sizes), for a view sized at run time; None
    where there is none or the source's strides express the merge (it stays one dim)."""
    if g[name].param(SIZES) is None:
        return None
    steps: tuple[Step, ...] = ()
    src = name
    while g[src].kind is OpKind.VIEW and g[src].refs:
        steps = (*(g[src].param(INDEX_STEPS) or ()), *steps)
        src = g[src].refs[0]
    meta = g[src].meta
    owners = None if meta is None else source_dims(steps, tuple(meta.shape))
    merged = [k for k, dims in enumerate(owners or ()) if len(dims) > 1 and 0 in dims]
    if not merged:
        return None
    try:
        apply(steps, torch.empty_strided(tuple(meta.shape), tuple(meta.stride), device="meta"))
        return None
    except ViewError:
        return result_factors(steps, tuple(meta.shape))[merged[0]]


def fixed_shape(analysis: Analysis, index: int) -> str | None:
    """Why the written call of cluster `index` could not work out its results' shapes from
    its inputs' at other sizes (the view that keeps them, at its line), or None."""
    for name in analysis.clusters[index].nodes:
        node = analysis.graph[name]
        split = _batch_split(analysis.graph, name)
        if split is not None:
            return (f"its result's shape does not follow from its inputs' shapes: "
                    f"{said(analysis.graph, name)} merges dim 0 of a permuted value with "
                    f"others, which the kernel splits as analysed ({'×'.join(map(str, split))}), "
                    "so it would run at the analysed batch only")
        fixed = _fixed_step(analysis.graph, name, node.param(INDEX_STEPS) or ())
        if fixed is None:
            continue
        shape = tuple(node.meta.shape) if node.meta else fixed.shape(())
        what = ("a reshape that is no merge or split of dims" if isinstance(fixed, Reshape)
                else "a merge of dims that are 1 only at these sizes"
                if isinstance(fixed, Squeeze) else "a slice, select or expand")
        return (f"its result's shape does not follow from its inputs' shapes: "
                f"{said(analysis.graph, name)} gives the shape {shape} seen at analysis ({what}), "
                "so the kernel would run at those sizes only")
    # torch.export records sizes read from shapes (`reshape(x.shape)`) as numbers: the
    # launcher pins them (literal_sizes.py) where the user's lines follow the input.
    g, c = analysis.graph, analysis.clusters[index]
    pins = () if g.frontend != "export" else literal_pins(
        g, c.nodes, [n for n in c.inputs if g[n].meta is not None])
    if pins:
        return (f"its result's shape does not follow from its inputs' shapes: {pins[0].why}, "
                "so the kernel would run at those sizes only")
    return None
