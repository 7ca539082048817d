"""Recognising a view node: which index steps (``views.py``) reproduce it.

Reads one FX view node's short op name, a replay of its call and the shapes shape
propagation recorded; returns the view's ``Step`` tuple, or None when it is no view the
code generator can index (``ir/normalize.py`` stores the steps under ``INDEX_STEPS``).
How: the node's own call is replayed on a contiguous meta tensor of
its input's shape, and the result's sizes, strides and storage offset say what it is.
A dense result of the same size is a reshape (an unsqueeze or squeeze when only size-1
dims differ, a merge or unflatten when one run of dims is merged or one dim split: the
other dims stay free, so a launcher runs at another batch), a result whose strides are the
input's permuted is a permute, and anything else whose strides and offset decompose over
the input's dims (slice, narrow, select, expand, ``as_strided`` of such a selection) is a
``Strided`` selection (a ``Narrow`` where the call slices one dim and writes the others
whole: ``as_narrow``). Views returning several tensors (``split``, ``chunk``, ``unbind``)
or reading sizes computed at run time other than the output shape get no steps, and
nothing fuses through them, except a slice bounded by its source's own sizes
(`x[..., x.shape[-1] // 2:]`, ``ir/view_params.py``); a piece of a chunk or split along a
static dim is a ``Narrow`` of the split's source (``ir/split_views.py``), while the split's
tuple keeps none, and ``unbind`` keeps none.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .views import Merge, Narrow, Permute, Reshape, Squeeze, Step, Strided, Unflatten, Unsqueeze

# Views whose result is the input's elements in the same order (only the shape changes).
_RESHAPES = frozenset({"view", "_unsafe_view", "reshape", "_reshape_alias", "flatten",
                       "unflatten", "unsqueeze", "squeeze", "contiguous", "view_as",
                       "reshape_as", "alias", "detach", "lift_fresh", "lift_fresh_copy"})


def reshape_steps(src: tuple[int, ...], dst: tuple[int, ...]) -> tuple[Step, ...]:
    """A same-size reshape: an unsqueeze or squeeze when only size-1 dims differ."""
    if src == dst:
        return ()
    if len(dst) > len(src) and tuple(d for d in dst if d != 1) == tuple(
            s for s in src if s != 1):
        dims = _inserted(src, dst)
        if dims is not None:
            return (Unsqueeze(dims),)
    if len(src) > len(dst):
        dims = _inserted(dst, src)
        if dims is not None:
            return (Squeeze(dims),)
    # A run of dims merged (`flatten(1)`) or one dim split (module docstring).
    run = _merged_run(src, dst)
    if run is not None:
        return (Merge(*run),)
    run = _merged_run(dst, src)
    if run is not None:
        return (Unflatten(run[0], tuple(dst[run[0]:run[1]])),)
    return (Reshape(dst),)


def _merged_run(long: tuple[int, ...], short: tuple[int, ...]) -> tuple[int, int] | None:
    """(first, last) when `short` is `long` with dims [first, last) merged into one."""
    n = len(long) - len(short) + 1
    if n < 2:
        return None
    for first in range(len(short)):
        if (long[:first] == short[:first] and long[first + n:] == short[first + 1:]
                and math.prod(long[first:first + n]) == short[first]):
            return first, first + n
    return None


def _inserted(short: tuple[int, ...], long: tuple[int, ...]) -> tuple[int, ...] | None:
    """Positions of `long` holding size-1 dims that `short` lacks, if that is all that differs."""
    dims, i = [], 0
    for k, d in enumerate(long):
        if i < len(short) and short[i] == d:
            i += 1
        elif d == 1:
            dims.append(k)
        else:
            return None
    return tuple(dims) if i == len(short) else None


def describe(name: str, call: Any, src_shape: tuple[int, ...], out_shape: tuple[int, ...],
             contiguous: bool = True) -> tuple[Step, ...] | None:
    """The steps of view `name` (the op's short name); `call(probe)` replays it on a tensor.
    None when the view is not one of the kinds the module docstring lists, or it is an
    `as_strided` of an operand that was not contiguous (`contiguous`): that one addresses
    its operand's memory, which a kernel computing the operand does not reproduce."""
    if name in _RESHAPES:
        return reshape_steps(tuple(src_shape), tuple(out_shape))
    if name == "as_strided" and not contiguous:
        return None
    probe = torch.empty(src_shape, device="meta")
    try:
        out = call(probe)
    except Exception:  # noqa: BLE001 - any failure to replay means: no steps
        return None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(out_shape):
        return None
    return recognise(tuple(src_shape), tuple(out.shape), tuple(out.stride()),
                     out.storage_offset())


def recognise(src: tuple[int, ...], shape: tuple[int, ...], stride: tuple[int, ...],
              offset: int) -> tuple[Step, ...] | None:
    """Steps for a view of a contiguous tensor of shape `src` (module docstring)."""
    dense = torch.empty(src, device="meta").stride()
    if offset == 0 and math.prod(shape) == math.prod(src) and tuple(
            torch.empty(shape, device="meta").stride()) == stride:
        return reshape_steps(src, shape)
    if offset == 0 and len(shape) == len(src):
        perm = _permutation(src, dense, shape, stride)
        if perm is not None:
            return () if perm == tuple(range(len(src))) else (Permute(perm),)
    dims: list[tuple[int, int]] = []
    for size, s in zip(shape, stride, strict=True):
        if size == 1 or s == 0:
            dims.append((-1, 0))
            continue
        hit = next(((k, s // dense[k]) for k in range(len(src)) if src[k] > 1
                    and s % dense[k] == 0 and (s // dense[k]) * (size - 1) < src[k]), None)
        if hit is None:
            return None
        dims.append(hit)
    offsets = []
    rest = offset
    for k in range(len(src)):
        offsets.append(rest // dense[k] if src[k] > 1 else 0)
        rest -= offsets[-1] * dense[k] if src[k] > 1 else 0
    if rest:
        return None
    for k in range(len(src)):  # every coordinate stays inside the input
        reach = offsets[k] + sum(m * (size - 1) for (d, m), size in zip(dims, shape, strict=True)
                                 if d == k)
        if reach >= max(src[k], 1):
            return None
    return (Strided(shape, tuple(dims), tuple(offsets)),)


def _permutation(src, dense, shape, stride) -> tuple[int, ...] | None:
    used: set[int] = set()
    perm = []
    for size, s in zip(shape, stride, strict=True):
        k = next((k for k in range(len(src)) if k not in used and src[k] == size
                  and (size == 1 or dense[k] == s)), None)
        if k is None:
            return None
        used.add(k)
        perm.append(k)
    return tuple(perm)


def as_narrow(steps: tuple[Step, ...], src: tuple[int, ...], dim: int) -> tuple[Step, ...]:
    """A ``Strided`` selection that keeps every dim but `dim` whole as a ``Narrow`` of `dim`,
    where the caller read from the call that it slices `dim` alone (`x[..., h:]`: the other
    dims are whole at any size, not only at these); `steps` otherwise."""
    if len(steps) != 1 or not isinstance(steps[0], Strided):
        return steps
    sel, rank = steps[0], len(src)
    if len(sel.sizes) != rank or not 0 <= dim < rank:
        return steps
    for k, ((at, m), size) in enumerate(zip(sel.dims, sel.sizes, strict=True)):
        whole = (at, m) == (k, 1) or (at == -1 and size == src[k] == 1)
        if k != dim and not (whole and size == src[k] and sel.offsets[k] == 0):
            return steps
        if k == dim and (at, m) != (k, 1) and not (at == -1 and size == 1):
            return steps
    return (Narrow(dim - rank, sel.offsets[dim], sel.sizes[dim], src[dim]),)
