"""A view node's index steps, and whether the run-time bounds of a slice are data edges.

``normalize.py`` turns a view call (`x.permute(0, 2, 1)`, `x[..., half:]`, `x.narrow(1, 0, 4)`)
into a ``FusionGraph`` view node; here it gets the view's params. ``view_params`` replays the
call on meta tensors and hands the shapes to ``view_recognition.describe``; a plain slice of
one dim becomes a ``Narrow`` of it. ``bounds_of_its_own_sizes`` tells when a slice's bounds,
computed at run time, come from its source's own sizes alone: no data edge then, so a kernel
may read the slice of a tensor it takes.

Reads the view's FX node: its target, args, kwargs and the ``meta["val"]`` of it, its source
and its run-time arguments; writes the ``INDEX_STEPS`` param (``ir/views.py``), or nothing
when the steps are unknown.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.fx as fx

from .run_scalars import Apply, scalar_of
from .sizes import Dim
from .view_recognition import as_narrow, describe
from .views import INDEX_STEPS, Narrow, Step


def view_params(n: fx.Node, op: str) -> tuple[tuple[str, Any], ...]:
    """A view's index steps (``ir/views.py``), replayed on a meta tensor; () if unknown."""
    src = next((a for a in flatten((n.args, n.kwargs)) if isinstance(a, fx.Node)), None)
    out, src_val = n.meta.get("val"), src.meta.get("val") if src is not None else None
    if not isinstance(out, torch.Tensor) or not isinstance(src_val, torch.Tensor):
        return ()

    def value(a: Any, probe: torch.Tensor) -> Any:
        if a is src:
            return probe
        if isinstance(a, fx.Node):
            val = a.meta.get("val")
            return torch.empty(val.shape, device="meta") if isinstance(val, torch.Tensor) else val
        if isinstance(a, (list, tuple)):
            return type(a)(value(x, probe) for x in a)
        if isinstance(a, slice):  # bounds computed from sizes: `x[..., half:]`
            return slice(*(value(x, probe) for x in (a.start, a.stop, a.step)))
        return a

    def call(probe: torch.Tensor) -> Any:
        args = tuple(value(a, probe) for a in n.args)
        kwargs = {k: value(v, probe) for k, v in n.kwargs.items()}
        if n.op == "call_method":
            return getattr(args[0], str(n.target))(*args[1:], **kwargs)
        return n.target(*args, **kwargs)

    steps = describe(op.split(".")[0], call, tuple(src_val.shape), tuple(out.shape),
                     src_val.is_contiguous())
    dim = _sliced_dim(n, op.split(".")[0], src_val.dim())
    if steps is not None and dim is not None:
        steps = as_narrow(steps, tuple(src_val.shape), dim)
    if steps == () and dim is not None and not (
            run_time_args(n) and bounds_of_its_own_sizes(n, steps)):
        # a slice whole at the analysed length (`x[:, :1]` where that dim is 1 long) cuts
        # at another: a Narrow, which the launcher checks, not no step at all
        size = int(src_val.shape[dim])
        steps = (Narrow(dim - src_val.dim(), 0, size, size),)
    return () if steps is None else ((INDEX_STEPS, steps),)


def _sliced_dim(n: fx.Node, op: str, rank: int) -> int | None:
    """The one dim a plain slice call slices, the others written whole (`x[..., h:]`,
    `x[:, :4]`, `aten.slice(x, 1, 0, 4)`, `x.narrow(1, 0, 4)`); None for any other call."""
    if op in ("slice", "narrow") and len(n.args) >= 2 and isinstance(n.args[1], int):
        step = n.args[4] if op == "slice" and len(n.args) > 4 else 1
        return n.args[1] % rank if rank and step == 1 and not n.kwargs else None
    if op != "getitem" or len(n.args) != 2:
        return None
    index = n.args[1] if isinstance(n.args[1], tuple) else (n.args[1],)
    if not all(isinstance(i, slice) or i is Ellipsis for i in index) or index.count(Ellipsis) > 1:
        return None
    if Ellipsis not in index and len(index) < rank:
        index = (*index, Ellipsis)
    cut = index.index(Ellipsis) if Ellipsis in index else len(index)
    where = [k if k < cut else rank - (len(index) - k) for k, i in enumerate(index)
             if i is not Ellipsis and i != slice(None)]
    if len(where) != 1 or index[where[0] if where[0] < cut else
                                 len(index) - (rank - where[0])].step not in (None, 1):
        return None
    return where[0]


def run_time_args(n: fx.Node) -> list[fx.Node]:
    """A view's arguments computed at run time, besides its source."""
    return [a for a in flatten((n.args, n.kwargs)) if isinstance(a, fx.Node)][1:]


def flatten_keep_slices(obj: Any) -> Iterator[Any]:
    """The leaves of nested tuples and lists, a slice kept whole (not its bounds)."""
    if isinstance(obj, (tuple, list)):
        for x in obj:
            yield from flatten_keep_slices(x)
    else:
        yield obj


def bounds_of_its_own_sizes(n: fx.Node, steps: tuple[Step, ...]) -> bool:
    """Every run-time argument of view `n` besides its source is a number computed from
    that source's own sizes (`half = x.shape[-1] // 2; x[..., half:]`), of the sliced dim
    alone when `steps` are a ``Narrow``. The steps, fixed at the analysed bounds, then hold
    wherever the source has the sizes a launcher checks (the sliced dim's for a narrow,
    ``codegen/runtime._narrowed``; its whole shape for any other selection,
    ``codegen/launch_maps.py``): the bounds are no data edge, and a kernel may read the
    slice of a tensor it takes."""
    src = next(a for a in flatten((n.args, n.kwargs)) if isinstance(a, fx.Node))
    rank = len(src.meta["val"].shape) if isinstance(src.meta.get("val"), torch.Tensor) else 0
    narrow = steps[0] if len(steps) == 1 and isinstance(steps[0], Narrow) else None
    allowed = {(src.name, narrow.dim + rank)} if narrow else {(src.name, k) for k in range(rank)}
    for a in run_time_args(n):
        s = scalar_of(a)
        if not (isinstance(s, Dim | Apply) and isinstance(a.meta.get("val"), int)
                and {(d.value, d.dim) for d in _dims(s)} <= allowed):
            return False
    return True


def _dims(s: Any) -> list[Dim]:
    if isinstance(s, Dim):
        return [s]
    return [d for x in getattr(s, "args", ()) for d in _dims(x)]


def flatten(obj: Any) -> Iterator[Any]:
    """Every leaf of an FX node's args and kwargs, into tuples, lists, dicts and slices
    (`x[..., half:]` reads `half`); ``normalize.py`` takes every node's operands from it."""
    if isinstance(obj, (tuple, list)):
        for x in obj:
            yield from flatten(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from flatten(x)
    elif isinstance(obj, slice):
        yield from flatten((obj.start, obj.stop, obj.step))
    else:
        yield obj
