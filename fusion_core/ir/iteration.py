"""A group's iteration space: the one rule for the shape a fused kernel iterates over.

Reads a group of the ``FusionGraph`` (its nodes in graph order and the values it writes)
and its reductions' dims (the registry's table in ``ir/reductions.py``); returns an
``IterationSpace``: the *anchor* value the space is built from, the view steps
(``ir/views.py``) that turn a tensor of the anchor's shape into the kernel's iteration
shape, and how many trailing dims of that shape a reduction's columns cover.

The anchor is the source of the group's first reduction; the steps are the reduction's own
order: the kept dims in their order, then the reduced ones in theirs (a ``Permute`` when that
differs from the value's order, so a contiguous input still walks memory with its last dim),
group_norm's channel dim split into (groups, channels per group) (a ``Split``), and a
leading size-1 dim when nothing else is left for the rows (``(N,)`` -> ``(1, N)``).
Reduced dims stay separate dims of the space: the columns cover all of them, and a tensor
whose strides do not merge them (a slice, a permuted view) is still indexed exactly.
Without a reduction the anchor is the largest value the group writes, as it is.

Legality reads the anchor's shape (the values in the user's own dims); lowering
(``codegen/indexing.py``) spreads the steps from the anchor to every value of the group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .graph import FusionGraph, Node, OpKind, Ref
from .reductions import ReductionRule, reduced_dims, rule_of
from .spelling import said
from .views import Permute, Split, Step, Unsqueeze, shape_after


class NoIterationSpace(ValueError):
    """The group has no iteration space; `nodes` names the group nodes to blame."""

    def __init__(self, message: str, nodes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


@dataclass(frozen=True)
class IterationSpace:
    anchor: str  # the value the space is built from
    anchor_shape: tuple[int, ...]  # its shape: the group's dims as the user holds them
    steps: tuple[Step, ...]  # from the anchor's shape to the kernel's iteration shape
    reduced: int  # trailing dims of `shape` a reduction covers (0: no reduction)

    @property
    def shape(self) -> tuple[int, ...]:
        """The kernel's iteration shape."""
        return shape_after(self.steps, self.anchor_shape)


def reduction_order(
    rule: ReductionRule | None, params: Mapping[str, Any], shape: tuple[int, ...]
) -> tuple[tuple[Step, ...], int] | None:
    """The steps from the source (of `shape`) of a reduction by `rule` with `params` to the
    reduction's own order, and how many trailing dims there it reduces (module docstring);
    None if `rule` is None or the params name no dims it can reduce."""
    dims = reduced_dims(rule, params, len(shape)) if rule is not None else None
    if not dims:
        return None
    steps: list[Step] = []
    if rule.axes == "groups":  # (N, C, *S) -> (N, G, C/G, *S): reduce C/G and S
        steps.append(Split(1, params["num_groups"]))
        reduced = len(shape) - 1
    else:
        kept = tuple(k for k in range(len(shape)) if k not in dims)
        if kept + dims != tuple(range(len(shape))):
            steps.append(Permute(kept + dims))
        reduced = len(dims)
    if len(shape_after(steps, shape)) < 2:  # one row: (N,) -> (1, N)
        steps.append(Unsqueeze((0,)))
    return tuple(steps), reduced


def _shape(g: FusionGraph, name: str) -> tuple[int, ...]:
    meta = g[name].meta
    if meta is None:
        raise NoIterationSpace(
            f"{said(g, name)} has no tensor metadata (shape propagation missed it)",
            (name,) if g[name].kind.is_compute else (),
        )
    return tuple(meta.shape)


def _first_reduction(g: FusionGraph, nodes: Sequence[str]) -> Node | None:
    return next(
        (
            g[n]
            for n in nodes
            if g[n].kind is OpKind.REDUCTION and g[n].inputs and isinstance(g[n].inputs[0], Ref)
        ),
        None,
    )


def anchor(g: FusionGraph, nodes: Sequence[str], outputs: Sequence[str]) -> str | None:
    """The value a group's space is built from (module docstring): the source of its first
    reduction, else the largest of `outputs` with a shape; None if there is neither."""
    first = _first_reduction(g, nodes)
    if first is not None:
        return first.inputs[0].name
    written = [n for n in outputs if g[n].meta is not None]
    return max(
        written, key=lambda n: (math.prod(g[n].meta.shape), len(g[n].meta.shape)), default=None
    )


def iteration_space(g: FusionGraph, nodes: Sequence[str], outputs: Sequence[str]) -> IterationSpace:
    """The space of a group whose `nodes` are in graph order and which writes `outputs`
    (module docstring); NoIterationSpace naming the node to blame when there is none."""
    name = anchor(g, nodes, outputs)
    if name is None:
        raise NoIterationSpace("the group writes no tensor", tuple(outputs))
    shape = _shape(g, name)
    first = _first_reduction(g, nodes)
    if first is None:
        return IterationSpace(name, shape, (), 0)
    order = reduction_order(rule_of(first), dict(first.params), shape)
    if order is None:
        raise NoIterationSpace(f"{said(g, first.name)}: cannot tell which dims it reduces",
                               (first.name,))
    return IterationSpace(name, shape, *order)
