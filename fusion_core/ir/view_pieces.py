"""Two steps of ``views.py`` that reach past their operand's strides: a concatenation's
operand seen as part of its result (``Piece``) and an element read several times
(``Repeat``, a nearest upsample's). ``views.py`` re-exports both; see it for what a step is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .views import Step


@dataclass(frozen=True)
class Piece:
    """A concatenation's operand as part of its result: the operand fills coordinates
    [start, start + its size) of dim `dim` (negative: counted from the end) of a result
    `total` long there, and is read at coordinate - start, masked elsewhere
    (``codegen/loads.py``). Always a chain's last step. As a view: the operand at the
    result's size with its own strides, which only a meta tensor can hold (it reaches past
    the operand's memory); a launcher passes the operand itself (``source``). `cat` and
    `part` name the cat and which of its operands this is: the bounds at analysis are
    `start` and `total`, a launcher reads them again from its operands at each call
    (``codegen/cat_bounds.py``). With `per`, it *straddles* groups of `per` channels
    (``ir/concat.pieces``): from a size-1 dim `dim` and its own channels at `dim + 1` it
    fills both as (total / per, per), read at channel `dim * per + (dim + 1)` - start."""

    dim: int
    start: int
    total: int
    cat: str = ""
    part: int = 0
    per: int = 0  # straddling groups of this many channels (0: a plain piece)

    @property
    def along(self) -> int:  # the dim of the operand's own length before the piece
        return self.dim + 1 if self.per else self.dim

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        stride = list(t.stride())
        if self.per:  # a group steps over `per` channels
            stride[self.dim] = self.per * stride[self.dim + 1]
        return t.as_strided(self.shape(tuple(t.shape)), stride, t.storage_offset())

    def source(self, var: str) -> str:
        return var

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return None  # the rest of the result is other operands'

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        out = list(shape)
        if self.per:
            out[self.dim], out[self.dim + 1] = self.total // self.per, self.per
        else:
            out[self.dim] = self.total
        return tuple(out)


@dataclass(frozen=True)
class Repeat:
    """Each element of dim `dim` read `factor` times along a new dim after it, stride 0
    (`unsqueeze(dim + 1)` then `expand`; any size elsewhere). A nearest upsample by an
    integer factor is these then a ``Merge`` of each (size, factor) pair
    (``ir/upsample.py``); no strides express that merge, so such a chain indexes only
    where the kernel's domain splits the upsampled dims again
    (``codegen/upsample_space.py``): ``cancelled`` drops the merge with that split."""

    dim: int
    factor: int

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        t = t.unsqueeze(self.dim + 1)
        sizes = list(t.shape)
        sizes[self.dim + 1] = self.factor
        return t.expand(sizes)

    def source(self, var: str) -> str:
        return f"_repeated({var}, {self.dim}, {self.factor})"

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return None  # it repeats elements

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (*shape[:self.dim + 1], self.factor, *shape[self.dim + 1:])
