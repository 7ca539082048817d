"""Split a convolution's bias off on the devices where it is added in a pass of its own.

Reads a shape-propagated ``fx.GraphModule`` (either frontend); rewrites it in place.
Off the CPU, a biased convolution does not apply its bias inside the convolution:
eager's cuDNN kernels take none (ATen adds it afterwards), and Inductor lowers the call
as a bias-free convolution plus a broadcast ``add``, which it then fuses into the
pointwise or reduction kernel that reads the result (ConvNeXt's depthwise conv ->
permute -> LayerNorm, conv -> BatchNorm -> ReLU). A convolution whose result reaches
such an op (directly or through views) becomes a bias-free convolution (still opaque)
and an ordinary ``add`` of the bias reshaped to (C, 1, ..., 1), so detection can fuse it
the same way. On the CPU, mkldnn adds the bias inside the convolution, in eager and
under Inductor alike: there the graph is left alone, since splitting would only move
bytes. The target device is the one the caller names, else the one the shape pass gave
the convolution's result (where the model's parameters are).

The bias-free call and the add carry the metadata ``bias_split.py`` describes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from .bias_split import get_attr, hooked, put_in_place
from .targets import lookup

aten = torch.ops.aten
_ATEN_ADD = aten.add.Tensor


def _conv_args(x: fx.Node, weight: fx.Node, m: nn.Module) -> tuple:
    return (x, weight, None, m.stride, m.padding, m.dilation, m.groups)


def _transposed_args(x: fx.Node, weight: fx.Node, m: nn.Module) -> tuple:
    return (x, weight, None, m.stride, m.padding, m.output_padding, m.groups, m.dilation)


# Module class -> the functional call computing it without bias, and its arguments from
# (input, weight, module). Subclasses with a forward of their own (timm's Conv2dSame) are
# not in the table.
_MODULE_CALLS: dict[type[nn.Module], tuple[Callable, Callable[..., tuple]]] = {
    nn.Conv1d: (F.conv1d, _conv_args), nn.Conv2d: (F.conv2d, _conv_args),
    nn.Conv3d: (F.conv3d, _conv_args),
    nn.ConvTranspose1d: (F.conv_transpose1d, _transposed_args),
    nn.ConvTranspose2d: (F.conv_transpose2d, _transposed_args),
    nn.ConvTranspose3d: (F.conv_transpose3d, _transposed_args),
}

# Functions (FX) and aten overloads (export) that take the bias as argument 2 or `bias=`.
_FUNCTIONS = frozenset({
    F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d,
    aten.conv1d.default, aten.conv2d.default, aten.conv3d.default, aten.conv1d.padding,
    aten.conv2d.padding, aten.conv3d.padding, aten.conv_transpose1d.default,
    aten.conv_transpose2d.input, aten.conv_transpose3d.input, aten.convolution.default,
})
_BIAS_INDEX = 2


def bias_added_apart(device: torch.device) -> bool:
    """Whether a convolution on `device` adds its bias in a pass of its own: Inductor peels
    it off on every device but the CPU (its `convolution` lowering), and eager's cuDNN path
    adds it after the convolution; mkldnn on the CPU applies it inside."""
    return device.type != "cpu"


def split_conv_bias(gm: fx.GraphModule, device: torch.device | None = None) -> fx.GraphModule:
    changed = False
    for n in list(gm.graph.nodes):
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        if not (bias_added_apart(val.device if device is None else device)
                and _is_biased_conv(gm, n) and _feeds_compute(n)):
            continue
        graph = gm.graph
        with graph.inserting_before(n):
            target, args, kwargs, bias = _bias_free_call(gm, n)
            conv = graph.create_node("call_function", target, args, kwargs,
                                     name=f"{n.name}_conv")
            # (C, 1, ..., 1): one 1 per spatial dim of the weight (batched or not)
            shape = (-1,) + (1,) * (args[1].meta["val"].dim() - 2)
            shaped = graph.call_function(torch.reshape, (bias, shape))
            add = _ATEN_ADD if isinstance(target, torch._ops.OpOverload) else operator.add
            added = graph.create_node("call_function", add, (conv, shaped), {},
                                      name=f"{n.name}_add_bias")
        shaped.meta.update(val=torch.reshape(bias.meta["val"], shape),
                           stack_trace=n.meta.get("stack_trace"))
        module = gm.get_submodule(str(n.target)) if n.op == "call_module" else None
        put_in_place(n, conv, added, module)
        changed = True
    if changed:
        gm.recompile()
    return gm


def _is_biased_conv(gm: fx.GraphModule, n: fx.Node) -> bool:
    """A convolution module call or function call with a tensor bias and weight."""
    if n.op == "call_module":
        module = gm.get_submodule(str(n.target))
        return (type(module) in _MODULE_CALLS and module.bias is not None
                and module.padding_mode == "zeros" and len(n.args) == 1 and not n.kwargs
                and isinstance(n.args[0], fx.Node) and hooked(module) is None)
    if n.op != "call_function" or n.target not in _FUNCTIONS:
        return False
    bias = n.args[_BIAS_INDEX] if len(n.args) > _BIAS_INDEX else n.kwargs.get("bias")
    return isinstance(bias, fx.Node) and len(n.args) > 1 and isinstance(n.args[1], fx.Node)


def _bias_free_call(gm: fx.GraphModule, n: fx.Node) -> tuple[object, tuple, dict, fx.Node]:
    """(target, args, kwargs, bias) of `n`'s convolution without its bias; inserts the
    parameters' get_attr nodes of a module call at the graph's insertion point."""
    if n.op == "call_module":
        module = gm.get_submodule(str(n.target))
        target, build = _MODULE_CALLS[type(module)]
        weight = get_attr(gm.graph, f"{n.target}.weight", module.weight)
        bias = get_attr(gm.graph, f"{n.target}.bias", module.bias)
        return target, build(n.args[0], weight, module), {}, bias
    args, kwargs = list(n.args), dict(n.kwargs)
    if len(args) > _BIAS_INDEX:
        bias, args[_BIAS_INDEX] = args[_BIAS_INDEX], None
    else:
        bias = kwargs.pop("bias")
    return n.target, tuple(args), kwargs, bias


def _feeds_compute(n: fx.Node) -> bool:
    """Whether a pointwise op or reduction reads `n`, directly or through views."""
    pending, seen = list(n.users), set()
    while pending:
        user = pending.pop()
        if user in seen or user.op not in ("call_function", "call_method"):
            continue
        seen.add(user)
        found = lookup(("method", user.target) if user.op == "call_method" else user.target)
        if found == "view":
            pending.extend(user.users)
        elif isinstance(found, tuple) and found[0].kind.is_compute:
            return True
    return False

