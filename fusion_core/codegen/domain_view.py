"""A value's index map applied to its tensor: the (shape, strides) a kernel reads it
through, where a slice starts, and the chain as the launcher's Python text.

Reads the chains ``indexing.index_maps`` wrote (``IndexMaps.chains``) and a tensor's real
shape and strides; returns layouts for ``lower.py`` and launcher text for
``launch_maps.py``. Torch composes the strides on a meta tensor, so they are exact; a
reshape of a permuted value is read through the chain written without its merges where the
domain splits them (``views.applied``, ``regroup_space.py``), and a chain no strides express
even so is refused naming the value as the user wrote it and the views it is read through.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..ir.graph import FusionGraph, OpKind
from ..ir.spelling import said, said_all
from ..ir.view_factors import uneven
from ..ir.views import Narrow, Step, ViewError, applied, apply, plain, split_piece
from .indexing import IndexMaps
from .layout import LoweringError


def domain_view(steps: Sequence[Step], shape: tuple[int, ...], stride: tuple[int, ...],
                value: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Step, ...]]:
    """(shape, strides, the steps that view it) of a tensor of `shape`/`stride` seen through
    `steps` (a reshape of a permuted value written without its merge, ``views.applied``);
    `value` says the tensor and the views it is read through, in the user's spelling
    (`seen_through`)."""
    t = torch.empty_strided(shape, stride, device="meta")
    try:
        t, steps = applied(steps, t)
    except ViewError as e:
        if uneven(steps, shape):
            raise LoweringError(f"reading or writing {value} needs {e}: the reshape cuts "
                                "dims a permute moved apart at sizes that do not divide "
                                "them, so no split of the kernel's iteration space reads it "
                                "with strides (it would need div/mod per load)") from None
        raise LoweringError(f"reading or writing {value} needs {e}, which cannot be "
                            "expressed as strides (the value is not contiguous there); a "
                            "copy would be needed") from None
    return tuple(t.shape), tuple(t.stride()), tuple(steps)


def view_offset(steps: Sequence[Step], shape: tuple[int, ...]) -> int:
    """Where a contiguous value of `shape` seen through `steps` starts (a slice's start):
    a generated value has no pointer to carry it."""
    if not steps:
        return 0
    t = torch.empty(shape, device="meta")
    try:
        return apply(steps, t).storage_offset()
    except ViewError:
        return 0  # not a view of a contiguous value: domain_view refuses it by name


def seen_through(maps: IndexMaps, g: FusionGraph, name: str, shape: tuple[int, ...],
                 stride: tuple[int, ...], rank: int, steps: tuple[Step, ...] | None = None,
                 blame: tuple[str, ...] = ()) -> tuple[tuple, tuple, dict]:
    """(shape, strides, ``TensorArg`` fields) of value `name` as a `rank`-d kernel indexes it
    through its chain (or `steps`): its own layout where right-alignment reads the same;
    `blame`: the group's views, which a refusal names."""
    steps = plain(maps.chains[name] if steps is None else steps, shape)
    if not steps:
        return shape, stride, {}
    views = [v for v in blame if v in g and g[v].kind is OpKind.VIEW]
    value = said(g, name) + (f" through {said_all(g, views)}" if views else "")
    try:
        *seen, steps = domain_view(steps, shape, stride, value)
    except LoweringError as e:
        raise LoweringError(str(e), blame or (name,)) from None
    own, piece = split_piece(steps)
    # A slice whole at the analysed length (`x[:, :1]` of a length-1 dim) reads as the
    # tensor does, but cuts it at another length: the launcher keeps its check.
    if piece is None and len(shape) <= rank and _squeezed(seen) == _squeezed((
            shape, stride)) and not any(isinstance(s, Narrow) for s in own):
        return shape, stride, {}
    # A cat's piece is the kernel's to read (``loads.py``): the launcher views the operand
    # through the steps before it only.
    return (*seen, {"view": own, "user_shape": shape})


def _squeezed(layout: tuple[Sequence[int], Sequence[int]]) -> tuple[tuple[int, int], ...]:
    """(size, stride) per dim after the leading size-1 dims, a size-1 dim's stride as 0:
    what right-aligned indexing reads of a layout."""
    pairs = [(d, s if d != 1 else 0) for d, s in zip(*layout, strict=True)]
    while pairs and pairs[0][0] == 1:
        pairs.pop(0)
    return tuple(pairs)


def source(steps: Sequence[Step], var: str) -> str:
    """The chain as a Python expression on `var` (a generated launcher's text); a reshape
    there copies where the run-time strides need it, as eager's would."""
    text = var
    for s in steps:
        text = s.source(text)
    return text
