"""Make per-channel broadcasts explicit: BatchNorm's statistics and affine parameters and
GroupNorm's affine parameters become (C, 1, …, 1) views.

Reads a shape-propagated ``fx.GraphModule`` (either frontend); rewrites it in place.
``batch_norm`` reads its running mean/var, weight and bias along dim 1 of an
(N, C, H, W) input (on batch statistics in training mode without running ones: only its
weight and bias), and ``group_norm`` its weight and bias, which right-aligned
broadcasting would pair with W instead. Each such operand is routed through a
``torch.reshape`` to (C, 1, …, 1) and the call is replaced by the function of the same
name below, which takes operands of that shape, so the module still runs and the shapes
check, traffic and code generation see an ordinary broadcast.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
import torch.fx as fx

from .registry import training_spec
from .targets import TARGETS, bind, lookup


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-05):
    """Eval-mode batch norm whose statistics already broadcast against `input`."""
    if training:
        raise ValueError("batch_norm with explicit channels is for eval mode only")
    y = (input - running_mean) * torch.rsqrt(running_var + eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05):
    """Group norm whose affine parameters already broadcast against `input`."""
    y = torch.nn.functional.group_norm(input, num_groups, None, None, eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def batch_norm_train(input, weight=None, bias=None, eps=1e-05):
    """Batch norm on the batch's own statistics (no running statistics to update), with an
    affine part that already broadcasts against `input`."""
    y = torch.nn.functional.batch_norm(input, None, None, None, None, True, 0.0, eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


TARGETS[batch_norm] = ("batch_norm", None)  # same spec as F.batch_norm / aten.batch_norm
TARGETS[group_norm] = ("group_norm", None)
TARGETS[batch_norm_train] = ("batch_norm_train", None)

# Per spec: its explicit-channel replacement, the operands read per channel, and the tensor
# operands it cannot do without (eval-mode batch_norm reads its running statistics).
PER_CHANNEL: dict[str, tuple[Callable, tuple[str, ...], tuple[str, ...]]] = {
    "batch_norm": (batch_norm, ("running_mean", "running_var", "weight", "bias"),
                   ("running_mean", "running_var")),
    "batch_norm_train": (batch_norm_train, ("weight", "bias"), ()),
    "group_norm": (group_norm, ("weight", "bias"), ()),
}


def explicit_channels(gm: fx.GraphModule) -> fx.GraphModule:
    changed = False
    for n in list(gm.graph.nodes):
        found = _per_channel_call(n)
        if found is None:
            continue
        name, values = found
        replacement, per_channel, _ = PER_CHANNEL[name]
        val = values["input"].meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dim() < 3:
            continue  # (N, C) already broadcasts along C
        shape = (val.shape[1],) + (1,) * (val.dim() - 2)
        kwargs = {k: values[k] for k in inspect.signature(replacement).parameters
                  if k not in ("input", "training") and k in values}
        for key in per_channel:
            op = values.get(key)
            if isinstance(op, fx.Node):
                with gm.graph.inserting_before(n):
                    op = gm.graph.call_function(torch.reshape, (op, shape))
                op.meta.update(val=torch.reshape(op.args[0].meta["val"], shape),
                               stack_trace=n.meta.get("stack_trace"))
            kwargs[key] = op
        with gm.graph.inserting_before(n):
            new = gm.graph.call_function(replacement, (values["input"],), kwargs)
        new.meta.update(n.meta)
        n.replace_all_uses_with(new)
        gm.graph.erase_node(n)
        changed = True
    if changed:
        gm.recompile()
    return gm


def _per_channel_call(n: fx.Node) -> tuple[str, dict] | None:
    """(op, bound arguments) of a batch_norm (eval mode, tensor statistics) or group_norm
    call not yet rewritten, else None."""
    if n.op != "call_function" or any(n.target is r for r, _, _ in PER_CHANNEL.values()):
        return None
    found = lookup(n.target)
    if not isinstance(found, tuple) or found[0].name not in PER_CHANNEL:
        return None
    try:
        values = bind(found[0], found[1], n.args, n.kwargs)
    except TypeError:
        return None
    spec = found[0]
    if values.get("training"):  # batch statistics, when there are no running ones to update
        spec = training_spec(spec, values)
        if spec is None or spec.name not in PER_CHANNEL:
            return None
    required = PER_CHANNEL[spec.name][2]
    if not all(isinstance(values.get(k), fx.Node) for k in required):
        return None
    if not isinstance(values.get("input"), fx.Node):
        return None
    return spec.name, values
