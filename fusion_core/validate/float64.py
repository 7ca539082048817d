"""The traced graph in float64: the reference model numerics measures errors against.

Reads a traced ``fx.GraphModule`` and its inputs; writes a copy whose floating parameters,
buffers and tensor constants are float64, and whose recorded dtype arguments (a cast to
``bfloat16`` or ``float32``, a factory's ``dtype=``) say float64 too: a trace bakes the
model's dtype into those calls, and a float64 run that rounds back to bf16 at every such cast
would share eager's rounding instead of measuring it. The original graph is not modified.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

# The floating dtypes a float64 run widens; anything else (ints, bools, complex) stays.
NARROW_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def graph_in_float64(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of `gm` that computes in float64 wherever it computed in a narrower float."""
    wide = copy.deepcopy(gm).double()  # floating parameters and buffers
    for module in wide.modules():  # nested graphs too (an enabled autocast block's body)
        if isinstance(module, fx.GraphModule):
            _constants_in_float64(module)
            _dtype_arguments_in_float64(module)
    return wide


def inputs_in_float64(inputs: Sequence[Any]) -> list[Any]:
    """Floating inputs as float64 copies; token ids, masks and non-tensors as they are."""
    return [
        t.double()
        if isinstance(t, torch.Tensor) and t.dtype in NARROW_FLOATS
        else t.clone()
        if isinstance(t, torch.Tensor)
        else t
        for t in inputs
    ]


def _constants_in_float64(gm: fx.GraphModule) -> None:
    """Tensors a `get_attr` reads that are neither parameters nor buffers (torch.export
    keeps a tensor made in a forward as a plain attribute, which `Module.double` skips)."""
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        *path, name = str(node.target).split(".")
        owner = gm.get_submodule(".".join(path)) if path else gm
        value = getattr(owner, name, None)
        if isinstance(value, torch.Tensor) and value.dtype in NARROW_FLOATS:
            setattr(owner, name, value.double())


def _reinterprets_bits(node: fx.Node) -> bool:
    """`view(dtype)` reads the same bytes as another type: widening its dtype changes the
    meaning, not the precision."""
    if node.op == "call_method":
        return node.target == "view"
    return node.target is torch.ops.aten.view.dtype


def _dtype_arguments_in_float64(gm: fx.GraphModule) -> None:
    def widen(value: Any) -> Any:
        return torch.float64 if isinstance(value, torch.dtype) and value in NARROW_FLOATS else value

    changed = False
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method") or _reinterprets_bits(node):
            continue
        # A higher-order op's dtype is a mode (autocast's target type), not a value's type;
        # autocast leaves float64 tensors alone anyway.
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            continue
        args = fx.node.map_aggregate(node.args, widen)
        kwargs = fx.node.map_aggregate(node.kwargs, widen)
        if args != node.args or kwargs != node.kwargs:
            node.args, node.kwargs = args, kwargs
            changed = True
    if changed:
        gm.recompile()
