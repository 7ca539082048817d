"""A cluster that runs into or out of an `if` on a module setting: the residual add of a
block built with or without its skip (`x = self.bn3(x)` then `if self.has_skip: x = x +
shortcut`), or a layer scale before the residual (`if self.gamma is not None: x = x *
self.gamma` then `x = x + shortcut`).

Reads the statements holding a cluster's lines (``pysource.Statement``) and, for the
instances of the module, the condition's value; writes a ``Guard``: the `if` and how many of
its body's statements the cluster covers. The edit keeps the choice. A run that ends in the
`if` (the head form):

    if self.has_skip:              # the calls that formed the cluster run the kernel
        x = cluster5(x, shortcut)
    else:                          # the others run the lines as written
        x = self.bn3(x)

A run that starts in the `if`'s last statements and goes on below it (the tail form):

    if self.gamma is not None:
        x = cluster5(x, self.gamma, shortcut)
    else:
        x = self.drop_path(x) + self.shortcut(shortcut)

It is only offered when the condition reads nothing but the module's attributes and
constants (its value is fixed per instance, and reading it first changes nothing), the `if`
has no `else`, and the run's statements outside it lie right above (head) or right below
(tail) it.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from .pysource import Scope, SourceFile, Statement

_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Is: operator.is_, ast.IsNot: operator.is_not, ast.Eq: operator.eq,
    ast.NotEq: operator.ne, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Lt: operator.lt,
    ast.LtE: operator.le}


class _Unsettled(Exception):
    """The condition reads something other than the module's attributes and constants."""


@dataclass(frozen=True)
class Guard:
    node: ast.If
    # head: the body's first statements the cluster covers; tail: the body's first
    # statement the cluster covers (it covers the rest of the body)
    taken: int
    # What the `else` branch runs, when not the lines as the span's text has them: those
    # the user wrote where that text spells a Sequential layer by layer (sequential.py), or
    # the edit of the clusters the lines hold in the calls the condition fails (mapping.py).
    otherwise: str | None = None
    tail: bool = False  # the run starts inside the `if` and goes on below it

    @property
    def end(self) -> int:
        return self.node.end_lineno or self.node.lineno

    def written(self, src: SourceFile, start: int, end: int) -> str:
        """What the `else` branch runs as the user wrote it: the run's lines above the `if`
        (head) or below it (tail), `start`-`end` being the edit's range."""
        if self.tail:
            return "".join(src.lines[self.end:end])
        return "".join(src.lines[start - 1:self.node.lineno - 1])


def _self_name(scope: Scope) -> str | None:
    return scope.receiver


def _value(expr: ast.expr, self_name: str, module: torch.nn.Module | None) -> Any:
    """`expr` evaluated with `self` the module; `_Unsettled` past attributes and constants
    (with no module, only the form is checked)."""
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Name) and expr.id == self_name:
        return module
    if isinstance(expr, ast.Attribute) and expr.attr != "training":  # train() changes it
        base = _value(expr.value, self_name, module)
        return None if module is None else getattr(base, expr.attr)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return not _value(expr.operand, self_name, module)
    if isinstance(expr, ast.BoolOp):
        if module is None:  # the form only: every operand
            for v in expr.values:
                _value(v, self_name, None)
            return None
        # Python's value, not a bool: `(self.k or 0) == 2` compares `self.k` where it is set
        stop = isinstance(expr.op, ast.Or)
        for v in expr.values:
            value = _value(v, self_name, module)
            if bool(value) is stop:
                return value
        return value
    if (isinstance(expr, ast.Compare) and len(expr.ops) == 1
            and type(expr.ops[0]) in _COMPARE):
        left = _value(expr.left, self_name, module)
        right = _value(expr.comparators[0], self_name, module)
        return None if module is None else _COMPARE[type(expr.ops[0])](left, right)
    raise _Unsettled


def settled_value(test: ast.expr, self_name: str, module: torch.nn.Module) -> bool | None:
    """`bool(test)` with `self` the module, when `test` reads nothing but its attributes
    and constants (not its `training` flag); None otherwise or when an attribute is missing."""
    try:
        _value(test, self_name, None)  # the whole condition's form, short-circuit or not
        return bool(_value(test, self_name, module))
    except Exception:  # noqa: BLE001 - _Unsettled, or an attribute the module lacks
        return None


def guarded_run(src: SourceFile, scope: Scope, stmts: list[Statement]
                ) -> tuple[tuple[Statement, ...], Guard, list[ast.stmt], int, int] | None:
    """The run (head: statements before the `if`, then the first ones of its body; tail:
    the last ones of its body, then statements after it), its guard, and the outer body
    with the indices of the range's first and last statements in it; None when `stmts` do
    not lie so (the caller's refusal stands)."""
    self_name = _self_name(scope)
    bodies = {id(s.body): s.body for s in stmts}
    if self_name is None or len(bodies) != 2:
        return None
    a, b = bodies.values()
    for body, inner in ((a, b), (b, a)):
        g = next((st for st in body if isinstance(st, ast.If) and st.body is inner), None)
        if g is not None:
            break
    else:
        return None
    if g.orelse or g.body[0].lineno == g.lineno:  # `if c: x = ...` on one line
        return None
    outer = [s for s in stmts if s.body is body]
    inside = [s for s in stmts if s.body is inner]
    try:
        _value(g.test, self_name, None)
    except _Unsettled:
        return None
    at = body.index(g)
    lo, hi = min(s.index for s in outer), max(s.index for s in outer)
    if lo > at:
        return _tail(g, body, at, hi, min(s.index for s in inside))
    taken = max(s.index for s in inside) + 1
    if hi != at - 1:  # the body's first statements join the run even without ops of their own
        return None     # (EfficientNet's `result = self.stochastic_depth(result)`, eval mode)
    run = [Statement(st, body, i, st.lineno, st.end_lineno or st.lineno)
           for i, st in enumerate(body) if lo <= i < at]
    run += [Statement(st, g.body, i, st.lineno, st.end_lineno or st.lineno)
            for i, st in enumerate(g.body[:taken])]
    if _multiline_string(run[:at - lo]):
        return None  # the else branch re-indents these lines: a multi-line string would change
    return tuple(run), Guard(g, taken), body, lo, at


def _tail(g: ast.If, body: list[ast.stmt], at: int, hi: int, first: int
          ) -> tuple[tuple[Statement, ...], Guard, list[ast.stmt], int, int] | None:
    """The tail form: the body from its statement `first` to its end (those after the
    cluster's last join the run, as a head's first statements do), then the outer body's
    statements right below the `if` up to index `hi`."""
    run = [Statement(st, g.body, i, st.lineno, st.end_lineno or st.lineno)
           for i, st in enumerate(g.body) if i >= first]
    below = [Statement(st, body, i, st.lineno, st.end_lineno or st.lineno)
             for i, st in enumerate(body) if at < i <= hi]
    if _multiline_string(below):
        return None  # the else branch re-indents these lines: a multi-line string would change
    return (*run, *below), Guard(g, first, tail=True), body, at, hi


def _multiline_string(stmts: list[Statement]) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str)
               and n.lineno != n.end_lineno for s in stmts for n in ast.walk(s.node))


def holds(guard: Guard, scope: Scope, model: torch.nn.Module, node: fx.Node) -> bool:
    """Whether the condition held in the instance of the scope's class `node` ran in
    (True when that cannot be told: the node then counts as running the guarded lines)."""
    self_name = _self_name(scope)
    stack = node.meta.get("nn_module_stack") or {}
    paths = [p for p, cls in stack.values()
             if getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1]) == scope.class_name]
    paths = paths or [p for p, _ in stack.values() if _owns(scope, model, p)]  # a subclass's
    if not paths or self_name is None:
        return True
    return holds_in(guard, scope, model.get_submodule(paths[-1]))


def _owns(scope: Scope, model: torch.nn.Module, path: str) -> bool:
    try:
        return scope.owned_by(model.get_submodule(path))
    except AttributeError:
        return False


def holds_in(guard: Guard, scope: Scope, instance: torch.nn.Module) -> bool:
    """Whether the condition holds in `instance`, a module of the scope's class (True when
    that cannot be told)."""
    self_name = _self_name(scope)
    if self_name is None:
        return True
    try:
        return bool(_value(guard.node.test, self_name, instance))
    except Exception:  # noqa: BLE001 - an attribute the condition reads fails: count it run
        return True


def guarded_text(src: SourceFile, guard: Guard, start: int, end: int, edit: str) -> str:
    """The lines replacing the range `start`-`end`: the `if` runs `edit` and the body's kept
    statements (head: the fused call indented as the run's first line, then the body's rest;
    tail: the body's first statements, then the fused call indented as the body), `else` the
    run's lines as written."""
    g = guard.node
    line = src.line_text(g.lineno)
    indent = line[:len(line) - len(line.lstrip())]
    unit = " " * (g.body[0].col_offset - g.col_offset)

    def deeper(text: str) -> list[str]:
        return [unit + t if t.strip() else t for t in text.splitlines()]

    written = guard.otherwise if guard.otherwise is not None else guard.written(src, start, end)
    if guard.tail:
        kept = [src.line_text(n) for n in range(g.lineno + 1, g.body[guard.taken].lineno)]
        lines = written.splitlines(keepends=True)
        while lines and not lines[0].strip():  # a blank line below the `if` opens no `else`
            lines.pop(0)
        written = "".join(lines)
        return "\n".join([f"{indent}if {src.segment(g.test)}:", *kept, *edit.splitlines(),
                          f"{indent}else:", *deeper(written)])
    kept = [src.line_text(n) for n in range(g.body[guard.taken].lineno, guard.end + 1)] \
        if guard.taken < len(g.body) else []
    return "\n".join([f"{indent}if {src.segment(g.test)}:", *deeper(edit), *kept,
                      f"{indent}else:", *deeper(written)])


def blocks_reason(src: SourceFile, scope: Scope, stmts: list[Statement]) -> str:
    """Why statements of two blocks make no edit: the lines, the block's header, and the one
    form of it an edit takes."""
    ordered = sorted(stmts, key=lambda s: s.start)
    a = ordered[0]
    b = next(s for s in ordered if s.body is not a.body)
    inner = b if b.node.col_offset > a.node.col_offset else a
    header = next((st for st in ast.walk(scope.node) if isinstance(st, ast.stmt) and any(
        getattr(st, k, None) is inner.body for k in ("body", "orelse", "finalbody"))), None)
    where = "" if header is None else (
        f" (line {header.lineno}: `{src.line_text(header.lineno).strip()}`)")
    return (f"line {a.start} (`{src.line_text(a.start).strip()}`) and line {b.start} "
            f"(`{src.line_text(b.start).strip()}`) lie in different blocks{where}; an edit "
            "replaces statements of one block, or crosses the edge of an `if` that only reads "
            "the module's attributes (`if self.has_skip:`): the statements right above it with "
            "the first ones of its body, or the last ones of its body with those right below "
            "it")
