"""Make per-channel broadcasts explicit: BatchNorm's statistics become (C, 1, …, 1) views.

Reads a shape-propagated ``fx.GraphModule`` (either frontend); rewrites it in place.
``batch_norm`` reads its running mean/var, weight and bias along dim 1 of an
(N, C, H, W) input, which right-aligned broadcasting would pair with W instead.
Each such operand is routed through a ``torch.reshape`` to (C, 1, …, 1) and the call
is replaced by ``batch_norm`` below, which takes statistics of that shape, so the
module still runs and the shapes check, traffic and code generation see an
ordinary broadcast.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .registry import TARGETS, bind, lookup

PER_CHANNEL: dict[str, tuple[str, ...]] = {
    "batch_norm": ("running_mean", "running_var", "weight", "bias"),
}


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-05):
    """Eval-mode batch norm whose statistics already broadcast against `input`."""
    if training:
        raise ValueError("batch_norm with explicit channels is for eval mode only")
    y = (input - running_mean) * torch.rsqrt(running_var + eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


TARGETS[batch_norm] = ("batch_norm", None)  # same spec as F.batch_norm / aten.batch_norm


def explicit_channels(gm: fx.GraphModule) -> fx.GraphModule:
    changed = False
    for n in list(gm.graph.nodes):
        values = _eval_batch_norm(n)
        val = values["input"].meta.get("val") if values else None
        if not isinstance(val, torch.Tensor) or val.dim() < 3:
            continue  # (N, C) already broadcasts along C
        shape = (val.shape[1],) + (1,) * (val.dim() - 2)
        kwargs = {"eps": values["eps"]}
        for key in PER_CHANNEL["batch_norm"]:
            op = values.get(key)
            if isinstance(op, fx.Node):
                with gm.graph.inserting_before(n):
                    op = gm.graph.call_function(torch.reshape, (op, shape))
                op.meta.update(val=torch.reshape(op.args[0].meta["val"], shape),
                               stack_trace=n.meta.get("stack_trace"))
            kwargs[key] = op
        with gm.graph.inserting_before(n):
            new = gm.graph.call_function(batch_norm, (values["input"],), kwargs)
        new.meta.update(n.meta)
        n.replace_all_uses_with(new)
        gm.graph.erase_node(n)
        changed = True
    if changed:
        gm.recompile()
    return gm


def _eval_batch_norm(n: fx.Node) -> dict | None:
    """Bound arguments of an eval-mode batch_norm call with tensor statistics, else None."""
    if n.op != "call_function" or n.target is batch_norm:
        return None
    found = lookup(n.target)
    if not isinstance(found, tuple) or found[0].name != "batch_norm":
        return None
    try:
        values = bind(found[0], found[1], n.args, n.kwargs)
    except TypeError:
        return None
    stats = (values.get("running_mean"), values.get("running_var"))
    if values.get("training") or not all(isinstance(v, fx.Node) for v in stats):
        return None
    if not isinstance(values.get("input"), fx.Node):
        return None
    return values
