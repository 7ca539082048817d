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
the flags of all the receiver's modules (`any(m.training for m in self.modules())`, so that a
BatchNorm switched to train alone to refresh its statistics is still seen). In a plain
function, with no module to read, the value traced stands (a parameter the kernel would hold
is refused by ``baked_params.py``).
Edits that must be written together (``SourceMapping.needs``) take one condition, so that none
of them reads a value another one's fused call dropped. An edit that runs its kernel on some
instances only (``SourceMapping.condition``, ``selected.py``) gets its `if` here too, that
condition first: `if isinstance(self.act, nn.SiLU) and not self.training:`.

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

import torch.nn as nn

from ..analysis.types import Cluster
from ..ir.graph import Node
from ..ir.registry import SPECS
from ..pipeline import Analysis
from .guard import Guard, holds_in
from .match import self_path_of
from .pyexpr import module_chain
from .pysource import Scope, SourceFile
from .source_mapping import POINTER, SourceMapping
from .unify_calls import _DROP_PATHS, _library_class

_NO_SCOPE = object()  # a mapping whose function is not found: no flag can be read there


def _spelled(receiver: str, relative: str) -> str:
    """`self` and "blocks.0.bn" as `self.blocks[0].bn`, as the user indexes a container."""
    out = receiver
    for part in relative.split(".") if relative else ():
        out += f"[{part}]" if part.lstrip("-").isdigit() else f".{part}"
    return out


def _flags(analysis: Analysis, m: SourceMapping, scope: Scope) -> set[str] | None:
    """The `training` flags deciding the edit's train-mode ops, spelled in `scope` (a method,
    or a function nested in one: ``_receiver_scope``); None when an op's module cannot be
    reached from the receiver. The clusters of one call (several kernels of one statement)
    pool their layers; each layer is spelled as written from the receiver where that names
    a module on every instance of the class (those whose calls formed no cluster too: a
    layer that is None there), else counted from the end of its Sequentials (``from_end.py``),
    else every module of the receiver's decides (`any(m.training for m in self.modules())`)."""
    # A `training` flag the lines read (`F.batch_norm(..., bn.training)`), or code picking a
    # value the kernel holds by one (eval_settled.py), decides too, as written.
    flags: set[str] = {text for text, _, value in (b.rpartition(" = ") for b in m.baked)
                       if text.endswith(".training") and value == "False"}
    if scope.receiver is None:
        # a plain function: the value it was traced with stands (docstring); one picked by
        # a `self.training` there reads an argument, no module
        return None if flags else set()
    layers: dict[str, set[str]] = {}  # instance path -> layer paths below it
    for cluster in _clusters(analysis, m):
        at = self_path_of(analysis, cluster, scope)
        found = _call_layers(analysis, cluster.nodes, at)
        if found is None:
            return None
        if at is None:
            if any(_sensitive(analysis.graph[n]) for n in cluster.nodes):
                return None
            continue
        layers.setdefault(at, set()).update(found)
        if m.original is not None:
            layers[at].update(_read_through(analysis, m.original, scope, at))
    owners = [mod for _, mod in analysis.module.named_modules()
              if scope.owned_by(mod) and _runs_lines(scope, mod, m.start or 0, m.end or 0)]
    receiver = scope.receiver
    if not all(_resolve(o, f.removesuffix(".training"), receiver) is not None
               for f in flags if f.startswith(f"{receiver}.") for o in owners):
        return None  # a layer one instance lacks (`self.bn` None there): no flag to read
    for at, paths in layers.items():
        for path in paths:
            if not path:
                flags.add(f"{receiver}.training")
                continue
            spelled = _spelling(analysis.module.get_submodule(at), path, owners, receiver)
            # No one spelling names the layer on every instance: any of the receiver's
            # modules in train mode runs the lines as written (the receiver's own flag
            # would miss a BatchNorm switched to train alone, to refresh its statistics).
            flags.add(spelled or f"any(m.training for m in {receiver}.modules())")
    return flags


def _runs_lines(scope: Scope, instance: nn.Module, start: int, end: int) -> bool:
    """Whether a call on `instance` may run lines `start`-`end`: not when they lie in the body
    of an `if` on module settings that fails there (`if self.down:` in a block built without
    its down-sampling layers); True when that cannot be told."""
    for st in ast.walk(scope.node):
        if (isinstance(st, ast.If) and st.body[0].lineno <= start
                and end <= (st.body[-1].end_lineno or 0)
                and not holds_in(Guard(st, 0), scope, instance)):
            return False
    return True


def _clusters(analysis: Analysis, m: SourceMapping) -> list[Cluster]:
    """Each cluster the edit computes: its own, those sharing its lines, and the parts of
    other calls it serves."""
    return [*(analysis.clusters[i] for i in (m.cluster_index, *m.shared_with)),
            *(s.part for s in m.serves)]


def _nodes(analysis: Analysis, m: SourceMapping) -> list[str]:
    return [n for c in _clusters(analysis, m) for n in c.nodes]


def _sensitive(node: Node) -> bool:
    spec = SPECS.get(node.op)
    return spec is not None and spec.training is not None and not node.copy_of


def _call_layers(analysis: Analysis, names: Sequence[str], at: str | None) -> set[str] | None:
    """The paths, below the module at `at`, of the layers whose train-mode ops one cluster
    computes ("" for an op the function calls itself); None when one lies outside it."""
    found: set[str] = set()
    for name in names:
        node = analysis.graph[name]
        if not _sensitive(node):
            continue
        if at is None:
            return None
        if node.module == at:
            found.add("")
        elif not at or node.module.startswith(f"{at}."):
            found.add(node.module.removeprefix(at).lstrip("."))
        else:
            return None
    return found


def _spelling(owner: nn.Module, path: str, owners: Sequence[nn.Module],
              receiver: str) -> str | None:
    """`owner`'s layer at `path` as an expression from the receiver that names a module on
    every one of `owners`: as written (`self.block[2][1]`), or with its Sequential and
    ModuleList indices counted from the end (`self.block[-1][-1]`) where the layer counts
    allow; None if neither."""
    parts = path.split(".")
    tails: list[str] = []
    holder: object = owner
    for part in parts:
        if part.isdigit() and isinstance(holder, (nn.Sequential, nn.ModuleList)):
            tails.append(str(int(part) - len(holder)))
        else:
            tails.append(part)
        # down by the child's name, through any container (a ModuleList's stages too)
        holder = getattr(holder, "_modules", {}).get(part)
    layer = owner.get_submodule(path)
    for spelled in (parts, tails):
        text = _spelled(receiver, ".".join(spelled))
        if _resolve(owner, text, receiver) is layer and all(
                isinstance(_resolve(o, text, receiver), nn.Module) for o in owners):
            return f"{text}.training"
    return None


def _resolve(owner: nn.Module, text: str, receiver: str) -> object:
    """What `text` (`self.block[-1][1]`) names with the receiver being `owner`, or None."""
    try:
        expr: ast.expr = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    steps: list[ast.expr] = []
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        steps.append(expr)
        expr = expr.value
    if not (isinstance(expr, ast.Name) and expr.id == receiver):
        return None
    value: object = owner
    for step in reversed(steps):
        try:
            if isinstance(step, ast.Attribute):
                value = getattr(value, step.attr)
            else:
                index = step.slice
                if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
                    index = ast.Constant(-index.operand.value)  # type: ignore[attr-defined]
                if not (isinstance(index, ast.Constant) and isinstance(index.value, int)):
                    return None
                value = value[index.value]  # type: ignore[index]
        except (AttributeError, IndexError, KeyError, TypeError):
            return None
    return value


def _read_through(analysis: Analysis, original: str, scope: Scope, at: str) -> set[str]:
    """Paths, below the module at `at`, of the layers the lines call that eval mode makes the
    identity and the trace therefore left out (torchvision's StochasticDepth, timm's
    DropPath: ``passed_through`` in ``unify_calls.py``), which the edit reads through."""
    try:
        tree = ast.parse(textwrap.dedent(original))
        owner = analysis.module.get_submodule(at)
    except (SyntaxError, AttributeError):
        return set()
    found = set()
    for call in ast.walk(tree):
        chain = module_chain(call.func) if isinstance(call, ast.Call) else []
        if len(chain) < 2 or chain[0] != scope.receiver or any(
                p.startswith("-") for p in chain):
            continue
        try:
            child = owner.get_submodule(".".join(chain[1:]))
        except (AttributeError, IndexError):
            continue
        if isinstance(child, nn.Module) and _library_class(type(child)) in _DROP_PATHS:
            found.add(".".join(chain[1:]))
    return found


def _receiver_scope(src: SourceFile, scope: Scope) -> Scope:
    """The method whose receiver `scope` reads: itself, or for a function nested in a method
    (`def act(h): ... self.training`) that method, where the nested one does not rebind the
    name."""
    if scope.receiver is not None:
        return scope
    outer = [s for s in src.scopes if s.receiver is not None
             and s.node.lineno < scope.node.lineno
             and (scope.node.end_lineno or 0) <= (s.node.end_lineno or 0)]
    if not outer:
        return scope
    method = max(outer, key=lambda s: s.node.lineno)
    a = scope.node.args
    own = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    return method if method.receiver not in own else scope


def _multiline_string(text: str) -> bool:
    """Whether `text` holds a string spanning lines, which indenting would change."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return any(t.type == tokenize.STRING and t.start[0] != t.end[0] for t in tokens)
    except (tokenize.TokenError, SyntaxError):
        return True


def guarded(branches: Sequence[tuple[str | None, str]], original: str, flags: Sequence[str],
            unit: str) -> str:
    """Each (condition, text) of `branches` run where its condition holds and no flag is
    set (`if` / `elif`), the `original` lines otherwise, all one `unit` in."""
    first = original.splitlines()[0]
    indent = first[:len(first) - len(first.lstrip())]

    def deeper(block: str) -> list[str]:
        # after the lines' own indentation, which may mix tabs and spaces
        return [indent + unit + line[len(indent):] if line.startswith(indent) and line.strip()
                else unit + line if line.strip() else line for line in block.splitlines()]

    out = []
    for k, (condition, text) in enumerate(branches):
        test = " and ".join([*([condition] if condition else []), *(f"not {f}" for f in flags)])
        out += [f"{indent}{'elif' if k else 'if'} {test}:", *deeper(text)]
    return "\n".join([*out, f"{indent}else:", *deeper(original)])


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
    # Edits written together (`needs`, both ways), and the mappings of one edit, share one
    # condition: one set of flags.
    group: dict[int, int] = {i: i for i in by_cluster}

    def root(i: int) -> int:
        while group[i] != i:
            i = group[i]
        return i

    first: dict[tuple, int] = {}  # the mappings of one edit (several kernels of a statement)
    for m in by_cluster.values():
        for j in m.needs:
            if j in group:
                group[root(j)] = root(m.cluster_index)
        at = first.setdefault((m.file, m.start, m.end), m.cluster_index)
        group[root(m.cluster_index)] = root(at)
    scopes: dict[int, Scope | object] = {}
    flags: dict[int, set[str] | None] = {}
    for i, m in by_cluster.items():
        src = files.get(m.file or "")
        scope = src.scope_at(m.start) if src is not None and m.start is not None else None
        scopes[i] = scope if scope is not None else _NO_SCOPE
        if src is not None and scope is not None:
            flags[i] = _flags(analysis, m, _receiver_scope(src, scope))
        else:  # no function to read a flag in: a pointer only where one is needed
            flags[i] = None if any(_sensitive(analysis.graph[n]) for n in _nodes(analysis, m)) \
                else set()
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
        if wanted == set() and m.condition is None and not m.branches:
            out.append(m)
            continue
        if (m.condition is not None or m.branches) and len(
                {(by_cluster[j].file, by_cluster[j].start) for j in members}) > 1:
            test = m.condition or m.branches[0][0]
            out.append(_pointer(m, "other calls run the lines otherwise, so only calls where "
                                   f"`{test}` would run the kernel, and the edits that must "
                                   "be written with this one cannot take that condition too"))
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
            tests = [c for c, _ in m.branches] or [m.condition]
            why = (f"other calls run the lines otherwise and need `if {tests[0]}:`"
                   if not wanted else "the kernel computes BatchNorm or dropout as in eval "
                   "mode and needs `if not self.training:`")
            out.append(_pointer(m, "the lines hold a string over several lines, which an "
                                   f"`if` around the edit would re-indent; {why}"))
            continue
        branches = m.branches or ((m.condition, m.replacement),)
        out.append(replace(m, replacement=guarded(branches, m.original.rstrip("\n"),
                                                  sorted(wanted or ()), _unit(src, scope))))
    return out
