"""Drop shape checks (``torch._assert(h.dim() == 3)``, ``torch._check``) from a traced graph.

Reads a shape-propagated ``fx.GraphModule`` (FX frontend; export evaluates such checks
while tracing); rewrites it in place. A check reads a tensor only for its metadata,
which the example shapes already fixed, yet as a graph node it is a reader of that
tensor: the value looked stored for an outside user, its cluster became multi-output
and the patched model could not place the kernel. The checks go, then every metadata
read (``h.dim()``, ``h.shape``, the comparison) that nothing reads any more.
"""

from __future__ import annotations

import torch
import torch.fx as fx

# Functions that check a condition and return nothing.
CHECKS = tuple(f for f in (getattr(torch, name, None) for name in (
    "_assert", "_check", "_check_is_size", "_check_with", "_check_index", "_check_value",
    "_check_type", "_check_not_implemented", "_assert_async")) if f is not None)


def _is_metadata(node: fx.Node) -> bool:
    """A call whose value is a Python value (int, bool, size), not a tensor."""
    if node.op not in ("call_function", "call_method"):
        return False
    val = node.meta.get("val")
    return not isinstance(val, torch.Tensor) and not (
        isinstance(val, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in val))


def drop_shape_checks(gm: fx.GraphModule) -> list[str]:
    """Erase shape checks and the metadata reads only they used; returns the erased names."""
    checks = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in CHECKS]
    erased = []
    todo = list(checks)
    while todo:
        node = todo.pop()
        if node.users or node.graph is None:
            continue
        feeders = [a for a in node.all_input_nodes if _is_metadata(a)]
        erased.append(node.name)
        gm.graph.erase_node(node)
        todo += [f for f in feeders if not f.users]
    # Metadata reads nobody uses (`h.shape` formatted into a message) read the tensor too;
    # a call that returned None may have had an effect, so it stays.
    for node in reversed(list(gm.graph.nodes)):
        if _is_metadata(node) and not node.users and node.meta.get("val") is not None:
            erased.append(node.name)
            gm.graph.erase_node(node)
    if erased:
        gm.recompile()
    return erased
