"""Eager references for clusters: what a generated kernel must reproduce.

Reads an ``Analysis`` (its shape-propagated ``graph_module``) and a cluster;
returns plain PyTorch callables and tensors for numerics checks:

- ``eager_cluster(analysis, cluster)``: runs the cluster's own FX nodes on
  real tensors, ``f(*inputs) -> tuple`` of the cluster's outputs, in
  ``cluster.outputs`` order (inputs in ``cluster.inputs`` order); the subgraph comes
  from ``ir/subgraph.py``, the builder validation uses too.
- ``capture_values(analysis, *model_inputs)``: every graph value of one eager
  run of the whole model, by node name (real params, buffers, sliced masks).
- ``cluster_inputs(analysis, cluster, values, generator)``: inputs for one
  check: fresh random floats (never zeros, same shape, strides and dtype) for
  activations; params, buffers (and views of them), masks and integer tensors as captured.
- ``graph_on(gm, device)``: a copy of a captured graph that runs on `device`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from ..analysis.types import Cluster
from ..ir.graph import OpKind
from ..ir.subgraph import eager_subgraph

if TYPE_CHECKING:
    from ..pipeline import Analysis


def eager_cluster(analysis: Analysis, cluster: Cluster) -> Callable[..., tuple[torch.Tensor, ...]]:
    sub = eager_subgraph(analysis.graph_module, cluster)
    if sub.extras:
        raise ValueError(f"cluster reads `{sub.extras[0]}`, which is neither a cluster input, "
                         "nor computable from its values, nor a trace-time constant")
    module = sub.module

    def run(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.no_grad():
            out = module(*inputs)
        return out if isinstance(out, tuple) else (out,)

    return run


class _Recorder(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.values: dict[str, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        self.values[n.name] = out
        return out


def capture_values(analysis: Analysis, *model_inputs: torch.Tensor) -> dict[str, Any]:
    rec = _Recorder(analysis.graph_module)
    with torch.no_grad():
        rec.run(*model_inputs)
    return rec.values


def expanded_base(t: torch.Tensor) -> torch.Tensor:
    """`t` cut to one element along its expanded (stride-0) dims: the memory it really has.
    A tensor whose elements share memory cannot be written elementwise; its base can, and
    `base.expand(t.shape)` is `t` again."""
    for k, s in enumerate(t.stride()):
        if s == 0:
            t = t.narrow(k, 0, min(1, t.shape[k]))
    return t


def random_like(t: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Same shape, strides and dtype; uniform in ±[0.5, 2] so no element is (near) zero.
    An expanded dim (stride 0) gets one random value, expanded again."""
    shape = expanded_base(t).shape
    base = torch.empty_strided(shape, t.stride(), dtype=t.dtype, device=t.device)
    mag = torch.rand(shape, generator=generator, device=t.device) * 1.5 + 0.5
    sign = torch.randint(0, 2, shape, generator=generator, device=t.device) * 2 - 1
    base.copy_(mag * sign)
    return base.expand(t.shape)


def cluster_inputs(analysis: Analysis, cluster: Cluster, values: Mapping[str, Any],
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    out = []
    for name in cluster.inputs:
        t = values[name]
        # A Python number of sizes alone (`math.sqrt(c)`) keeps its value: sizes fix it.
        fresh = (isinstance(t, torch.Tensor) and t.is_floating_point()
                 and not _is_constant(analysis, name))
        out.append(random_like(t, generator) if fresh else t)
    return tuple(out)


def _is_constant(analysis: Analysis, name: str) -> bool:
    """A parameter or buffer, or a view of one (BatchNorm's statistics reshaped to
    (C, 1, 1) by ir/channels.py): random values there would be unrealistic (a negative
    running variance)."""
    node = analysis.graph[name]
    if node.kind is OpKind.VIEW:
        return bool(node.refs) and all(_is_constant(analysis, r) for r in node.refs)
    return node.kind is OpKind.CONSTANT


def graph_on(gm: fx.GraphModule, device: str | torch.device) -> fx.GraphModule:
    """A copy of `gm` with its parameters and buffers on `device`, and every tensor the graph
    creates or reads there too: torch.export records factory calls (`arange`, `ones`, `to`)
    with the capture device as a constant argument, and keeps tensor constants it lifted
    (`torch.tensor(...)` in a forward, a mask) as plain attributes; `Module.to` moves
    neither."""
    device = torch.device(device)
    moved = copy.deepcopy(gm).to(device)
    # Export puts the body of an enabled `with torch.autocast(...)` block in a nested
    # GraphModule called through a higher-order op (ir/inline_blocks.py inlines the blocks
    # that change no value): walk those too.
    for module in moved.modules():
        if isinstance(module, fx.GraphModule):
            _constants_on(module, device)
            _device_arguments_on(module, device)
    return moved


def _device_arguments_on(gm: fx.GraphModule, device: torch.device) -> None:
    changed = False
    for node in gm.graph.nodes:
        args = tuple(device if _other_device(a, device) else a for a in node.args)
        kwargs = {k: device if _other_device(v, device) else v for k, v in node.kwargs.items()}
        if args != node.args or kwargs != node.kwargs:
            node.args, node.kwargs = args, kwargs
            changed = True
    if changed:
        gm.recompile()


def _other_device(value: object, device: torch.device) -> bool:
    return isinstance(value, torch.device) and value != device


def _constants_on(gm: fx.GraphModule, device: torch.device) -> None:
    """Move every tensor a `get_attr` reads that is not a parameter or buffer."""
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        *path, name = str(node.target).split(".")
        owner = gm.get_submodule(".".join(path)) if path else gm
        value = getattr(owner, name, None)
        if isinstance(value, torch.Tensor) and value.device != device:
            setattr(owner, name, value.to(device))
