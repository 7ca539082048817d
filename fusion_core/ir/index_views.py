"""Turn indexing by whole aranges into the view it is.

Reads a shape-propagated aten ``fx.GraphModule`` (export's: the FX frontend spells the
indices' unsqueezes as slicing, which this pass does not follow); rewrites it in place and
returns the names of the `index` nodes it replaced. ``src[i0, i1, ...]`` whose every index is
``arange(n_k)`` for the whole of ``src``'s dim k (start 0, step 1, plus 0), unsqueezed so that it
varies along one dim of the result only, each index along another dim and in increasing
order, picks ``src[x_d0, x_d1, ...]``: ``src`` itself with size-1 dims inserted where no index
varies. Hugging Face's attention masks (transformers 5) read the position ids this way,
``positions[batch_arange, query_arange]``; eager gathers, one kernel each, where a view
costs nothing and lets detection compute the positions inside the mask's kernel, as Inductor
does. Only a ``src`` made from aranges alone (``_generated``) is rewritten.

Each replaced node becomes aten `unsqueeze` calls on ``src``, with shapes and the index's
stack trace; the index chains nothing else reads are removed.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
import torch.fx as fx

aten = torch.ops.aten
_UNSQUEEZE = (aten.unsqueeze.default, torch.unsqueeze, "unsqueeze")
_ADD = (aten.add.Tensor, operator.add, torch.add, "add")
_ARANGE = (aten.arange.default, aten.arange.start, aten.arange.start_step, torch.arange)


def arange_indices_as_views(gm: fx.GraphModule) -> list[str]:
    replaced = []
    for n in list(gm.graph.nodes):
        dims = _whole_aranges(n)
        if dims is None:
            continue
        src = n.args[0]
        made = _unsqueezed(gm, n, src, dims)
        n.replace_all_uses_with(made)
        chains = list(dict.fromkeys(i for i in n.args[1] if isinstance(i, fx.Node)))
        gm.graph.erase_node(n)
        for index in chains:
            _erase_unread(gm.graph, index)
        replaced.append(n.name)
    if replaced:
        gm.recompile()
    return replaced


def _target(n: fx.Node) -> object:
    return n.target if n.op in ("call_function", "call_method") else None


def _whole_aranges(n: fx.Node) -> list[int] | None:
    """The result dim each index varies along, where `n` indexes with whole aranges (module
    docstring), else None."""
    if _target(n) is not aten.index.Tensor or len(n.args) != 2:
        return None
    src, indices = n.args
    if not (isinstance(src, fx.Node) and isinstance(indices, (list, tuple)) and indices):
        return None
    src_val, out_val = src.meta.get("val"), n.meta.get("val")
    if not (isinstance(src_val, torch.Tensor) and isinstance(out_val, torch.Tensor)):
        return None
    rank = out_val.dim() - (src_val.dim() - len(indices))  # the indices' broadcast rank
    dims = []
    for k, index in enumerate(indices):
        if not isinstance(index, fx.Node):
            return None
        found = _arange_along(index, rank)
        if found is None or found[1] != src_val.shape[k]:
            return None
        dims.append(found[0])
    if dims != sorted(set(dims)):  # each along its own dim, in src's order
        return None
    if not _generated(src) or _layout_read(n):
        return None
    return dims


# Readers that need the strides eager's fresh, contiguous result has (a view of `src` has
# those of `src`, expanded or sliced): `view` refuses incompatible strides.
_STRIDED = frozenset({"view", "_unsafe_view", "view_as", "as_strided"})
_VIEWS = frozenset({"unsqueeze", "squeeze", "expand", "permute", "transpose", "t", "slice",
                    "select", "narrow"})


def _layout_read(n: fx.Node) -> bool:
    """Whether a reader of `n` (through views) depends on its layout, or `n` leaves the
    graph (the caller would get a view of `src` where eager gives a fresh tensor)."""
    stack, seen = list(n.users), set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if u.op == "output":
            return True
        name = getattr(u.target, "__name__", str(u.target)).split(".")[0]
        if name in _STRIDED:
            return True
        if name in _VIEWS:
            stack.extend(u.users)
    return False


# Ops a value made from aranges alone is made of (Hugging Face's positions: `arange(n) + past`
# unsqueezed and expanded to the batch).
_GENERATING = frozenset({"arange", "add", "sub", "mul", "unsqueeze", "expand", "view",
                         "reshape", "slice", "to", "_to_copy", "clone"})


def _generated(src: fx.Node) -> bool:
    """Whether `src` is made from aranges and numbers alone: its view then lets detection
    compute it inside the kernel reading it. A computed `src` (a `cumsum` of the padding mask)
    stays gathered: read through a view, detection would group its scan with the mask's
    two-dim ops, which no kernel's iteration space covers, and lose both kernels."""
    seen, stack = set(), [src]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        name = getattr(n.target, "__name__", str(n.target)).split(".")[0]
        if n.op not in ("call_function", "call_method") or name not in _GENERATING:
            return False
        stack.extend(n.all_input_nodes)
    return True


def _arange_along(index: fx.Node, rank: int) -> tuple[int, int] | None:
    """(the dim it varies along, its length) of an index that is `arange(n)` (plus 0)
    unsqueezed to `rank` dims varying along one, else None."""
    val = index.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype not in (torch.int64, torch.int32):
        return None
    shape = (1,) * (rank - val.dim()) + tuple(val.shape)
    varying = [d for d, size in enumerate(shape) if size != 1]
    at = index
    while _target(at) in _UNSQUEEZE:
        at = at.args[0]
    if _target(at) in _ADD and len(at.args) == 2 and at.args[1] == 0:
        at = at.args[0]
    if _target(at) not in _ARANGE or not _counts_from_zero(at):
        return None
    length = at.meta["val"].shape[0] if isinstance(at.meta.get("val"), torch.Tensor) else None
    if length is None:
        return None
    if length == 1:
        return None  # varies nowhere: which dim it stands for is not known
    return (varying[0], length) if len(varying) == 1 else None


def _counts_from_zero(arange: fx.Node) -> bool:
    """`arange(n)`, or `arange(0, n)` / `arange(0, n, 1)` (positional or by keyword)."""
    args, kwargs = arange.args, arange.kwargs
    start = args[0] if len(args) >= 2 else kwargs.get("start", 0)
    step = args[2] if len(args) >= 3 else kwargs.get("step", 1)
    return start == 0 and step == 1


def _unsqueezed(gm: fx.GraphModule, at: fx.Node, src: fx.Node, dims: Sequence[int]) -> fx.Node:
    """`src` with a size-1 dim inserted at each result dim no index varies along, before
    `at`, shaped and traced like it."""
    rank = at.meta["val"].dim() - (src.meta["val"].dim() - len(dims))
    keep = {k: at.meta[k] for k in ("stack_trace", "nn_module_stack") if k in at.meta}
    value, val = src, src.meta["val"]
    with gm.graph.inserting_before(at):
        for d in range(rank):
            if d in dims:
                continue
            value = gm.graph.call_function(aten.unsqueeze.default, (value, d))
            val = val.unsqueeze(d)
            value.meta.update(keep, val=val)
    return value


def _erase_unread(graph: fx.Graph, n: fx.Node) -> None:
    """`n` and its unsqueeze / add / arange sources, as long as nothing else reads them."""
    while (not getattr(n, "_erased", False) and not n.users
           and _target(n) in (*_UNSQUEEZE, *_ADD, *_ARANGE)):
        sources = [a for a in n.all_input_nodes]
        graph.erase_node(n)
        if not sources:
            return
        n = sources[0]
