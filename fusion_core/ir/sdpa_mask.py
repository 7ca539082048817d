"""Turn an attention call's boolean mask into the additive mask it would make of it, once.

Reads a shape-propagated ``fx.GraphModule`` (either frontend); rewrites it in place.
``scaled_dot_product_attention`` given a boolean ``attn_mask`` converts it on every call,
inside the call, into an additive mask in the query's dtype (0 where attention is allowed,
a large negative value elsewhere): on CUDA two or three kernels over the whole
(batch, 1, queries, keys) mask per call, the same for every layer reading the same mask
(GPT-2's traced graph: 36 of its 275 kernels). Inductor decomposes the call and fuses that
conversion into the kernel that builds the mask, once. Here each distinct (mask, dtype) gets
one ``where(mask, 0.0, -inf).to(dtype)`` after the mask, and every such call reads it
instead, so detection can fuse the conversion the same way.

The value is torch's own: every backend converts with ``-inf`` (cuDNN's too since a fix of
March 2026; before it, -65504, which only a query row with every key masked tells apart: it
spread that row's attention evenly instead). The mask is cast to the query's dtype as torch's
conversion makes it (a float32 mask beside a 16-bit query is not what cuDNN expects of its
bias). The model check still compares the rewritten graph with the model on every run.

The new nodes carry ``meta[ADDITIVE_MASK]`` (the attention calls reading them, by name) for
the passes that explain them.
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn.functional as F

aten = torch.ops.aten
ADDITIVE_MASK = "fusion_additive_mask"
# Attention calls by frontend: (target, the position of attn_mask among the arguments).
_CALLS = {F.scaled_dot_product_attention: 3, aten.scaled_dot_product_attention.default: 3}


def additive_attention_masks(gm: fx.GraphModule) -> fx.GraphModule:
    made: dict[tuple[fx.Node, torch.dtype], fx.Node] = {}
    for n in list(gm.graph.nodes):
        found = _boolean_mask(n)
        if found is None:
            continue
        mask, dtype, where = found
        key = (mask, dtype)
        if key not in made:
            made[key] = _additive(gm, mask, dtype, n)
        additive = made[key]
        additive.meta[ADDITIVE_MASK] = (*additive.meta.get(ADDITIVE_MASK, ()), n.name)
        if isinstance(where, int):
            n.update_arg(where, additive)
        else:
            n.update_kwarg(where, additive)
    if made:
        gm.recompile()
    return gm


def _boolean_mask(n: fx.Node) -> tuple[fx.Node, torch.dtype, int | str] | None:
    """(the mask node, the query's dtype, where the call takes the mask: its argument
    position or keyword) of an attention call given a boolean mask, else None."""
    if n.op != "call_function" or n.target not in _CALLS:
        return None
    position = _CALLS[n.target]
    where: int | str = position if len(n.args) > position else "attn_mask"
    mask = n.args[position] if isinstance(where, int) else n.kwargs.get("attn_mask")
    query = n.args[0] if n.args else n.kwargs.get("query")
    if not (isinstance(mask, fx.Node) and isinstance(query, fx.Node)):
        return None
    mask_val, query_val = mask.meta.get("val"), query.meta.get("val")
    if not (isinstance(mask_val, torch.Tensor) and isinstance(query_val, torch.Tensor)
            and mask_val.dtype == torch.bool and query_val.dtype.is_floating_point):
        return None
    return mask, query_val.dtype, where


def _additive(gm: fx.GraphModule, mask: fx.Node, dtype: torch.dtype, call: fx.Node
              ) -> fx.Node:
    """`where(mask, 0.0, -inf)` cast to `dtype`, right after `mask`, with shapes; located
    where the mask is made (so that the line making it can call the kernel that makes both,
    and the attention calls read its result)."""
    graph = gm.graph
    with graph.inserting_after(mask):
        if call.target is not F.scaled_dot_product_attention:
            picked = graph.call_function(aten.where.Scalar, (mask, 0.0, float("-inf")))
            cast = graph.call_function(aten.to.dtype, (picked, dtype))
        else:
            picked = graph.call_function(torch.where, (mask, 0.0, float("-inf")))
            cast = graph.call_method("to", (picked, dtype))
    # After `picked`: inserting_after(mask) put both right behind the mask, `cast` first.
    picked.append(cast)
    val = torch.where(mask.meta["val"], 0.0, float("-inf"))
    where = {k: mask.meta[k] for k in ("stack_trace", "nn_module_stack") if k in mask.meta}
    picked.meta.update(where, val=val)
    cast.meta.update(where, val=val.to(dtype))
    return cast
