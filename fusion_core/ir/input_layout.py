"""An example input's memory layout, as an order of its dims (outermost to innermost).

A shape and dtype alone propagate every input as contiguous; a channels-last example
(`x.to(memory_format=torch.channels_last)`, common in vision inference) would then be
analysed, and its kernels generated, for NCHW strides, and the launcher would copy the
real input into them at every call. An order is kept rather than strides so that it
survives a change of sizes (validation's smaller batch, the model-shape search).

Only dense layouts are kept (every element once, no gaps: a permutation of a contiguous
tensor). A sliced or expanded example is analysed as contiguous; the launcher still takes
it, through its strides or a copy, as it takes any other layout at run time.
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
    contiguous one; None where it is contiguous, or not dense (see the module docstring)."""
    shape, stride = tuple(t.shape), tuple(t.stride())
    if t.layout != torch.strided or stride == dense_strides(shape, None):
        return None
    # torch's formats first: their strides on size-1 dims say nothing about the order, so a
    # channels-last tensor with one channel is told from a contiguous one by its exact strides
    for order in NAMED:
        if len(order) == len(shape) and stride == dense_strides(shape, order):
            return order
    if t.is_contiguous():
        return None  # contiguous but for size-1 dims' strides, which index nothing
    order = tuple(sorted(range(len(shape)), key=lambda k: (-stride[k], k)))
    placed = dense_strides(shape, order)
    if any(n != 1 and s != p for n, s, p in zip(shape, stride, placed, strict=True)):
        return None  # not dense: analysed as contiguous
    return order


def order_words(order: tuple[int, ...] | None) -> str:
    """'' for contiguous, else ' channels-last' or ' memory order (1, 0)': what a spec's
    `__str__` adds after its dtype."""
    if order is None:
        return ""
    return f" {NAMED[order]}" if order in NAMED else f" memory order {order}"
