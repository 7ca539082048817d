"""Broadcast indexing: how one tensor is addressed from a kernel's flat iteration index.

Reads a tensor's shape and strides and the kernel's iteration shape (the
"domain"); returns an ``Access``: the domain dims the tensor really spans,
merged into groups of dims that are contiguous with each other in memory. A
group ``[first, last)`` turns the flat index ``i`` into
``(i % span[first] // span[last]) * stride`` (``span[k]`` is the product of
the domain dims from ``k`` on), so a contiguous full-size tensor is indexed by
``i`` itself, a row vector by ``i % n_cols``, a column vector by
``i // n_cols * stride``, and a sliced buffer (a causal mask cut from a
256x256 buffer) through its own strides, without a copy.

Dims where the tensor has size 1 (or which it lacks: shapes are right-aligned)
are broadcast and get no term. A tensor with no groups is one element (a 0-d
tensor or a scalar-shaped one) and is loaded once per program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import FusionAdvisorError


class LoweringError(FusionAdvisorError):
    """A group the code generator cannot lower; `nodes` names the group nodes to blame
    (what the legality check's dry run prunes), empty when no node is to blame."""

    def __init__(self, message: str, nodes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


@dataclass(frozen=True)
class Group:
    first: int  # domain dims [first, last)
    last: int
    unit: bool  # the innermost dim has stride 1: no multiply in the index


@dataclass(frozen=True)
class Access:
    aligned: tuple[int, ...]  # the tensor's shape, right-aligned to the domain's rank
    groups: tuple[Group, ...]

    @property
    def is_scalar(self) -> bool:
        return not self.groups

    def spans_cols(self, rank: int) -> bool:
        return any(g.last == rank for g in self.groups)


def align(shape: tuple[int, ...], stride: tuple[int, ...], rank: int
          ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Right-align shape/stride to `rank` (leading size-1 dims of stride 0)."""
    pad = rank - len(shape)
    if pad < 0:
        raise LoweringError(f"a value of shape {shape} has more dims than the kernel's "
                            f"{rank}-d iteration space")
    return (1,) * pad + tuple(shape), (0,) * pad + tuple(stride)


def access(shape: tuple[int, ...], stride: tuple[int, ...], domain: tuple[int, ...],
           fixed: bool = False, cut: int | None = None, grows: int = 0) -> Access:
    """Group the domain dims `shape` spans (see the module docstring). `fixed`: the tensor
    keeps its shape whatever the batch (a parameter, or computed from parameters only).
    `cut`: a cat's operand seen at the result's size along that dim, its own strides
    kept (``ir/views.Piece``): no group reaches past it outward, as the operand's real
    size there is smaller (the launcher checks its groups at that size). `grows`: for a
    value the kernel writes, whose shape the launcher takes from the iteration shape, the
    domain dims before it that follow that shape (a per-row result's reduced dims stay 1)."""
    rank = len(domain)
    dims, strides = align(tuple(shape), tuple(stride), rank)
    own_first = rank - len(shape)  # the first domain dim the tensor itself has
    groups: list[Group] = []
    first = last = None  # the open group
    unit = True
    base = 0  # stride the next-outer dim needs to continue the open group
    for k in reversed(range(rank)):
        size, want = dims[k], domain[k]
        if size != want and size != 1:
            raise LoweringError(f"shape {tuple(shape)} does not broadcast to the iteration "
                                f"shape {domain}")
        if want == 1 and not own_first <= k < grows:
            continue  # nothing to index; never breaks a group
        # An output's own size-1 dim (a length of 1 analysed, between the batch and the
        # features) grows with the iteration shape at other sizes: a group spans it, else
        # every position along it would be stored to the first one's place.
        if size == 1 and want != 1:  # broadcast dim: close the open group
            if first is not None:
                groups.append(Group(first, last, unit))
            first = None
            continue
        if first is not None and strides[k] == base and first != cut:
            first = k
        else:
            if first is not None:
                groups.append(Group(first, last, unit))
            first, last, unit = k, k + 1, strides[k] == 1
        base = strides[k] * size
    if first is not None:
        groups.append(Group(first, last, unit))
    # Size-1 domain dims at the edges join the outer/inner group (`i` instead of `i % span0`).
    # The outer ones may be a batch of 1 that grows at run time: only a tensor that has those
    # dims and grows with them spans them; one that lacks them (a (C, 1, 1) BatchNorm weight
    # over NCHW) or is `fixed` (a (1, C, 1, 1) parameter) stays broadcast along them. They
    # join the outer group where their strides continue it (a contiguous tensor), else they
    # are a group of their own (NCHW permuted to NHWC: the batch stride is C·H·W).
    ordered = list(reversed(groups))
    if ordered and not fixed and own_first < ordered[0].first and all(
            d == 1 for d in domain[:ordered[0].first]):
        head = ordered[0]
        # not past a cat piece's cut: its operand is shorter there, so the dims outside it
        # step by their own strides (a batch of 1 that grows: `x[:, :-1]` of a token shift)
        if head.first != cut and all(strides[k] == base for k in range(own_first, head.first)):
            ordered[0] = Group(own_first, head.last, head.unit)
        else:
            ordered.insert(0, Group(own_first, head.first, False))
    if ordered and all(d == 1 for d in domain[ordered[-1].last:]):
        ordered[-1] = Group(ordered[-1].first, rank, ordered[-1].unit)
    return Access(dims, tuple(ordered))


def dense_permuted(shape: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, ...] | None:
    """`stride` where it lays `shape` out densely in another order than the contiguous one
    (channels-last, a transposed result), so that a result can be allocated the way eager
    allocates it; None where it is contiguous already, or not dense (overlapping, gaps)."""
    order = sorted(range(len(shape)), key=lambda k: -stride[k])
    step, dense = 1, True
    for k in reversed(order):
        if shape[k] != 1 and stride[k] != step:
            dense = False
        step *= shape[k]
    contiguous = all(stride[k] == math.prod(shape[k + 1:]) for k in range(len(shape))
                     if shape[k] != 1)
    return tuple(stride) if dense and not contiguous else None


def eager_order(shape: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, ...]:
    """The dims of a dense layout from outermost to innermost in memory. A size-1 dim whose
    stride equals a longer dim's lies just inside it (torch gives it the stride of the dims
    inside it: (3, 1, 6) transposed from (6, 1, 3) has (1, 3, 3), its H between the 6 and
    the 3), so `_dense_strides` of the order gives eager's strides back."""
    return tuple(sorted(range(len(shape)), key=lambda k: (-stride[k], shape[k] == 1, k)))
