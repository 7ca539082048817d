"""Clusters that run partly inside a call of the user's own module or helper function.

Reads a cluster's nodes with their chains of user frames (``SourceLoc.caller``) and the
files those frames lie in; writes, for a cluster whose nodes lie in several functions,
the line each node stands at in the outermost one: an op inside `self.norm(h)` (a user
RMSNorm's forward) stands at that call's line, as a library module's ops already do. A
call is lifted only when the cluster holds every op it runs, so the edit that replaces
its line computes all of it; otherwise ``PointerOnly`` names the call left half fused.
Frames of wrappers that only hand the call on (``wrappers.py``: a ``functools.wraps``
decorator, a forwarding ``__call__``) are looked through, unless the graph shows the wrapper
computing ops of its own: the caller's line then calls the function the wrapper reaches.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

import torch.fx as fx

from ..analysis.group import components
from ..analysis.types import Cluster
from ..ir.graph import Node, OpKind, SourceLoc
from ..ir.spelling import called_as, layer_said, said
from ..pipeline import Analysis
from .frames import Frames, pos
from .hints import argument_hint, own_call_first
from .pyexpr import attr_chain
from .pysource import Scope, SourceFile


class Unliftable(Exception):
    """The cluster's calls cannot be lifted to one function: with `site` (file, line), a
    call there is only partly fused and `reason` says so; without, the plain refusal stands."""

    def __init__(self, reason: str, site: tuple[str, int] | None = None) -> None:
        super().__init__(reason)
        self.reason, self.site = reason, site


@dataclass(frozen=True)
class LiftedCall:
    """One call, on a line of the span's function, whose every op the cluster computes."""

    line: int  # the call's line in the caller
    function: str  # the callee, `RMSNorm.forward`
    name: str  # the callee's own name (`forward`, `rms_norm`)
    result: str  # the node the call returns
    nodes: frozenset[str]  # the cluster's nodes the call computes
    # (node, value from outside): a same-dtype `.to` that torch.export made the name of its
    # operand from then on (the tensor object is the argument itself), so later code
    # outside the call reads the node while the source reads the argument.
    passes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NestedCalls:
    """The one line that calls the function all of a cluster's ops lie in, spelling that
    call several times one inside the other (`act(act(x))`): why no edit of the function's
    lines computes a cluster of ops from more than one of those calls."""

    reason: str
    file: str
    line: int


@dataclass(frozen=True)
class Lifted:
    locs: Mapping[str, SourceLoc]  # node name -> where it stands in the outermost function
    calls: tuple[LiftedCall, ...] = ()
    nested: NestedCalls | None = None


def site_line(loc: SourceLoc | None, src: SourceFile, scope: Scope) -> int | None:
    """The line of `scope` (in `src`) a node stands at: its own, or that of the call in
    `scope` it ran inside (innermost such frame); None when no frame lies there."""
    end = scope.node.end_lineno or 0
    for frame in reversed(loc.chain if loc is not None else ()):
        if (frame.file == src.path and scope.start <= frame.line <= end
                and src.scope_at(frame.line) is scope):
            return frame.line
    return None


def _returns_one_value(scope: Scope | None) -> bool:
    """Whether every `return` of the callee's own body returns one expression that is not a
    tuple, and it does not yield (nested functions and lambdas aside)."""
    if scope is None:
        return False
    todo: list[ast.AST] = list(scope.node.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(n, ast.Return) and (n.value is None or isinstance(n.value, ast.Tuple)):
            return False
        todo.extend(ast.iter_child_nodes(n))
    return True


def _is_feeder(node: Node) -> bool:
    """Nodes a call may run that no kernel computes: its parameters and Python values."""
    return node.kind in (OpKind.CONSTANT, OpKind.INPUT) or node.op == "meta"


def _unread_tuple(analysis: Analysis, name: str) -> bool:
    """A chunk or split whose pieces each read its source directly (``ir/split_views.py``):
    the tuple itself is no value a kernel computes or the call's line must keep."""
    node = analysis.graph[name]
    return node.kind is OpKind.VIEW and node.meta is None and not analysis.graph.users[name]


def lift(analysis: Analysis, c: Cluster, frames: Frames) -> Lifted:
    """Where each of `c`'s nodes stands once the calls it fuses whole are lifted to their
    call sites (`frames`: the analysis' frames, shared by every cluster it maps). Raises
    ``Unliftable`` when no one function holds all the calls' lines, with the call's `site`
    when a call's ops are only partly in `c`."""
    nodes = [analysis.graph[n] for n in c.nodes]
    try:
        chains = {n.name: frames.chain(n.source) for n in nodes}
        if len({frames.function(ch[-1]) for ch in chains.values()}) <= 1:
            return Lifted({n.name: n.source for n in nodes},
                          nested=_nested_calls(analysis, c, chains, frames))
        depth = _common_depth(list(chains.values()), frames)
        if depth is None:
            raise Unliftable("no common caller")
        gm_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
        keys = {name: _call_key(ch, depth, frames, gm_nodes.get(name))
                for name, ch in chains.items() if len(ch) > depth + 1}
        members = _members(analysis, depth, set(keys.values()), frames, gm_nodes)
    except (OSError, SyntaxError, UnicodeDecodeError) as e:  # a frame's file cannot be read
        raise Unliftable(str(e)) from e
    callee_names = {k: chains[name][depth + 1].function for name, k in keys.items()}
    callee_scopes = {k: frames.scope(chains[name][depth + 1]) for name, k in keys.items()}
    inside = set(c.nodes)
    calls = []
    for key in dict.fromkeys(keys.values()):
        site, callee = key[0][-1], key[1]
        if not _returns_one_value(callee_scopes[key]):
            # `a, b = f(h)`: an edit binding the kernel's one result to those names is wrong.
            raise Unliftable(f"the call at line {site[1]} (`{callee[1] if callee else '?'}`) "
                             "returns several values (a tuple) or yields; an edit of its "
                             "line binds one", site)
        for each in _each_call(analysis, members[key], site, callee_scopes[key], key[2],
                               frames):
            if inside.isdisjoint(each):  # another call on that line, of another kernel
                continue
            calls.append(_lifted(analysis, c, site, callee, callee_names[key], each))
    locs = {}
    for n in nodes:
        ch = chains[n.name]
        locs[n.name] = ch[depth] if len(ch) > depth + 1 else n.source
    return Lifted(locs, tuple(calls))


def _lifted(analysis: Analysis, c: Cluster, site: tuple[str, int],
            callee: tuple[str, str] | None, name: str, members: list[str]) -> LiftedCall:
    """One call whose every op `c` must compute, and the one value it hands `c`."""
    inside = set(c.nodes)
    left = [m for m in members if m not in inside and not _is_feeder(analysis.graph[m])
            and not _unread_tuple(analysis, m)]
    # the tuple counts as the call's own: its pieces' source is what the call reads
    ran = frozenset(m for m in members if m in inside or _unread_tuple(analysis, m))
    if left:
        raise _partly_fused(analysis, site, callee, left, ran)
    read = [m for m in c.nodes if m in ran and any(
        u not in ran for u in analysis.graph.users[m])]
    # A reader without a source line could be the call's own last op, unseen above.
    if any(analysis.graph[u].source is None and analysis.graph[u].kind is not OpKind.OUTPUT
           for m in read for u in analysis.graph.users[m] if u not in ran):
        raise Unliftable("a value of the call is read by a node without a source line")
    passes = tuple((m, v) for m in read if (v := _same_as_operand(analysis, m, ran)))
    returned = [m for m in read if m not in dict(passes)]
    if len(returned) != 1:
        raise Unliftable(f"the call at line {site[1]} (`{callee[1] if callee else '?'}`) "
                         f"hands the cluster {len(returned)} of its values; an "
                         "edit of its line can bind only the one it returns", site)
    return LiftedCall(site[1], callee[1], name, returned[0], ran, passes)


def _each_call(analysis: Analysis, members: list[str], site: tuple[str, int],
               callee: Scope | None, module: str, frames: Frames) -> list[list[str]]:
    """The nodes of each call one key stands for. Two calls on one line of one module share
    a key (`act(h) + act(h)`); each is told by its own connected ops when the line spells
    that many calls of the callee. Calls one inside the other (`act(act(h))`) share ops
    the graph cannot tell apart: refused in those words."""
    stated = _stated_calls(analysis, site, callee, module, frames)
    if len(stated) < 2:
        return [members]
    each = _connected(analysis, members)
    if len(each) == len(stated):
        return each
    raise Unliftable(_calls_reason(site, callee, stated, frames), site)


def _outermost(stated: list[ast.Call]) -> list[ast.Call]:
    return [s for s in stated if not any(o is not s and _holds(o, s) for o in stated)]


def _calls_reason(site: tuple[str, int], callee: Scope | None, stated: list[ast.Call],
                  frames: Frames) -> str:
    outer = _outermost(stated)
    src = frames.files[site[0]]
    spelled = ", ".join(f"`{src.segment(s)}`" for s in outer)
    nested = ", one inside the other" if len(outer) < len(stated) else ""
    return (f"line {site[1]} calls `{callee.node.name if callee else '?'}` "
            f"{_times(len(stated))} ({spelled}{nested}), and the graph does not say "
            "which of its ops ran in which call; an edit of the line cannot bind "
            "each call's result")


def _nested_calls(analysis: Analysis, c: Cluster, chains: Mapping[str, tuple[SourceLoc, ...]],
                  frames: Frames) -> NestedCalls | None:
    """For a cluster whose ops all lie in one function: the line of its caller that calls it
    nested (`act(act(x))`), when every op ran under that one line; else None."""
    if not chains or any(len(ch) < 2 for ch in chains.values()):
        return None
    if len({tuple(pos(f) for f in ch[:-1]) for ch in chains.values()}) != 1:
        return None
    name, chain = next(iter(chains.items()))
    depth = len(chain) - 2
    site, callee = pos(chain[depth]), frames.scope(chain[-1])
    gm_node = next((n for n in analysis.graph_module.graph.nodes if n.name == name), None)
    module = _call_key(chain, depth, frames, gm_node)[2]
    stated = _stated_calls(analysis, site, callee, module, frames)
    if len(_outermost(stated)) == len(stated):
        return None
    return NestedCalls(_calls_reason(site, callee, stated, frames), *site)


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _holds(outer: ast.Call, inner: ast.Call) -> bool:
    return any(n is inner for n in ast.walk(outer))


def _stated_calls(analysis: Analysis, site: tuple[str, int], callee: Scope | None,
                  module: str, frames: Frames) -> list[ast.Call]:
    """The calls of `callee` the statement at the site line spells: `act(...)` by the
    function's name, `self.norm(...)` by the submodule it names; empty when unknown."""
    src = frames.files.get(site[0])
    caller = frames.scopes.get(site)
    if src is None or caller is None or callee is None:
        return []
    st = src.statement_at(caller, site[1])
    if st is None:
        return []
    found = []
    for n in ast.walk(st.node):
        if not isinstance(n, ast.Call):
            continue
        chain = attr_chain(n.func)
        if callee.node.name != "forward":
            if chain and chain[-1] == callee.node.name:
                found.append(n)
        elif len(chain) > 1 and caller.class_name and _names_class(
                analysis, module, chain[1:], callee.class_name):
            found.append(n)
    return found


def _names_class(analysis: Analysis, module: str, attrs: list[str], cls: str | None) -> bool:
    try:
        sub = analysis.module.get_submodule(".".join(p for p in (module, *attrs) if p))
    except AttributeError:
        return False
    return type(sub).__name__ == cls


def _connected(analysis: Analysis, members: list[str]) -> list[list[str]]:
    """`members` split by the ops that read one another (parameters and Python values go
    with the ops that read them)."""
    ops = [m for m in members if not _is_feeder(analysis.graph[m])]
    each = [list(c) for c in components(analysis.graph, ops)]
    for m in members:
        if _is_feeder(analysis.graph[m]):  # with the first call that reads it
            at = next((g for g in each if any(m in analysis.graph[o].refs for o in g)),
                      each[0] if each else None)
            if at is not None:
                at.append(m)
    return each


def _members(analysis: Analysis, depth: int, wanted: set[tuple], frames: Frames,
             gm_nodes: dict[str, fx.Node]) -> dict[tuple, list[str]]:
    """Every graph node each wanted call ran, by the call's key."""
    sites = {k[0] for k in wanted}
    out: dict[tuple, list[str]] = {}
    for n in analysis.graph.nodes:
        chain = frames.chain(n.source)
        if len(chain) <= depth + 1 or tuple(pos(f) for f in chain[:depth + 1]) not in sites:
            continue
        key = _call_key(chain, depth, frames, gm_nodes.get(n.name))
        if key in wanted:
            out.setdefault(key, []).append(n.name)
    return out


def _same_as_operand(analysis: Analysis, name: str, ran: frozenset[str]) -> str | None:
    """The value from outside the call that `name` is, when it is a conversion to the
    dtype, shape and strides its operand already has (a no-op torch returns the operand
    for)."""
    node = analysis.graph[name]
    if node.op != "to" or len(node.refs) != 1 or node.refs[0] in ran:
        return None
    operand = analysis.graph[node.refs[0]]
    return operand.name if node.meta is not None and node.meta == operand.meta else None


def _common_depth(chains: list[tuple[SourceLoc, ...]], frames: Frames) -> int | None:
    """The deepest frame depth at which every chain is in one function, reached through
    the same call lines above it; None when even the outermost frames differ."""
    found = None
    for d in range(min(len(ch) for ch in chains)):
        if len({frames.function(ch[d]) for ch in chains}) != 1:
            break
        found = d
        if len({pos(ch[d]) for ch in chains}) != 1:
            break
    return found


def _call_key(chain: tuple[SourceLoc, ...], depth: int, frames: Frames,
              fx_node: fx.Node | None) -> tuple:
    """Which call, made at `chain[depth]`, a node ran in: the call lines down to it, the
    callee, and the module the caller ran as (the same line runs once per block). Coarser
    than one call at worst (two calls from one line of one module), which only asks more
    of the cluster."""
    site = tuple(pos(f) for f in chain[:depth + 1])
    caller = frames.scope(chain[depth])
    module = ""
    if caller is not None and caller.class_name and fx_node is not None:
        stack = fx_node.meta.get("nn_module_stack") or {}
        for path, cls in stack.values():
            if getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1]) == caller.class_name:
                module = path
                break
    return (site, frames.function(chain[depth + 1]), module)


def instance_path(node: fx.Node | None, class_name: str | None) -> str | None:
    """The path of the module whose method `node` ran in (`blocks.1`), when known."""
    stack = (node.meta.get("nn_module_stack") or {}) if node is not None else {}
    for path, cls in reversed(list(stack.values())):
        if class_name and getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1]) == class_name:
            return path
    return None


def _partly_fused(analysis: Analysis, site: tuple[str, int], callee: tuple[str, str] | None,
                 left: list[str], fused: frozenset[str] = frozenset()) -> Unliftable:
    name = f"`{callee[1]}`" if callee else "the call"
    # a call through a variable (`x = blk(x)` in a loop) says the module it ran on
    owner = callee[1].split(".")[-2] if callee and "." in callee[1] else None
    own = {m for m in fused if not _unread_tuple(analysis, m)}  # a split's tuple: every call's
    left = own_call_first(analysis, left, own, owner)
    fx_node = next((n for n in analysis.graph_module.graph.nodes if n.name == left[0]), None)
    src = analysis.graph[left[0]].source
    loc = next((f for f in src.chain if pos(f) == site), None) if src else None
    if (path := instance_path(fx_node, owner)) and loc and called_as(path, loc):
        name += f" on {layer_said(path, loc)}"
    out = said(analysis.graph, left[0])
    # A view the kernel reads (a cat's operand sliced inside `rotate_half`) is made there.
    out += (" is a view made inside the call, which the kernel reads as an input,"
            if analysis.graph[left[0]].kind is OpKind.VIEW else
            " runs in another kernel or unfused,")
    return Unliftable(f"only part of the call at line {site[1]} ({name}) is in the cluster: "
                      f"{out} and an edit of the call's line would drop it"
                      + (_return_hint(analysis, site, fused)
                         or argument_hint(analysis, site, callee, own)), site)


def _return_hint(analysis: Analysis, site: tuple[str, int], fused: frozenset[str]) -> str:
    """The fix when the callee's part of the cluster is the outer call of its `return`
    (squeeze-excitation's `return self.scale_activation(scale)` under `scale * input`):
    that call, made at the caller's line instead, puts the cluster in one function."""
    locs = {(s.file, s.line, s.code) for m in fused if (s := analysis.graph[m].source)}
    if len(locs) != 1 or len(fused) != sum(analysis.graph[m].source is not None for m in fused):
        return ""
    (_, line, code), = locs
    try:
        st = ast.parse(code).body[0]
    except (SyntaxError, IndexError):
        return ""
    if not (isinstance(st, ast.Return) and isinstance(st.value, ast.Call)
            and len(st.value.args) == 1 and not st.value.keywords):
        return ""
    func, arg = ast.unparse(st.value.func), ast.unparse(st.value.args[0])
    return (f"; the cluster's part of it is only `{ast.unparse(st.value)}` (line {line}): to "
            f"apply, `return {arg}` there and call `{func}` on the result of line {site[1]} "
            "in a statement of its own below it, so one function holds the whole cluster")
