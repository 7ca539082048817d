"""Frames of decorator wrappers and forwarding ``__call__``s, which call-site lifting looks through.

Reads a frame's function and the statement at the frame's line (``pysource``); says whether the
frame only hands its call on: the function is a wrapper (``functools.wraps``-made, its
``__wrapped__`` set through ``update_wrapper`` or by assignment, or a ``__call__`` that forwards to
``super().__call__`` or ``forward``) and the line returns what the call it makes returns, with
arguments it computes nothing for (``return fn(*args, **kwargs)``). transformers'
``GradientCheckpointingLayer`` (decoder layers' ``forward``) and ``deprecate_kwarg`` are such
wrappers: without this, `self.norm(h)` through one would stand for a call of the wrapper.
Whether the wrapper runs graph ops of its own is ``callsite.py``'s question (it reads the graph).
"""

from __future__ import annotations

import ast

from .pysource import Scope, SourceFile

# What a forwarding `__call__` may hand its call to: the module machinery or the forward.
_FORWARD_TARGETS = frozenset({"__call__", "forward", "_call_impl", "_wrapped_call_impl"})


def is_wrapper(src: SourceFile, scope: Scope) -> bool:
    """`scope` is a decorator's wrapper or a `__call__` method (its line is checked apart)."""
    node = scope.node
    if scope.class_name is not None and node.name == "__call__":
        return True
    if any(_calls_wraps(d) for d in node.decorator_list):
        return True
    parent = _parent(src, scope)
    return parent is not None and _sets_wrapped(parent.node, node.name)


def forwards_at(src: SourceFile, scope: Scope, line: int) -> bool:
    """The statement of `scope` at `line` returns, unchanged, the value of a call whose
    arguments are names, attributes or constants (the wrapper's own parameters passed on);
    for a `__call__`, a call of `super().__call__`, `super().forward` or `self.forward`."""
    stmt = src.statement_at(scope, line)
    if stmt is None or not isinstance(stmt.node, ast.Return):
        return False
    call = stmt.node.value
    if not isinstance(call, ast.Call) or not all(
            _plain(a) for a in (*call.args, *(k.value for k in call.keywords))):
        return False
    if scope.class_name is not None and scope.node.name == "__call__":
        return _forwards_to_module(call.func, scope)
    return not any(isinstance(n, ast.Call) for n in ast.walk(call.func))


def _plain(expr: ast.expr) -> bool:
    """An argument passed on as it is: `x`, `*args`, `**kwargs`, `self.eps`, `2.0`."""
    if isinstance(expr, ast.Starred):
        expr = expr.value
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, (ast.Name, ast.Constant))


def _forwards_to_module(func: ast.expr, scope: Scope) -> bool:
    if not (isinstance(func, ast.Attribute) and func.attr in _FORWARD_TARGETS):
        return False
    base = func.value
    if isinstance(base, ast.Name):  # `self.forward(...)`
        return base.id == scope.receiver and func.attr == "forward"
    return (isinstance(base, ast.Call) and isinstance(base.func, ast.Name)
            and base.func.id == "super")


def _calls_wraps(decorator: ast.expr) -> bool:
    """`@wraps(fn)` or `@functools.wraps(fn)`."""
    if not isinstance(decorator, ast.Call):
        return False
    f = decorator.func
    return (isinstance(f, ast.Name) and f.id == "wraps") or (
        isinstance(f, ast.Attribute) and f.attr == "wraps")


def _parent(src: SourceFile, scope: Scope) -> Scope | None:
    """The function `scope` is defined in, if it is a nested function."""
    outer, sep, _ = scope.qualname.rpartition(".<locals>.")
    return next((s for s in src.scopes if s.qualname == outer), None) if sep else None


def _sets_wrapped(parent: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    """`parent` makes its nested `name` a wrapper: `update_wrapper(name, fn)` or
    `name.__wrapped__ = fn`."""
    for n in ast.walk(parent):
        if isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Name) \
                and n.args[0].id == name:
            f = n.func
            if (isinstance(f, ast.Name) and f.id == "update_wrapper") or (
                    isinstance(f, ast.Attribute) and f.attr == "update_wrapper"):
                return True
        if isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "__wrapped__"
                and isinstance(t.value, ast.Name) and t.value.id == name for t in n.targets):
            return True
    return False
