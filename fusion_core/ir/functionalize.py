"""Functionalize in-place ops whose overwritten value nobody reads again.

Reads a shape-propagated ``fx.GraphModule`` from either frontend; rewrites it in
place. ``nn.ReLU(inplace=True)`` after a BatchNorm, ``x.mul_(2).relu_()``, in-place
SiLU or Hardswish, and ``y += x`` under export (``aten.add_``, whose later readers
export already points at the result) overwrite a fresh intermediate that no later
op reads under its old name: computing a new tensor instead gives the same model
outputs and lets the op fuse. Each rewritten node keeps its result's metadata and
records the spelling it replaced in ``meta["fusion_inplace"]`` (for messages and
source mapping).

An in-place op stays as it is (normalized to ``OpKind.INPLACE``; the legality checks
reject a group holding it, or one it mutates between, by name) when it writes a model
input, a parameter/buffer or a view (another tensor shares the memory), when a later
op still reads the mutated value by its old name (FX records ``y.relu_(); z * y`` as
``z * y`` reading ``y``: the hazard of issue 16.5), or when the out-of-place op would
promote the dtype.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from .targets import lookup

aten = torch.ops.aten
# Layers that return a view of their input (FX keeps them as one call).
_VIEW_MODULES = (torch.nn.Flatten, torch.nn.Unflatten, torch.nn.Identity)


def out_of_place_overload(target: Any) -> torch._ops.OpOverload | None:
    """`aten.add_.Tensor` -> `aten.add.Tensor` when the registry knows the latter."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    packet = target._schema.name.split("::")[-1]
    if not packet.endswith("_") or packet.endswith("__"):
        return None
    base = getattr(aten, packet[:-1], None)
    functional = getattr(base, target._overloadname, None) if base is not None else None
    return functional if isinstance(lookup(functional), tuple) else None


def _inplace_kwarg_index(node: fx.Node) -> tuple[int, bool] | None:
    """(position of `inplace` in the call's signature, its value), for F.* calls."""
    found = lookup(node.target)
    if not isinstance(found, tuple):
        return None
    spec, sig = found
    if "inplace" not in sig.parameters:
        return None
    try:
        bound = sig.bind(*node.args, **node.kwargs)
    except TypeError:
        return None
    return list(sig.parameters).index("inplace"), bound.arguments.get("inplace") is True


def inplace_spelling(node: fx.Node) -> str | None:
    """How the node spells an in-place op we can rewrite (`.relu_()`, `F.relu(inplace=True)`,
    `aten.add_.Tensor`), or None when it is not one."""
    if node.op == "call_method":
        name = str(node.target)
        if name.endswith("_") and not name.endswith("__") and isinstance(
                lookup(("method", name[:-1])), tuple):
            return f".{name}()"
        return None
    if node.op != "call_function":
        return None
    if out_of_place_overload(node.target) is not None:
        return str(node.target)
    found = _inplace_kwarg_index(node)
    if found is not None and found[1]:
        return f"{getattr(node.target, '__name__', node.target)}(inplace=True)"
    return None


# Ops returning a tuple of new tensors (values and indices, or two statistics): one of
# their results is no view, as a chunk or split's are.
_FRESH_TUPLES = frozenset({"topk", "sort", "max", "min", "kthvalue", "median", "nanmedian",
                           "mode", "var_mean", "std_mean", "aminmax", "cummax", "cummin"})


def _fresh_result(node: fx.Node) -> bool:
    """`torch.topk(x, k)[0]`: one result of an op that returns new tensors. Rewriting
    `weights /= weights.sum(-1, keepdim=True)` on it (Mixtral's router under torch.export)
    changes no other value."""
    src = node.args[0] if node.target is operator.getitem and node.args else None
    if not isinstance(src, fx.Node) or not isinstance(src.meta.get("val"), (tuple, list)):
        return False
    schema = getattr(src.target, "_schema", None)
    if src.op == "call_function" and schema is not None:
        return all(r.alias_info is None for r in schema.returns)
    if src.op == "call_method":
        return src.target in _FRESH_TUPLES
    name = getattr(src.target, "__name__", "")
    return (src.op == "call_function" and name in _FRESH_TUPLES
            and getattr(torch, name, None) is src.target)


def _is_alias(node: fx.Node) -> bool:
    """The node's value shares memory with another value (a view, or an op returning one)."""
    if node.op in ("placeholder", "get_attr"):
        return True
    if _fresh_result(node):
        return False
    if node.op == "call_module":
        owner = node.graph.owning_module
        module = owner.get_submodule(str(node.target)) if owner is not None else None
        return isinstance(module, _VIEW_MODULES)
    key = ("method", node.target) if node.op == "call_method" else node.target
    if lookup(key) == "view":
        return True
    schema = getattr(node.target, "_schema", None)
    returns = schema.returns if schema is not None else ()
    return bool(returns) and returns[0].alias_info is not None


def _hazard(node: fx.Node, position: dict[fx.Node, int]) -> str | None:
    """Why rewriting `node` could change the model's results, or None when it cannot."""
    base = node.args[0] if node.args else None
    if not isinstance(base, fx.Node):
        return "no tensor to write"
    if _is_alias(base) or any(_is_alias(u) and u is not node and u.args and u.args[0] is base
                              for u in base.users):
        return "it writes a model input, a parameter or a view"
    if any(position[u] > position[node] for u in base.users if u is not node):
        return "a later op reads the mutated value by its old name"
    want = getattr(base.meta.get("val"), "dtype", None)
    others = [a.meta.get("val") for a in (*node.args[1:], *node.kwargs.values())
              if isinstance(a, fx.Node)]
    if any(getattr(v, "dtype", want) != want for v in others):
        return "the out-of-place op would change the dtype"
    return None


def _rewrite(node: fx.Node) -> None:
    if node.op == "call_method":
        node.target = str(node.target)[:-1]
        return
    functional = out_of_place_overload(node.target)
    if functional is not None:
        node.target = functional
        return
    index, _ = _inplace_kwarg_index(node)
    if index < len(node.args):
        node.args = (*node.args[:index], False, *node.args[index + 1:])
    else:
        node.kwargs = {**node.kwargs, "inplace": False}


def functionalize(gm: fx.GraphModule) -> list[str]:
    """Rewrite every safe in-place op out of place; returns the rewritten nodes' names."""
    position = {n: i for i, n in enumerate(gm.graph.nodes)}
    done = []
    for node in gm.graph.nodes:
        spelling = inplace_spelling(node)
        if spelling is None or _hazard(node, position) is not None:
            continue
        _rewrite(node)
        node.meta["fusion_inplace"] = spelling
        done.append(node.name)
    if done:
        gm.recompile()
    return done

