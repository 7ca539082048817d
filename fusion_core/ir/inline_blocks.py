"""Inline the grad-mode and disabled-autocast blocks torch.export wraps in one opaque call.

Reads an exported ``fx.GraphModule``; rewrites it in place. Export records the body of a
``with torch.no_grad():`` (or ``set_grad_enabled``, a ``@torch.no_grad()`` forward) or a
``with torch.autocast(..., enabled=False):`` block as one ``call_function`` of a
higher-order op (``wrap_with_set_grad_enabled(False, body, *operands)``,
``wrap_with_autocast(device_type, dtype, enabled, cache_enabled, body, *operands)``) whose
body is a nested ``GraphModule`` attribute, and reads its results through
``operator.getitem``. Every op inside was invisible to detection, while Inductor inlines
them and fuses them (Hugging Face's rotary embedding: its casts, ``cos``, ``sin``, ``mul``).

A block is inlined when it changes no value of an inference run: a grad-mode block
always, an autocast block only when it is disabled (with no autocast active around it, a
disabled one changes nothing; an enabled one changes dtypes at dispatch and stays). The
body's nodes are copied in front of the call with their metadata (``val``,
``stack_trace``, ``nn_module_stack``): placeholders become the call's operands, the
body's ``get_attr`` targets are re-registered on the parent under fresh names, and each
``getitem`` user reads the copied result. A block inside an inlined block is inlined in
turn; one inside a block that stays is left as it was. The body's attribute is deleted
once no ``get_attr`` reads it. A call this pass cannot read (keyword operands, a user
other than ``getitem``, a result that is not a graph value) stays as it was.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable

import torch
import torch.fx as fx
import torch.nn as nn

from .graph import FusionGraph, Node, SourceLoc


def _always(args: tuple) -> bool:
    return True


def _autocast_disabled(args: tuple) -> bool:
    return len(args) > 2 and args[2] is False  # (device_type, dtype, enabled, ...)


def _hop(name: str) -> object | None:
    try:
        return getattr(torch.ops.higher_order, name)
    except AttributeError:  # a torch without this op: nothing of its kind to inline
        return None


# Higher-order op -> (position of its body among the call's arguments,
#                    whether inlining the call keeps every value it computes).
BLOCKS: dict[object, tuple[int, Callable[[tuple], bool]]] = {
    op: spec for op, spec in (
        (_hop("wrap_with_set_grad_enabled"), (1, _always)),
        (_hop("wrap_with_autocast"), (4, _autocast_disabled)),
    ) if op is not None}


def inline_blocks(gm: fx.GraphModule) -> list[str]:
    """Inline every block that changes no value; returns the inlined calls' names."""
    inlined = []
    todo = [n for n in gm.graph.nodes if _is_block(n)]
    while todo:
        call = todo.pop(0)
        name = call.name
        copies = _inline(gm, call)
        if copies is None:
            continue
        inlined.append(name)
        todo += [c for c in copies if _is_block(c)]
    if inlined:
        gm.recompile()
    return inlined


def _is_block(node: fx.Node) -> bool:
    if node.op != "call_function" or node.target not in BLOCKS:
        return False
    at, keeps_values = BLOCKS[node.target]
    return len(node.args) > at and keeps_values(node.args)


def _body(gm: fx.GraphModule, call: fx.Node) -> tuple[fx.Node, fx.GraphModule] | None:
    """The call's body (its get_attr node and graph module), when the call can be inlined."""
    at, _ = BLOCKS[call.target]
    ref = call.args[at]
    if call.kwargs or not isinstance(ref, fx.Node) or ref.op != "get_attr":
        return None
    body = _attribute(gm, str(ref.target))
    if not isinstance(body, fx.GraphModule):
        return None
    if len(_placeholders(body)) != len(call.args) - at - 1:
        return None
    if any(n.op == "get_attr" and _attribute(body, str(n.target)) is None
           for n in body.graph.nodes):
        return None
    # What each result becomes in the parent: a body value, or an operand passed through.
    operands = dict(zip(_placeholders(body), call.args[at + 1:], strict=True))
    results = [operands.get(r, r) for r in _results(body)]
    for user in call.users:
        index = user.args[1] if user.target is operator.getitem and len(user.args) == 2 else None
        if not isinstance(index, int) or not -len(results) <= index < len(results) \
                or not isinstance(results[index], fx.Node):
            return None
    return ref, body


def _placeholders(body: fx.GraphModule) -> list[fx.Node]:
    return [n for n in body.graph.nodes if n.op == "placeholder"]


def _results(body: fx.GraphModule) -> tuple:
    out = body.graph.output_node().args[0]
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _inline(gm: fx.GraphModule, call: fx.Node) -> list[fx.Node] | None:
    """Copy the body in front of `call` and route its readers there; returns the copies,
    or None (nothing changed) when the call cannot be inlined."""
    found = _body(gm, call)
    if found is None:
        return None
    ref, body = found
    at, _ = BLOCKS[call.target]
    graph = gm.graph
    env: dict[fx.Node, object] = dict(zip(_placeholders(body), call.args[at + 1:], strict=True))
    rehomed: dict[str, str] = {}
    copies = []
    with graph.inserting_before(call):
        for node in body.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op == "get_attr":
                target = str(node.target)
                if target not in rehomed:
                    rehomed[target] = _rehome(gm, body, target, str(ref.target))
                new = graph.get_attr(rehomed[target])
                new.meta = copy.copy(node.meta)
            else:
                new = graph.node_copy(node, lambda n: env[n])
            env[node] = new
            copies.append(new)
    results = _results(body)
    for user in list(call.users):
        user.replace_all_uses_with(env[results[user.args[1]]])
        graph.erase_node(user)
    graph.erase_node(call)
    if not ref.users:
        graph.erase_node(ref)
    if not _referenced(graph, str(ref.target)):
        _delete(gm, str(ref.target))
    return copies


def _attribute(owner: nn.Module, target: str) -> object | None:
    value: object = owner
    for part in target.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def _rehome(gm: fx.GraphModule, body: fx.GraphModule, target: str, body_name: str) -> str:
    """Register what `body.<target>` holds on `gm` under a fresh name; returns the name."""
    *path, leaf = target.split(".")
    owner = body.get_submodule(".".join(path)) if path else body
    value = getattr(owner, leaf)
    base = f"{body_name}_{target}".replace(".", "_")
    name, k = base, 0
    while hasattr(gm, name):
        k += 1
        name = f"{base}_{k}"
    if isinstance(value, nn.Module):
        gm.add_submodule(name, value)
    elif isinstance(value, nn.Parameter):
        gm.register_parameter(name, value)
    elif leaf in owner._buffers:
        gm.register_buffer(name, value, persistent=leaf not in owner._non_persistent_buffers_set)
    else:  # a tensor constant export lifted: a plain attribute, as on the parent
        setattr(gm, name, value)
    return name


def _referenced(graph: fx.Graph, target: str) -> bool:
    return any(n.op in ("get_attr", "call_module")
               and (str(n.target) == target or str(n.target).startswith(target + "."))
               for n in graph.nodes)


def _delete(gm: fx.GraphModule, target: str) -> None:
    *path, leaf = target.split(".")
    owner = gm.get_submodule(".".join(path)) if path else gm
    if hasattr(owner, leaf):
        delattr(owner, leaf)


def block_source(n: fx.Node, parse: Callable[[str | None], SourceLoc | None]
                 ) -> SourceLoc | None:
    """Where a block that stays one call starts: export records no frame for the call
    itself, its body's first op has the user's line."""
    spec = BLOCKS.get(n.target) if n.op == "call_function" else None
    if spec is None or len(n.args) <= spec[0]:
        return None
    body = n.args[spec[0]]
    owner = n.graph.owning_module
    sub = getattr(owner, str(body.target), None) if isinstance(body, fx.Node) else None
    for m in sub.graph.nodes if isinstance(sub, fx.GraphModule) else ():
        if (loc := parse(m.meta.get("stack_trace"))) is not None:
            return loc
    return None


def kept_blocks(graph: FusionGraph) -> list[Node]:
    """The enabled autocast blocks left as one call each, in graph order."""
    return [n for n in graph.nodes if n.target == "wrap_with_autocast"]


def describe_kept(graph: FusionGraph, path: Callable[[str], str] = str) -> str | None:
    """One line for the report on an enabled autocast block left as one call: the ops
    inside are analysed by nobody, so say where it is and why; None when there is none."""
    kept = kept_blocks(graph)
    if not kept:
        return None
    loc = kept[0].source
    where = f" at {path(loc.file)}:{loc.line} (`{loc.code}`)" if loc else ""
    more = f" (and {len(kept) - 1} more)" if len(kept) > 1 else ""
    return (f"Left unfused: the enabled `torch.autocast` block{where}{more}: torch.export keeps "
            "it as one call, since autocast picks its ops' dtypes as they run, so nothing "
            "inside is analysed; to analyse those ops, run the model in the autocast dtype "
            "(`model.to(torch.bfloat16)`, `--dtype bfloat16`) without the block")
