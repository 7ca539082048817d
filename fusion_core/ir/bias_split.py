"""What the two bias passes (``linear_bias.py``, ``conv_bias.py``) share: putting a
bias-free call and an ``add`` of the bias in the place of the biased call.

Writes the metadata later passes read: the bias-free call keeps the user's layer name
(``meta["fusion_module"]``) and the add is marked ``meta[SPLIT_BIAS]``, because Inductor
has no node for it either: its lowering adds the bias on the GEMM or convolution node's
behalf (``inductor/match.py`` and ``explain.py`` read the mark).
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn as nn

from ..names import module_written

SPLIT_BIAS = "fusion_split_bias"


def put_in_place(n: fx.Node, call: fx.Node, added: fx.Node, module: nn.Module | None) -> None:
    """`call` (bias-free) and `added` (its bias add) replace `n`, with `n`'s metadata."""
    call.meta.update(n.meta)
    if module is not None:
        call.meta["fusion_module"] = (str(n.target), type(module).__name__)
    added.meta.update(n.meta)
    added.meta[SPLIT_BIAS] = True
    n.replace_all_uses_with(added)
    n.graph.erase_node(n)


def hooked(module: nn.Module) -> str | None:
    """The first kind of hook registered on `module` ("forward hook"), or None. Calling the
    module runs them; the bias-free function in a layer's place would not (a hook that records
    activations, the old `weight_norm`'s pre-hook recomputing `weight`), nor a Sequential's
    layers called one by one (``sourcemap/sequential.py``): such a call stays."""
    return next((kind.replace("_", " ").replace("pre ", "pre-") for kind in (
        "forward_pre_hook", "forward_hook", "backward_pre_hook", "backward_hook")
        if getattr(module, f"_{kind}s", None)), None)


def get_attr(graph: fx.Graph, target: str, value: torch.Tensor) -> fx.Node:
    """A get_attr node for a module's parameter, with the metadata the shape pass gives."""
    node = graph.get_attr(target)
    node.meta["val"] = value.detach()
    return node


def split_biases(gm: fx.GraphModule) -> dict[str, str]:
    """The bias adds the passes made, by node name -> the layer they came from (`self.fc`):
    nodes the user never wrote, named in messages after what they did write."""
    out = {}
    for n in gm.graph.nodes:
        if n.meta.get(SPLIT_BIAS):
            call = next((a for a in n.all_input_nodes if "fusion_module" in a.meta), None)
            out[n.name] = module_written(call.meta["fusion_module"][0]) if call else "a layer"
    return out
