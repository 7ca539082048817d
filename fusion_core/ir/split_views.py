"""A piece of a chunk or split: `x1, x2 = x.chunk(2, dim=-1)` as a ``Narrow`` of `x`.

Reads the FX `getitem(split, k)` node that takes piece `k` of a `chunk`, `split` or
`split_with_sizes` call (FX's `torch.chunk`/`x.split`, export's `aten.split.Tensor`,
`aten.split_with_sizes`, `aten.chunk`); returns the piece's steps and its source, or None.
The split call itself returns a tuple no kernel reads: it keeps no steps, and the piece
refers to the split's source directly, so the boundary rule (``analysis/boundary.py``) and
the index maps (``codegen/indexing.py``) see a plain slice of it.

A piece gets steps when the call splits one static dim and its sizes are known at analysis
or computed from that dim's own size (`x.split(x.shape[-1] // 2, -1)`), the rule a slice's
bounds follow (``ir/view_params.py``): the launcher checks that dim's size
(``Narrow``) and the others stay free. Sizes from another tensor's shape give no steps.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from .run_scalars import Apply, scalar_of
from .sizes import Dim
from .views import Narrow

_SPLITS = frozenset({"chunk", "split", "split_with_sizes"})


def split_name(n: fx.Node) -> str | None:
    """`chunk`, `split` or `split_with_sizes` for a call to one of them; else None."""
    if n.op == "call_method":
        name = str(n.target)
    elif n.op == "call_function":
        t = n.target
        name = getattr(getattr(t, "_overloadpacket", t), "__name__", "")
    else:
        return None
    return name if name in _SPLITS else None


def _dim_arg(split: fx.Node) -> Any:
    return split.kwargs.get("dim", split.args[2] if len(split.args) > 2 else 0)


def piece_of_split(n: fx.Node) -> tuple[tuple[Narrow, ...], fx.Node] | None:
    """(steps, source) of `n` when it is a piece the module docstring gives steps; None."""
    if n.op != "call_function" or n.target is not operator.getitem or len(n.args) != 2:
        return None
    split, k = n.args
    if not isinstance(split, fx.Node) or not isinstance(k, int) or split_name(split) is None:
        return None
    src = split.args[0] if split.args else split.kwargs.get("input", split.kwargs.get("self"))
    dim = _dim_arg(split)
    src_val, out = (src.meta.get("val") if isinstance(src, fx.Node) else None), n.meta.get("val")
    if not (isinstance(src_val, torch.Tensor) and isinstance(out, torch.Tensor)
            and isinstance(dim, int) and src_val.dim() > 0):
        return None
    rank = src_val.dim()
    dim %= rank
    if not all(_own_size(a, src, dim) for a in _run_time(split, src)):
        return None
    try:  # each piece's length along `dim` from a replay on a meta tensor
        pieces = _replay(split, src, src_val)
    except Exception:  # noqa: BLE001 - a call we cannot replay gets no steps
        return None
    if not -len(pieces) <= k < len(pieces):
        return None
    k %= len(pieces)  # `x.chunk(3, -1)[-1]`
    start = sum(int(p.shape[dim]) for p in pieces[:k])
    length = int(pieces[k].shape[dim])
    if tuple(pieces[k].shape) != tuple(out.shape):
        return None
    return (Narrow(dim - rank, start, length, int(src_val.shape[dim])),), src


def _replay(split: fx.Node, src: fx.Node, src_val: torch.Tensor) -> tuple[torch.Tensor, ...]:
    def value(a: Any) -> Any:
        if a is src:
            return torch.empty(src_val.shape, device="meta")
        if isinstance(a, fx.Node):
            return a.meta.get("val")
        if isinstance(a, (list, tuple)):
            return type(a)(value(x) for x in a)
        return a

    args = tuple(value(a) for a in split.args)
    kwargs = {key: value(v) for key, v in split.kwargs.items()}
    if split.op == "call_method":
        return tuple(getattr(args[0], str(split.target))(*args[1:], **kwargs))
    return tuple(split.target(*args, **kwargs))


def _run_time(split: fx.Node, src: fx.Node) -> list[fx.Node]:
    found: list[fx.Node] = []

    def walk(a: Any) -> None:
        if isinstance(a, fx.Node):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            for x in a:
                walk(x)
        elif isinstance(a, dict):
            for x in a.values():
                walk(x)

    walk((split.args, split.kwargs))
    return [a for a in found if a is not src]


def _own_size(a: fx.Node, src: fx.Node, dim: int) -> bool:
    """`a` is a number computed from `src`'s size along `dim` alone."""
    s = scalar_of(a)
    return (isinstance(s, Dim | Apply) and isinstance(a.meta.get("val"), int)
            and {(d.value, d.dim) for d in _dims(s)} <= {(src.name, dim)})


def _dims(s: Any) -> list[Dim]:
    if isinstance(s, Dim):
        return [s]
    return [d for x in getattr(s, "args", ()) for d in _dims(x)]
