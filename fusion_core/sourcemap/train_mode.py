"""Edits of ops that compute otherwise in train mode: the fused call runs in eval mode only.

The analysis runs the model in eval mode, so a kernel computes BatchNorm from its running
statistics and leaves dropout out (the ops whose ``registry.OpSpec.training`` is set). A model
put back in train mode under ``torch.no_grad()`` (BatchNorm statistics refreshed, a dropout
ensemble) would silently get the eval-mode values from the fused call. Each edit holding such
an op therefore reads the `training` flag of every module that decides it, and runs the lines
as written when one is set:

    if not self.bn.training:
        return cluster0(y, ...)
    else:
        y = torch.relu(self.bn(y))
        return self.drop(y) * 2

A layer called as a module (`self.bn(y)`) is decided by its own flag; an op the function
calls itself (`F.dropout(h, self.p, self.training)`) by its receiver's; a drop-path layer the
trace left out (the identity in eval mode) and the edit reads through, by its own flag. The
calls of shared lines read every call's flags where each call's module has those layers, else
the receiver's flag with the ones all share. In a plain function, with no module to read, the
value traced stands (a parameter the kernel would hold is refused by ``baked_params.py``).
Edits that must be written together (``SourceMapping.needs``) take one condition, so that none
of them reads a value another one's fused call dropped.

Reads the ``Analysis`` (each node's module, the FX graph's module stacks) and the exact
mappings with their files; writes the mappings with their replacements guarded, or pointers
where no guard can be written.
"""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import replace

import torch.fx as fx
import torch.nn as nn

from ..ir.normalize import module_path
from ..ir.registry import SPECS
from ..pipeline import Analysis
from .pyexpr import module_chain
from .pysource import Scope, SourceFile
from .source_mapping import POINTER, SourceMapping
from .unify_calls import _DROP_PATHS, _library_class

_NO_SCOPE = object()  # a mapping whose function is not found: no flag can be read there


def _spelled(receiver: str, relative: str) -> str:
    """`self` and "blocks.0.bn" as `self.blocks[0].bn`, as the user indexes a container."""
    out = receiver
    for part in relative.split(".") if relative else ():
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


def _flags(analysis: Analysis, m: SourceMapping, scope: Scope) -> set[str] | None:
    """The `training` flags deciding the edit's train-mode ops, spelled in `scope`; None when
    an op's module cannot be reached from the function's receiver. The clusters of one call
    (several kernels of one statement) pool their flags; calls on blocks built otherwise (a
    layer more in one stage, ``from_end.py``) may find those ops on other layers: then the
    receiver's flag decides, with the layers' flags all calls share."""
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    groups = [analysis.clusters[i].nodes for i in (m.cluster_index, *m.shared_with)]
    groups += [s.part.nodes for s in m.serves]
    by_call: dict[str | None, set[str]] = {}
    for names in groups:
        at = _instance(analysis, fx_nodes.get(names[0]), scope) if scope.receiver else None
        found = _call_flags(analysis, fx_nodes, names, scope, at)
        if found is None:
            return None
        by_call.setdefault(at, set()).update(found)
        if at is not None and m.original is not None:
            by_call[at].update(_read_through(analysis, m.original, scope, at))
    sets = list(by_call.values())
    every = set().union(*sets)
    if all(f == sets[0] for f in sets) or all(
            at is not None and _resolves(analysis.module, at, flag, scope.receiver)
            for at in by_call for flag in every):
        return every  # a flag of another call's layer is read where this call has it too
    return set.intersection(*sets) | {f"{scope.receiver}.training"}


def _resolves(model: nn.Module, at: str, flag: str, receiver: str | None) -> bool:
    """Whether `flag` (`self.block[1][1].training`) names a module's flag on the module at
    path `at`: the attributes and constant indices it reads all exist there."""
    try:
        expr: ast.expr = ast.parse(flag, mode="eval").body
        owner = model.get_submodule(at)
    except (SyntaxError, AttributeError):
        return False
    steps: list[ast.expr] = []
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        steps.append(expr)
        expr = expr.value
    if not (isinstance(expr, ast.Name) and expr.id == receiver):
        return False
    value: object = owner
    for step in reversed(steps):
        try:
            if isinstance(step, ast.Attribute):
                value = getattr(value, step.attr)
            else:
                index = step.slice
                if not (isinstance(index, ast.Constant) and isinstance(index.value, int)):
                    return False
                value = value[index.value]  # type: ignore[index]
        except (AttributeError, IndexError, KeyError, TypeError):
            return False
    return isinstance(value, bool)


def _call_flags(analysis: Analysis, fx_nodes: Mapping[str, fx.Node], names: Sequence[str],
                scope: Scope, at: str | None) -> set[str] | None:
    """`_flags` for one cluster's nodes, run in the call on the module at path `at`."""
    g = analysis.graph
    flags: set[str] = set()
    for name in names:
        node = g[name]
        spec = SPECS.get(node.op)
        if spec is None or spec.training is None or node.copy_of:
            continue
        receiver = scope.receiver
        if receiver is None:
            continue  # a plain function: the value it was traced with stands (docstring)
        if at is None:
            return None
        if node.module == at:
            flags.add(f"{receiver}.training")  # an op the function calls itself
        elif not at or node.module.startswith(f"{at}."):  # a layer it calls
            relative = node.module.removeprefix(at).lstrip(".")
            flags.add(f"{_spelled(receiver, relative)}.training")
        else:
            return None
    return flags


def _read_through(analysis: Analysis, original: str, scope: Scope, at: str) -> set[str]:
    """Flags of the layers the lines call that eval mode makes the identity and the trace
    therefore left out (torchvision's StochasticDepth, timm's DropPath: ``passed_through``
    in ``unify_calls.py``), which the edit reads through."""
    try:
        tree = ast.parse(textwrap.dedent(original))
        owner = analysis.module.get_submodule(at)
    except (SyntaxError, AttributeError):
        return set()
    flags = set()
    for call in ast.walk(tree):
        chain = module_chain(call.func) if isinstance(call, ast.Call) else []
        if len(chain) < 2 or chain[0] != scope.receiver:
            continue
        try:
            child = owner.get_submodule(".".join(chain[1:]))
        except (AttributeError, IndexError):
            continue
        if isinstance(child, nn.Module) and _library_class(type(child)) in _DROP_PATHS:
            flags.add(f"{ast.unparse(call.func)}.training")
    return flags


def _instance(analysis: Analysis, fx_node: fx.Node | None, scope: Scope) -> str | None:
    """The path of the module whose method `scope` is, in the call that ran `fx_node`, spelled
    as ``Node.module`` is: the innermost module of the stack of its class or a subclass
    (classes recorded by name: that name), else the model itself ("")."""
    stack = (fx_node.meta.get("nn_module_stack") or {}) if fx_node is not None else {}
    for key, value in reversed(list(stack.items())):
        cls = value[1] if isinstance(value, tuple) and len(value) > 1 else None
        names = ({k.__name__ for k in cls.__mro__} if isinstance(cls, type)
                 else {str(cls).rsplit(".", 1)[-1]})
        if scope.class_name in names:
            return module_path({key: value})
    return "" if scope.owned_by(analysis.module) else None


def _multiline_string(text: str) -> bool:
    """Whether `text` holds a string spanning lines, which indenting would change."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return any(t.type == tokenize.STRING and t.start[0] != t.end[0] for t in tokens)
    except (tokenize.TokenError, SyntaxError):
        return True


def guarded(text: str, original: str, flags: Sequence[str], unit: str) -> str:
    """`text` run when no flag is set, the `original` lines otherwise, both one `unit` in."""
    first = original.splitlines()[0]
    indent = first[:len(first) - len(first.lstrip())]

    def deeper(block: str) -> list[str]:
        return [unit + line if line.strip() else line for line in block.splitlines()]

    test = " and ".join(f"not {f}" for f in flags)
    return "\n".join([f"{indent}if {test}:", *deeper(text), f"{indent}else:", *deeper(original)])


def _unit(src: SourceFile, scope: Scope) -> str:
    """One level of the function's indentation, as its file writes it."""
    body = src.line_text(scope.node.body[0].lineno)
    head = src.line_text(scope.node.lineno)
    inner, outer = (len(t) - len(t.lstrip()) for t in (body, head))
    return body[outer:inner] or "    "


def _pointer(m: SourceMapping, reason: str) -> SourceMapping:
    return SourceMapping(m.cluster_index, POINTER, m.file, m.start, m.end, reason,
                         function=m.function, shared_with=m.shared_with, digest=m.digest)


def train_guarded(analysis: Analysis, maps: Sequence[SourceMapping],
                  files: Mapping[str, SourceFile]) -> list[SourceMapping]:
    """`maps` with each exact edit of train-mode ops guarded by the flags that decide them."""
    by_cluster = {m.cluster_index: m for m in maps if m.exact}
    # Edits written together (`needs`, both ways) share one condition: one set of flags.
    group: dict[int, int] = {i: i for i in by_cluster}

    def root(i: int) -> int:
        while group[i] != i:
            i = group[i]
        return i

    for m in by_cluster.values():
        for j in m.needs:
            if j in group:
                group[root(j)] = root(m.cluster_index)
    scopes: dict[int, Scope | object] = {}
    flags: dict[int, set[str] | None] = {}
    for i, m in by_cluster.items():
        src = files.get(m.file or "")
        scope = src.scope_at(m.start) if src is not None and m.start is not None else None
        scopes[i] = scope if scope is not None else _NO_SCOPE
        flags[i] = _flags(analysis, m, scope) if scope is not None else None
    joined: dict[int, set[str] | None] = {}
    for i in by_cluster:
        r, mine = root(i), flags[i]
        if r not in joined:
            joined[r] = set()
        joined[r] = None if joined[r] is None or mine is None else joined[r] | mine
    out = []
    for m in maps:
        i = m.cluster_index
        if not m.exact or i not in by_cluster:
            out.append(m)
            continue
        wanted = joined[root(i)]
        members = [j for j in by_cluster if root(j) == root(i)]
        if wanted == set():
            out.append(m)
            continue
        where = {(by_cluster[j].file, getattr(scopes[j], "qualname", None)) for j in members}
        if wanted is None or len(where) > 1:
            out.append(_pointer(m, "the kernel computes BatchNorm or dropout as in eval mode, "
                                   "and no condition on the modules' `training` flags can be "
                                   "written where the edit goes (edits in different "
                                   "functions that must be written together, or a layer not "
                                   "reached from `self`); in train mode the lines as written "
                                   "would be needed"))
            continue
        scope = scopes[i]
        src = files[m.file or ""]
        assert isinstance(scope, Scope) and m.replacement is not None and m.original is not None
        if _multiline_string(m.original):
            out.append(_pointer(m, "the lines hold a string over several lines, which an "
                                   "`if not self.training:` around the edit would re-indent; "
                                   "the kernel computes BatchNorm or dropout as in eval mode "
                                   "and needs that guard"))
            continue
        out.append(replace(m, replacement=guarded(m.replacement, m.original.rstrip("\n"),
                                                  sorted(wanted), _unit(src, scope))))
    return out
