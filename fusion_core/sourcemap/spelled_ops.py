"""Which source spellings a graph op answers to: `relu`, `.float()`, `+` (``aten.add``).

Reads one FX node (its target, its capture's spelling metadata); ``unify.py`` matches the
user's calls and operators against these names.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ..ir.max_values import SPELLED
from .pyexpr import ATEN_NAMES

# The Tensor methods that cast to one dtype (`h.float()` is `h.to(torch.float32)`).
DTYPE_METHODS = {torch.float32: "float", torch.float64: "double", torch.float16: "half",
                 torch.bfloat16: "bfloat16", torch.int64: "long", torch.int32: "int",
                 torch.int16: "short", torch.int8: "char", torch.uint8: "byte",
                 torch.bool: "bool"}


def op_names(node: fx.Node) -> set[str]:
    """What the source may call this node's function: `relu`, `softmax` (aten `_softmax`)."""
    t = node.target
    if node.op == "call_method":
        names = {str(t)}
    else:
        names = {getattr(t, "__name__", "")}
        aten = getattr(t, "_opname", None)  # torch.export: aten.softmax.int → "softmax"
        if aten:
            names |= {aten, aten.lstrip("_")}
        if aten == "to":  # export records `.float()` as `aten.to.dtype(x, torch.float32)`
            dtypes = [a for a in (*node.args[1:], *node.kwargs.values())
                      if isinstance(a, torch.dtype)]
            names |= {DTYPE_METHODS.get(dtypes[0], "")} if len(dtypes) == 1 else set()
    if node.meta.get("fusion_inplace"):  # `.relu_()` the capture made out of place
        names |= {f"{n}_" for n in names if n}
    if node.meta.get(SPELLED):  # `x.max(1).values` the capture wrote as `amax`
        names |= {node.meta[SPELLED]}
    return names - {""}


def same_operator(fn_or_node: Any, py_op: Any) -> bool:
    node = fn_or_node
    if node.op != "call_function" or py_op is None:
        return False
    return node.target is py_op or ATEN_NAMES.get(py_op) in op_names(node)
