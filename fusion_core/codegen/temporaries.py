"""A kernel's temporaries: the registers lowering names, and the operands each node reads.

Reads the graph value each temporary holds, whether it is one value per row and its phase
(before or after the reduction: ``lower.py``), and the 16-bit values computed unrounded;
writes the operands a node's lowering rule takes (temporaries and literals), with the
rounded (``half_reads.py``) and converted (0-dim tensors, ``int_scalars.py``) copies they
need as statements to put before that node's own. ``lower.py`` owns one per kernel plan.
"""

from __future__ import annotations

import torch

from ..ir.graph import FusionGraph, Node, Ref
from ..ir.lowerings import cast
from .half_reads import compared_scalars, rounding, rounds_operands
from .int_scalars import integer_scalars, zero_dim_dtypes
from .node_lowering import literal
from .plan import ScalarArg, Stmt


class Temporaries:
    """The temporaries `v0, v1, ...` of one kernel, numbered in the order they are made."""

    def __init__(self, scalars: tuple[ScalarArg, ...]) -> None:
        self.count = 0
        self.of: dict[str, str] = {a.value: a.param for a in scalars}  # graph value -> temp
        self.read_temps: dict[tuple[str, str], str] = {}  # (reader, input) loaded its own way
        self.per_row: dict[str, bool] = {}  # temporary -> one value per row
        self.phase: dict[str, str] = {}  # temporary -> "pre" / "post"
        self.unrounded: dict[str, torch.dtype] = {}  # 16-bit temporary -> its dtype
        # such a temporary -> its rounded copy; (0-dim's, dtype) -> its converted copy
        self.rounded: dict[str | tuple[str, torch.dtype], str] = {}
        self.roundings: list[Stmt] = []  # rounded/converted copies made for the node lowered

    def fresh(self, per_row: bool, phase: str) -> str:
        """A new temporary, no graph value's own (a second load, a coordinate, a copy)."""
        temp = f"v{self.count}"
        self.count += 1
        self.per_row[temp], self.phase[temp] = per_row, phase
        return temp

    def new(self, name: str, per_row: bool, phase: str) -> str:
        """A new temporary holding graph value `name`."""
        self.of[name] = temp = self.fresh(per_row, phase)
        return temp

    def taken(self, reader: str, name: str) -> str:
        """`name`'s temporary as node `reader` indexes it (its own load where its map differs)."""
        return self.read_temps.get((reader, name), self.of[name])

    def take_roundings(self) -> list[Stmt]:
        """The copies made since the last call, to go before the statement reading them."""
        made, self.roundings = self.roundings, []
        return made

    def operands(self, graph: FusionGraph, node: Node) -> tuple[tuple[str, ...], dict]:
        """`node`'s operands written, and its params (numbers as eager reads them)."""
        inputs, params = integer_scalars(graph, node, compared_scalars(graph, node),
                                         dict(node.params))
        to = zero_dim_dtypes(graph, node)
        return tuple(self.converted(self.read(node, a.name), a.name, to.get(a.name))
                     if isinstance(a, Ref) else literal(a) for a in inputs), params

    def converted(self, temp: str, name: str, dtype: torch.dtype | None) -> str:
        """`temp` converted to `dtype` as eager converts a 0-dim tensor (``int_scalars``)."""
        if dtype is None:
            return temp
        if (temp, dtype) not in self.rounded:
            self.rounded[(temp, dtype)] = new = self.fresh(self.per_row[temp], self.phase[temp])
            self.roundings.append(Stmt(new, cast(temp, dtype), name, "to", (temp,),
                                       self.per_row[new], self.phase[new]))
        return self.rounded[(temp, dtype)]

    def read(self, reader: Node, name: str, reduced: bool = False) -> str:
        """`name`'s temporary as `reader` takes it: rounded to its 16-bit dtype first where
        `reader` makes another dtype, reduces it or rounds (``half_reads.py``)."""
        temp = self.taken(reader.name, name)
        dtype = self.unrounded.get(temp)
        if dtype is None or reader.meta is None or (reader.meta.dtype == dtype and not reduced
                                                    and not rounds_operands(reader)):
            return temp
        if temp not in self.rounded:
            self.rounded[temp] = new = self.fresh(self.per_row[temp], self.phase[temp])
            self.roundings.append(rounding(temp, new, dtype, name, self.per_row[new],
                                           self.phase[new]))
        return self.rounded[temp]
