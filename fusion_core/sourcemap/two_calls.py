"""A cluster joining ops of two calls of one function, and how the reason names the calls.

Reads the cluster's nodes with their lifted places (``callsite.Lifted``) and frames
(``Frames.chain``) and the FX graph's module stacks; returns why no edit of the function's
lines fuses them (an edit runs in every call), with the rewrite that would, or None.
``chain_site`` quotes a call's line as every reason about calls does.
"""

from __future__ import annotations

import ast
import io
import tokenize

from ..ir.graph import Node, SourceLoc
from ..ir.spelling import layer_said, said
from ..pipeline import Analysis
from .callkeys import instance_path
from .callsite import Lifted
from .frames import Frames
from .pysource import Scope


def two_calls_reason(analysis: Analysis, nodes: list[Node], lifted: Lifted,
                     frames: Frames) -> str | None:
    """Why the nodes standing in one function did not run in one call of it; None when they
    did. A UNet block's `return x + h` fused with the next block's first norm ran in two
    calls of the same forward (from two lines, or from one line in a loop: on two module
    instances): an edit of its lines runs in every call, so none joins ops of two calls."""
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    seen: dict[tuple[str, str], tuple[tuple, tuple[SourceLoc, ...], Node]] = {}
    for node in nodes:
        # Frames as the rest of the source map reads them: a pass-through wrapper's line
        # (`return func(*args, **kwargs)`) is not the call the user's code makes.
        loc, chain = lifted.locs[node.name], frames.chain(node.source)
        at = max((i for i, f in enumerate(chain) if (f.file, f.line) == (loc.file, loc.line)),
                 default=len(chain) - 1)
        try:
            scope = frames.scope(loc)
        except (OSError, SyntaxError, UnicodeDecodeError):
            scope = None
        call = (tuple((f.file, f.line) for f in chain[:at]),
                instance_path(fx_nodes.get(node.name), scope.class_name if scope else None))
        key = (loc.file, loc.function)
        before, a_chain, a = seen.setdefault(key, (call, chain, node))
        if before == call:
            continue
        sites = [chain_site(a_chain, len(before[0])) + _on(a_chain, len(before[0]), before[1]),
                 chain_site(chain, len(call[0])) + _on(chain, len(call[0]), call[1])]
        name = scope.qualname if scope is not None else loc.function
        fix = _join_fix(frames, scope, [
            (lifted.locs[a.name].line, _caller_at(a_chain, len(before[0]))),
            (loc.line, _caller_at(chain, len(call[0])))])
        return (
            f"the cluster joins {said(analysis.graph, a.name)} of the call {sites[0]} with "
            f"{said(analysis.graph, node.name)} of another call {sites[1]} of `{name}`; "
            "an edit of its lines runs in every call, so none fuses ops of two calls. To "
            f"apply it, write these ops in one function's lines{fix}")
    return None


def _caller_at(chain: tuple[SourceLoc, ...], depth: int) -> SourceLoc | None:
    """The frame of `chain` (``Frames.chain``: wrappers looked through) that made the call
    at `depth`; None at the top level."""
    return chain[depth - 1] if depth else None


def _join_fix(frames: Frames, scope: Scope | None,
              joined: list[tuple[int, SourceLoc | None]]) -> str:
    """Where ops of two calls (each: its line in `scope`, its caller's frame) could be written
    together: a returned residual sum (`return x + h`) in the caller, each call returning
    the part it computes; otherwise both in their common caller, when there is one."""
    ret = scope.node.body[-1] if scope is not None else None
    if (isinstance(ret, ast.Return) and isinstance(ret.value, ast.BinOp)
            and isinstance(ret.value.op, ast.Add)
            and all(ret.lineno <= line <= (ret.end_lineno or ret.lineno) for line, _ in joined)):
        args = scope.node.args
        params = {p.arg for p in (*args.posonlyargs, *args.args)}
        names = [o.id for o in (ret.value.left, ret.value.right) if isinstance(o, ast.Name)]
        computed = [n for n in names if n not in params]
        if len(names) == 2 and len(computed) == 1:
            return (f" (e.g. return `{computed[0]}` and do the residual add "
                    f"`{ast.unparse(ret.value)}` in the caller, giving each call's result and "
                    "each sum a name of its own)")
    callers = set()
    for _, frame in joined:
        try:
            caller = frames.scope(frame) if frame is not None else None
        except (OSError, SyntaxError, UnicodeDecodeError):
            caller = None
        callers.add(caller.qualname if caller is not None else None)
    if len(callers) == 1 and None not in callers:
        return f" (here both in their caller, `{callers.pop()}`)"
    return ""


def _on(chain: tuple[SourceLoc, ...], depth: int, path: str | None) -> str:
    """` on `blk` (`self.blocks[1]`)`: the module instance the call at `depth` of `chain`
    (``Frames.chain``) ran on."""
    return f" on {layer_said(path, _caller_at(chain, depth))}" if path else ""


def chain_site(chain: tuple[SourceLoc, ...], depth: int) -> str:
    """`at line 33 (`h = self.b1(h, emb)`)`: the caller's frame at `depth` of `chain`, a
    node's frames as ``Frames.chain`` reads them (pass-through wrappers left out)."""
    caller = _caller_at(chain, depth)
    if caller is None:
        return "(the top level)"
    return f"at line {caller.line}" + (f" (`{_closed(caller.code)}`)" if caller.code else "")


_CLOSING = {"(": ")", "[": "]", "{": "}"}


def _closed(code: str) -> str:
    """A frame's line of a call written over several lines (`h = layer(`), its brackets
    closed (`h = layer(...)`): the first line alone is no expression to quote."""
    try:
        ast.parse(code)
        return code
    except SyntaxError:
        pass
    opened: list[str] = []
    try:  # tokens, so that a bracket inside a string literal is no bracket
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.OP and tok.string in _CLOSING:
                opened.append(_CLOSING[tok.string])
            elif tok.type == tokenize.OP and opened and tok.string == opened[-1]:
                opened.pop()
    except (tokenize.TokenError, SyntaxError):
        pass  # the line ends inside its brackets: the tokens read so far are all we need
    return f"{code}...{''.join(reversed(opened))}" if opened else code
