"""Make per-channel broadcasts explicit: BatchNorm's statistics become (C, 1, …, 1) views.

Reads a shape-propagated ``fx.GraphModule`` (either frontend); rewrites it in place.
``batch_norm`` reads its running mean/var, weight and bias along dim 1 of an
(N, C, H, W) input, which right-aligned broadcasting would pair with W instead.
Each such operand is routed through a ``torch.reshape`` to (C, 1, …, 1), so the
shapes check, traffic and code generation see an ordinary broadcast.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .registry import bind, lookup

PER_CHANNEL: dict[str, tuple[str, ...]] = {
    "batch_norm": ("running_mean", "running_var", "weight", "bias"),
}


def explicit_channels(gm: fx.GraphModule) -> fx.GraphModule:
    changed = False
    for n in list(gm.graph.nodes):
        operands = _per_channel_operands(n)
        val = n.args[0].meta.get("val") if operands and isinstance(n.args[0], fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.dim() < 3:
            continue  # (N, C) already broadcasts along C
        shape = (val.shape[1],) + (1,) * (val.dim() - 2)
        for op in operands:
            with gm.graph.inserting_before(n):
                view = gm.graph.call_function(torch.reshape, (op, shape))
            view.meta["val"] = torch.reshape(op.meta["val"], shape)
            if "stack_trace" in n.meta:
                view.meta["stack_trace"] = n.meta["stack_trace"]
            n.replace_input_with(op, view)
            changed = True
    if changed:
        gm.recompile()
    return gm


def _per_channel_operands(n: fx.Node) -> list[fx.Node]:
    if n.op != "call_function":
        return []
    found = lookup(n.target)
    if not isinstance(found, tuple) or found[0].name not in PER_CHANNEL:
        return []
    spec, sig = found
    try:
        values = bind(spec, sig, n.args, n.kwargs)
    except TypeError:
        return []
    picked = (values.get(k) for k in PER_CHANNEL[spec.name])
    return list(dict.fromkeys(v for v in picked if isinstance(v, fx.Node)
                              and isinstance(v.meta.get("val"), torch.Tensor)
                              and v.meta["val"].dim() == 1))
