"""What else a source range computes: the check that its lines hold the clusters alone.

Reads an ``Analysis`` (every graph node's line, the FX graph's module paths and the bias
passes' marks) and a mapped range (``span.Span``); writes nothing. Raises ``PointerOnly``
naming, in the source's own text, the first code on those lines that no cluster of the
edit computes and the rewrite does not keep.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Mapping
from pathlib import Path

import torch.nn as nn

from ..analysis.types import Cluster
from ..ir.bias_split import SPLIT_BIAS, hooked
from ..ir.graph import Node, OpKind
from ..pipeline import Analysis
from .callsite import site_line
from .frames import Frames
from .guard import holds
from .parts import feeding
from .pyexpr import BINOPS, attr_chain, module_path
from .pysource import Scope, SourceFile
from .selected import OtherCall, instance_of
from .served import call_of
from .span import PointerOnly, Span
from .two_calls import chain_site


def _describe(src: SourceFile, scope: Scope, node: Node, module_path: str, line: int) -> str:
    """The source text of what `node` computes, found on `line` (`self.proj1(x)`)."""
    # A call is named by its function (`F.relu`, `.view()`) or, for a module the tracer
    # inlined, by the attribute the source calls (`self.ln1` made the `F.layer_norm`);
    # an operator by its `operator` name (`x + 1` is `add`).
    wanted = {node.target.rsplit(".", 1)[-1].strip("()"), module_path.rsplit(".", 1)[-1]}
    # An op of a helper the line calls (`cat` in `rotate_half(q)`) is named by that call.
    callee = _callee_at(node, src, line)
    if callee is not None and callee != "forward":
        wanted = {callee}
    found = []
    for n in ast.walk(scope.node):
        if not (isinstance(n, (ast.Call, ast.BinOp))
                and n.lineno <= line <= (n.end_lineno or n.lineno)):
            continue
        if isinstance(n, ast.BinOp):
            name = getattr(BINOPS.get(type(n.op)), "__name__", None)
        else:
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        if name in wanted:
            found.append(src.segment(n))
    return min(found, key=len) if found else src.line_text(line).strip()


def _callee_at(node: Node, src: SourceFile, line: int) -> str | None:
    """The function `node` ran in that `line` (of `src`) called, when it ran in a call
    made there rather than on the line itself."""
    chain = node.source.chain if node.source is not None else ()
    for outer, inner in zip(reversed(chain[:-1]), reversed(chain[1:]), strict=True):
        if outer.file == src.path and outer.line == line:
            return inner.function
    return None


def _is_feeder(node: Node) -> bool:
    """Values an input expression re-evaluates for free (buffers, slices, sizes)."""
    return node.kind in (OpKind.CONSTANT, OpKind.VIEW, OpKind.INPUT) or node.op == "meta"


def check_alone(analysis: Analysis, span: Span, group: list[Cluster], frames: Frames,
                 kept: frozenset[str] = frozenset(), kept_around: set[str] | None = None,
                 unserved: Mapping[int, str] | None = None, other_calls: bool = True,
                 as_written: frozenset[int] = frozenset()) -> None:
    """No node outside the group's clusters is computed on the range's lines, but those
    of the inputs the rewrite keeps as its arguments' expressions and the code kept
    around the fused call (`kept_around`). `unserved`: why the edit's kernel cannot compute
    another call's ops of a cluster (by its index) on these lines (served.py). Without
    `other_calls`, another call's ops on the lines are not looked at (before the parts are
    tried, they are no cause). `as_written`: the instances (by id) whose calls the edit
    leaves to the lines as written (selected.py), whose ops are not looked at. Raises
    ``OtherCall`` when another call runs ops there that the edit does not compute."""
    members = {n for c in group for n in c.nodes}
    kept_nodes = feeding(analysis, kept) | (kept_around or set())
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    # A node stands at its own line, or at the line of this function that called the
    # module or helper it ran in (callsite.py).
    ops_by_line = {(site_line(analysis.graph[n].source, span.src, span.scope),
                    analysis.graph[n].op) for n in members}
    calls = {call_of(analysis.graph[n], span, fx_nodes) for n in members}  # the edit's own
    for n in analysis.graph.nodes:
        # A copy of a member is another kernel recomputing it (never edited: span.py); the
        # source computes it once, here.
        if n.name in members or n.copy_of in members or n.name in kept_nodes or _is_feeder(n):
            continue
        line = site_line(n.source, span.src, span.scope)
        if line is None or not span.start <= line <= span.end:
            continue
        if as_written and id(instance_of(analysis, span, fx_nodes.get(n.name))) in as_written:
            continue  # a call the edit's condition sends to the lines as written
        if span.guard is not None and n.name in fx_nodes and (
                # the `if` body's rest (the range ends at the `if`'s end), kept as written
                (not span.guard.tail and line > span.stmts[-1].end)
                or not holds(span.guard, span.scope, analysis.module, fx_nodes[n.name])):
            continue  # a call where the condition fails runs the lines as written (`else`)
        path = module_path(fx_nodes[n.name]) if n.name in fx_nodes else None
        text = _describe(span.src, span.scope, n, path or "", line)
        fx_node = fx_nodes.get(n.name)
        if fx_node is not None and any(u.meta.get(SPLIT_BIAS) and u.name in members
                                       for u in fx_node.users):
            # The bias passes (ir/conv_bias.py: every conv on a GPU target) moved the layer's
            # bias into a kernel; the call in the source adds it too, and stays.
            raise PointerOnly(f"a kernel of these lines adds the bias of `{text}` (line "
                              f"{line}), which the analysis split off the layer (as Inductor "
                              "does on the GPU); the call in the source adds it itself, so no "
                              "edit of these lines computes the same"
                              + _bias_apart(analysis, span.src, text, path))
        # Another call when it came through other frames or on another module; one line
        # calling a helper twice (`act(h) + act(2 * h)`) looks like one call, said as code.
        if (line, n.op) in ops_by_line and call_of(n, span, fx_nodes) not in calls:
            if not other_calls:
                continue
            raise OtherCall(_other_call(analysis, span, frames, n, line, text, unserved or {}),
                            unfused=not any(n.name in c.nodes for c in analysis.clusters))
        inner = _library_container(analysis, span, path, line, sorted(
            {p for m in members if m in fx_nodes and (p := module_path(fx_nodes[m]))}))
        if inner is not None:
            raise PointerOnly(inner)
        raise PointerOnly(f"line range also holds `{text}` (line {line}), which is not in "
                       "the cluster")


def _bias_apart(analysis: Analysis, src: SourceFile, text: str, path: str | None) -> str:
    """The spelling whose add the kernel's is, for an `nn.Linear` called on one argument:
    its product and its bias apart (`F.linear(x, self.fc1.weight) + self.fc1.bias`)."""
    try:
        call = ast.parse(text, mode="eval").body
        layer = analysis.module.get_submodule(path or "")
    except (SyntaxError, AttributeError):
        return ""
    if not (isinstance(layer, nn.Linear) and layer.bias is not None and isinstance(
            call, ast.Call) and len(call.args) == 1 and not call.keywords):
        return ""
    # The module as the file names it: `F`, `nn.functional`, or in full.
    f = next((name for name, imported in (("F", r"torch\.nn\.functional as F"),
                                          ("nn.functional", r"torch\.nn as nn"))
              if re.search(rf"^import {imported}\s*$", src.text, re.M)), "torch.nn.functional")
    func, arg = ast.unparse(call.func), ast.unparse(call.args[0])
    return (f"; to apply it, add the bias in your code: `{f}.linear({arg}, {func}.weight) + "
            f"{func}.bias`")


def _other_call(analysis: Analysis, span: Span, frames: Frames, node: Node, line: int,
                text: str, unserved: Mapping[int, str]) -> str:
    """Line `line` of the range runs `node` in a call whose ops do not form the cluster (a
    UNet block's first norm, fused in the next block with the previous residual add)."""
    chain = frames.chain(node.source)  # the call your code makes, not a wrapper's line
    at = max((i for i, f in enumerate(chain) if (f.file, f.line) == (span.src.path, line)),
             default=0)
    site = f" {chain_site(chain, at)}" if at else ""
    holder = next((c for c in analysis.clusters if node.name in c.nodes), None)
    there = (f"where it is part of cluster {holder.index} ({' → '.join(holder.ops)})"
             if holder is not None else "where it runs unfused")
    why = unserved.get(holder.index) if holder is not None else None
    tail = (f"this kernel cannot compute that call's ops there: {why}" if why is not None
            else "serving that call with this kernel is not supported yet")
    return (f"line {line} (`{text}`) also runs in another call of `{span.scope}`{site}, "
            f"{there}, not of this one: an edit of the line changes every call, and {tail}")


def _spelled(call: str, rest: list[str]) -> str:
    """`self.block` and ["0", "0"] as `self.block[0][0]`, as the user indexes a Sequential."""
    return call + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in rest)


def _library_container(analysis: Analysis, span: Span, path: str | None, line: int,
                       fused: list[str]) -> str | None:
    """Why no edit of `line` fuses the layers a container called there (`self.block(x)`, an
    `nn.Sequential`) runs, when the stray op at module `path` is another of its layers:
    the container's forward, which runs them all, is not code of this file. `fused`: the
    module paths of the cluster's ops."""
    if not path:
        return None
    self_name = span.scope.receiver or "self"
    segments = path.split(".")
    for n in ast.walk(span.scope.node):
        if not (isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)):
            continue
        chain = attr_chain(n.func)
        if len(chain) < 2 or chain[0] != self_name:
            continue
        size = len(chain) - 1
        at = next((i for i in range(len(segments) - size)
                   if segments[i:i + size] == chain[1:]), None)
        if at is None:
            continue
        try:
            container = analysis.module.get_submodule(".".join(segments[:at + size]))
            layer = analysis.module.get_submodule(path)
        except AttributeError:
            return None
        forward = type(container).forward
        kind = hooked(container) if isinstance(container, nn.Sequential) else None
        if kind is not None:
            return (f"line {line} calls `{span.src.segment(n)}`, a `{type(container).__name__}` "
                    f"with {kind}s registered, which would not run if an "
                    "edit called its layers one by one. To apply, register the hooks on its "
                    "layers instead")
        if Path(inspect.getsourcefile(forward) or "") == Path(span.src.path):
            return None  # its forward is in this file: the cluster's own lines are there
        call, head = ".".join(chain), ".".join(segments[:at + size]) + "."
        mine = [f.removeprefix(head).split(".") for f in fused if f.startswith(head)]
        if not mine:
            return None
        owner = mine[0][:-1]  # the module holding the cluster's first layer
        holder = analysis.module.get_submodule(head + ".".join(owner)) if owner else container
        return (f"line {line} calls `{span.src.segment(n)}`, a `{type(container).__name__}` "
                f"whose forward (`{forward.__qualname__}`, not in this file) runs the "
                f"cluster's layers ({', '.join(f'`{_spelled(call, m)}`' for m in mine[:4])}"
                f"{', …' if len(mine) > 4 else ''}) and "
                f"also `{_spelled(call, segments[at + size:])}` ({type(layer).__name__}), "
                f"which the cluster does not fuse: an edit of line {line} would drop it. To "
                f"apply, make `{_spelled(call, owner)}` (`{type(holder).__name__}`) a module of "
                "your file whose forward calls its layers one per line")
    return None
