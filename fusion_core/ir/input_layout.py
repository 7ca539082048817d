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

A shape given as text names its order after a colon (`shape_order`): `8,64,56,56:channels_last`,
as torch's memory formats are named, so a command line analyses what a tensor example would.
"""

from __future__ import annotations

import re

import torch

# torch's own memory formats, by rank, as orders: what `__str__` names them
NAMED = {(0, 2, 3, 1): "channels-last", (0, 2, 3, 4, 1): "channels-last-3d"}
# what a shape's text may name after its colon: torch.memory_format's names, and the report's
# (hyphens for underscores), so an order copied from a report reads back
FORMATS: dict[str, tuple[int, ...] | None] = {
    "contiguous": None, **{name.replace("-", "_"): order for order, name in NAMED.items()}}


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


def shape_order(text: str, shape: tuple[int, ...], given: str) -> tuple[int, ...] | None:
    """The order `text`, the part of the shape text `given` after its colon, names for
    `shape`: a memory format's name (`FORMATS`) or the dims outermost first ("0,2,3,1").
    Canonical as a tensor example's (`canonical_order`): `2,3,1,1:channels_last` is
    analysed as the contiguous tensor it lies as. ValueError names what is wrong and the fix."""
    word = text.strip().replace("-", "_")
    rank = len(shape)
    if word in FORMATS:
        order = FORMATS[word]
        if order is not None and len(order) != rank:
            other = next((n for n, o in FORMATS.items() if o is not None and len(o) == rank),
                         None)
            fix = f"write :{other} for a {rank}-d shape" if other else f"drop ':{text.strip()}'"
            raise ValueError(f"{text.strip()} is a memory order of {len(order)}-d shapes and "
                             f"input shape {given!r} has {rank} dims: {fix}")
    elif re.fullmatch(r"\d+(\s*,\s*\d+)*", word):
        order = tuple(int(k) for k in word.split(","))
        if sorted(order) != list(range(rank)):
            raise ValueError(f"memory order {text.strip()!r} in input shape {given!r} is no "
                             f"permutation of its {rank} dims: give each of "
                             f"{', '.join(map(str, range(rank)))} once, outermost first")
    else:
        what = f"unknown memory order {text.strip()!r}" if word else "no memory order"
        raise ValueError(f"{what} after ':' in input shape {given!r}: name one of "
                         f"{', '.join(FORMATS)}, or the dims outermost first (e.g. "
                         "8,64,56,56:channels_last or 8,64,56,56:0,2,3,1)")
    return None if order is None else canonical_order(shape, order)
