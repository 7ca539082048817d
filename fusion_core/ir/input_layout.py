"""An example input's memory layout, as an order of its dims (outermost to innermost).

A shape and dtype alone propagate every input as contiguous; a channels-last example
(`x.to(memory_format=torch.channels_last)`, common in vision inference) would then be
analysed, and its kernels generated, for NCHW strides, and the launcher would copy the
real input into them at every call. An order is kept rather than strides so that it
survives a change of sizes (validation's smaller batch, the model-shape search).

Only dense layouts are kept (every element once, no gaps: a permutation of a contiguous
tensor). A sliced or expanded example is analysed as contiguous; the launcher still takes
it, through its strides or a copy, as it takes any other layout at run time. The order is
read from the dims longer than 1 (`memory_order_of`): an (N, C, 1, 1) channels-last example
is a contiguous one.
"""

from __future__ import annotations

import torch

# torch's own memory formats, by rank, as orders: what `__str__` names them
NAMED = {(0, 2, 3, 1): "channels-last", (0, 2, 3, 4, 1): "channels-last-3d"}


def dense_strides(shape: tuple[int, ...], order: tuple[int, ...] | None) -> tuple[int, ...]:
    """The strides of a dense tensor of `shape` whose dims lie in memory in `order`
    (None: contiguous). A size-1 dim steps as if it were 1 long, as torch's
    `memory_format` strides do, so a channels-last order gives torch's strides exactly."""
    order = tuple(range(len(shape))) if order is None else order
    strides, step = [0] * len(shape), 1
    for k in reversed(order):
        strides[k], step = step, step * max(shape[k], 1)
    return tuple(strides)


def checked_order(shape: tuple[int, ...], order: tuple[int, ...] | None
                  ) -> tuple[int, ...] | None:
    """`order` as a tuple, None for the contiguous one; ValueError for no permutation of
    `shape`'s dims."""
    if order is None:
        return None
    order = tuple(int(k) for k in order)
    if sorted(order) != list(range(len(shape))):
        raise ValueError(f"memory order {order} is no permutation of the dims of a "
                         f"{len(shape)}-d shape")
    return None if order == tuple(range(len(shape))) else order


def memory_order_of(t: torch.Tensor) -> tuple[int, ...] | None:
    """The order `t`'s dims lie in memory, where it is dense in another order than the
    contiguous one; None where it is contiguous, or not dense (see the module docstring).

    Decided by the dims longer than 1 alone: torch gives a size-1 dim some stride that
    indexes nothing (channels-last (2, 3, 1, 1) has (3, 1, 3, 3), contiguous (3, 1, 1, 1),
    and both are `is_contiguous()`), so an example whose longer dims lie in the contiguous
    order is analysed as contiguous (same spec, cache keys and kernels as a contiguous
    caller's), and otherwise gets the same order whatever its size-1 dims' strides are
    (`canonical_order`)."""
    shape, stride = tuple(t.shape), tuple(t.stride())
    if t.layout != torch.strided or t.is_contiguous():
        return None
    order = tuple(sorted(range(len(shape)), key=lambda k: (-stride[k], k)))
    placed = dense_strides(shape, order)
    if any(n != 1 and s != p for n, s, p in zip(shape, stride, placed, strict=True)):
        return None  # not dense: analysed as contiguous
    return canonical_order(shape, order)


def canonical_order(shape: tuple[int, ...], order: tuple[int, ...]) -> tuple[int, ...] | None:
    """One order for every placement of `shape`'s size-1 dims in `order` (they index
    nothing, so all lay the tensor out alike): None where the longer dims keep the
    contiguous order; torch's format where it orders them so (channels-last (2, 3, 1, 4):
    what `torch.empty_like` and elementwise results of such an input keep, so fake tensors
    propagate eager's strides); else each size-1 dim just outside the outermost dim of a
    higher index, innermost where there is none (a leading batch of 1 stays outermost)."""
    longer = [k for k in order if shape[k] != 1]
    if longer == sorted(longer):
        return None
    for named in NAMED:
        if len(named) == len(shape) and [k for k in named if shape[k] != 1] == longer:
            return named
    out = list(longer)
    for k in sorted((k for k in range(len(shape)) if shape[k] == 1), reverse=True):
        after = next((j for j in out if j > k), None)
        out.insert(len(out) if after is None else out.index(after), k)
    return tuple(out)


def order_words(order: tuple[int, ...] | None) -> str:
    """'' for contiguous, else ' channels-last' or ' memory order (1, 0)': what a spec's
    `__str__` adds after its dtype."""
    if order is None:
        return ""
    return f" {NAMED[order]}" if order in NAMED else f" memory order {order}"
