"""One node as Triton source: the op registry's rule for it, and the constants it writes.

Reads a ``Node`` of the ``FusionGraph`` (op, params, ``TensorMeta``); returns the rule that
writes a pointwise op as one expression over its operands (the bool or integer variant where
the node's dtype asks for one), a reduction's rule and epsilon, and Python constants as
Triton literals. Raises ``LoweringError`` naming the node when the registry has no rule.
``lower.py`` binds what the rules write to the kernel's temporaries.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..ir.graph import FusionGraph, Node, Ref, TensorMeta
from ..ir.lowerings import (
    BOOL_LOWERINGS,
    HALF_LOWERINGS,
    HALF_RESULT_LOWERINGS,
    INT_LOWERINGS,
    TL_TYPES,
)
from ..ir.reductions import ReductionRule
from ..ir.registry import SPECS
from ..ir.spelling import said
from .int_scalars import Typed
from .layout import LoweringError


def literal(value: object) -> str:
    """A Python constant as Triton source (inf/nan, bools, ints, floats, None, ``Typed``)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, Typed):
        return f"tl.full([], {value.value!r}, {TL_TYPES[value.dtype]})"
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "-float('inf')"
        return repr(value)
    raise LoweringError(f"cannot write {value!r} ({type(value).__name__}) as a Triton literal")


def node_meta(graph: FusionGraph, name: str) -> TensorMeta:
    meta = graph[name].meta
    if meta is None:
        raise LoweringError(f"{said(graph, name)} has no tensor metadata (shape propagation "
                            "missed it)")
    return meta


_UNSIGNED = (torch.bool, torch.uint8, torch.uint16, torch.uint32, torch.uint64)


def pointwise_rule(graph: FusionGraph, node: Node) -> Callable:
    """The registry's rule writing `node` as one expression (operands, params -> source, or
    None for params it cannot write), the bool or integer variant for such a dtype."""
    spec = SPECS.get(node.op)
    if spec is None or not callable(spec.lower):
        raise LoweringError(f"{said(graph, node.name)} has no pointwise lowering rule")
    refused = None if spec.refused is None or node.meta is None else spec.refused(
        tuple(node_meta(graph, a.name).dtype if isinstance(a, Ref) else a for a in node.inputs),
        node.meta.dtype)
    if refused is not None:  # eager raises: the op is left to it, said so
        raise LoweringError(f"{said(graph, node.name)} {refused}", (node.name,))
    if (spec.divisor is not None and node.meta is not None
            and not node.meta.dtype.is_floating_point):
        # An integer division (`div` has an integer result only with a rounding mode):
        # Triton's `//` and `%` refuse operands of mixed signedness (uint8 or bool beside a
        # signed divisor, or a signed literal): left to eager, said so
        named = [a.name for a in node.inputs if hasattr(a, "name")]  # not the literals
        odd = [n for n in named if graph[n].meta is not None and graph[n].meta.dtype in _UNSIGNED]
        if odd:
            raise LoweringError(f"{said(graph, node.name)} divides {said(graph, odd[0])}, of "
                                f"an unsigned or bool dtype: Triton's integer division takes "
                                "signed operands only")
    if node.meta is not None and node.meta.dtype is torch.bool:
        return BOOL_LOWERINGS.get(node.op, spec.lower)
    if node.meta is not None and not node.meta.dtype.is_floating_point:
        return INT_LOWERINGS.get(node.op, spec.lower)
    # ...of a 16-bit result with a tensor divisor: eager divides a number by multiplying with
    # its float32 inverse, unrounded, and two 16-bit tensors in their dtype, rounded
    if node.meta is not None and node.meta.dtype in (torch.float16, torch.bfloat16) and (
            node.op in HALF_LOWERINGS and len(node.inputs) > 1
            and hasattr(node.inputs[1], "name")):
        return HALF_LOWERINGS[node.op](node.meta.dtype)
    if node.meta is not None and node.meta.dtype in (torch.float16, torch.bfloat16):
        return HALF_RESULT_LOWERINGS.get(node.op, spec.lower)
    return spec.lower


def reduction_rule(graph: FusionGraph, node: Node) -> tuple[ReductionRule, tuple[str, ...]]:
    """The registry's rule for a reduction node, and the names of its operands in order."""
    spec = SPECS[node.op]
    rule = spec.lower
    if not isinstance(rule, ReductionRule):
        raise LoweringError(f"{said(graph, node.name)} has no reduction rule")
    return rule, tuple(spec.operands)


def reduction_eps(graph: FusionGraph, node: Node) -> float:
    """The node's `eps`, or rms_norm's default: the input dtype's machine epsilon."""
    src_meta = node_meta(graph, node.inputs[0].name)
    eps = node.param("eps")
    if eps is None:
        eps = torch.finfo(src_meta.dtype).eps if src_meta.dtype.is_floating_point else 0.0
    return float(eps)
