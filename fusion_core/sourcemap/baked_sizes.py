"""Values built into a kernel that the code computes from a tensor's size.

Reads the function's AST and the texts the match would build into the kernel (``baked``);
writes nothing. torch.export records a Python number computed from a size
(`s = 1.0 / x.shape[0]`) as that number, so the kernel would hold 0.25 at every batch where
the user's line follows the input: such an edit stays a pointer, naming the line.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any

from ..ir.graph import SHAPE_ATTRS, SHAPE_METHODS
from .pysource import last_store


def _reads_size(expr: ast.AST) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr in SHAPE_ATTRS) or (
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and n.func.attr in SHAPE_METHODS) for n in ast.walk(expr))


def _from_size(func: ast.AST, expr: ast.AST, line: int, seen: set[str]) -> ast.stmt | None:
    """The assignment above `line` that computes a name `expr` reads from a size, if any."""
    for name in {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - seen:
        seen.add(name)
        last = last_store(func, name, line)
        if last is not None and (_reads_size(last)
                                 or _from_size(func, last, last.lineno, seen) is not None):
            return last
    return None


def size_baked(func: ast.FunctionDef | ast.AsyncFunctionDef, line: int,
               baked: Iterable[tuple[str, Any]], segment: Callable[[ast.AST], str]
               ) -> str | None:
    """Why the edit at `line` would hold a size-dependent number, or None; `segment`
    gives a statement's source text."""
    for text, value in baked:
        try:
            expr = ast.parse(text, mode="eval").body
        except SyntaxError:
            continue
        st = None if _reads_size(expr) else _from_size(func, expr, line, set())
        if st is None and not _reads_size(expr):
            continue
        where = "" if st is None else f" (line {st.lineno}: `{segment(st)}`)"
        return (f"`{text}`{where} depends on a tensor's size, but the capture recorded it "
                f"as {value!r}: the kernel would hold that at every input size")
    return None
