"""Split a Linear's bias off where eager adds it in a pass of its own.

Reads a shape-propagated ``fx.GraphModule`` (either frontend); rewrites it in place.
``aten::linear`` folds the bias into the GEMM (``addmm``) when the input is 2-D or
contiguous. Any other input -- a transposed activation, as in MLP-Mixer's token
mixing -- runs ``matmul`` and then ``output.add_(bias)``: one more read and write of
the whole output. Such a call whose result feeds a pointwise op becomes a bias-free
linear (still opaque) and an ordinary ``add`` of the bias, which detection may fuse
into its consumer, as Inductor does. Calls whose bias eager already fuses are left
alone: splitting them would only move bytes.

The bias-free linear carries ``meta["fusion_module"] = (path, class name)`` so the
report still names it after the user's layer.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from .bias_split import get_attr, hooked, put_in_place
from .targets import lookup

_ATEN_LINEAR = torch.ops.aten.linear.default
_ATEN_ADD = torch.ops.aten.add.Tensor


def split_linear_bias(gm: fx.GraphModule) -> fx.GraphModule:
    changed = False
    for n in list(gm.graph.nodes):
        call = _biased_linear(gm, n)
        if call is None:
            continue
        x, weight, bias, module = call
        if not (_separate_bias_pass(x) and any(_is_pointwise(u) for u in n.users)):
            continue
        graph = gm.graph
        with graph.inserting_before(n):
            if n.op == "call_module":
                weight = get_attr(graph, f"{n.target}.weight", module.weight)
                bias = get_attr(graph, f"{n.target}.bias", module.bias)
            linear, add = (_ATEN_LINEAR, _ATEN_ADD) if n.target is _ATEN_LINEAR else (
                F.linear, operator.add)
            matmul = graph.create_node("call_function", linear, (x, weight), {},
                                       name=f"{n.name}_matmul")
            added = graph.create_node("call_function", add, (matmul, bias), {},
                                      name=f"{n.name}_add_bias")
        put_in_place(n, matmul, added, module)
        changed = True
    if changed:
        gm.recompile()
    return gm


def _biased_linear(gm: fx.GraphModule, n: fx.Node
                   ) -> tuple[fx.Node, object, object, nn.Module | None] | None:
    """(input, weight, bias, module) of a linear call with a tensor bias, else None."""
    if n.op == "call_module":
        module = gm.get_submodule(str(n.target))
        if type(module) is nn.Linear and module.bias is not None and len(n.args) == 1 \
                and not n.kwargs and isinstance(n.args[0], fx.Node) and hooked(module) is None:
            return n.args[0], None, None, module
        return None
    if n.op != "call_function" or n.target not in (F.linear, _ATEN_LINEAR):
        return None
    values = dict(zip(("input", "weight", "bias"), n.args, strict=False)) | dict(n.kwargs)
    x, bias = values.get("input"), values.get("bias")
    if isinstance(x, fx.Node) and isinstance(bias, fx.Node):
        return x, values["weight"], bias, None
    return None


def _separate_bias_pass(x: fx.Node) -> bool:
    """aten::linear's own test: 2-D or contiguous input gets the bias inside the GEMM."""
    val = x.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dim() > 2 and not val.is_contiguous()


def _is_pointwise(n: fx.Node) -> bool:
    key = ("method", n.target) if n.op == "call_method" else n.target
    found = lookup(key) if n.op in ("call_function", "call_method") else None
    return isinstance(found, tuple) and found[0].kind.is_pointwise

