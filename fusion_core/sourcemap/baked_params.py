"""Values built into a kernel that the code takes from a parameter of the edited function.

Reads the function's AST and the texts the match would build into the kernel (``baked``);
writes nothing. The capture records the number the traced call passed (`self.mix(x, 2.0)`),
so `def mix(self, t, s): return torch.sigmoid(t * s)` would become `return cluster0(t)`
holding 2.0, silently wrong for a caller passing another `s` (one the trace did not see, or
another call site). Such an edit stays a pointer, naming the parameter. The receiver's
attributes (`self.alpha`) are one value per instance, and a tensor's dtype or size is not
the number it holds (``baked_sizes.py`` covers sizes): neither is followed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any

from ..ir.graph import METADATA_ATTRS, SHAPE_ATTRS, SHAPE_METHODS
from .pysource import last_store

# What a tensor holds besides its values (`len(x)` too): sizes are `baked_sizes.py`'s to judge.
_PROPERTIES = frozenset({*METADATA_ATTRS, *SHAPE_ATTRS, *SHAPE_METHODS, "stride"})


def _params(func: ast.FunctionDef | ast.AsyncFunctionDef, receiver: str | None) -> set[str]:
    a = func.args
    named = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
    return {p.arg for p in named} - {receiver}


def _read(node: ast.AST) -> set[str]:
    """Names whose value `node` reads, not through a tensor's dtype, device or size."""
    if isinstance(node, ast.Attribute) and node.attr in _PROPERTIES or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "len"):
        return set()
    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) else set()
    names = {node.target.id} if (isinstance(node, ast.AugAssign)  # `k *= 2.0` reads `k`
                                 and isinstance(node.target, ast.Name)) else set()
    return names.union(*(_read(child) for child in ast.iter_child_nodes(node)))


def _from_param(func: ast.FunctionDef | ast.AsyncFunctionDef, expr: ast.AST, line: int,
                params: set[str], seen: set[tuple[str, int]]
                ) -> tuple[str, ast.stmt | None] | None:
    """The parameter `expr` (at `line`) reads, and the assignment through which, if any."""
    for name in sorted(_read(expr)):
        if (name, line) in seen:
            continue
        seen.add((name, line))
        last = last_store(func, name, line)
        if last is None:
            if name in params:
                return name, None
            continue
        found = _from_param(func, last, last.lineno, params, seen)
        if found is not None:
            return found[0], found[1] or last
    return None


def _spread(func: ast.AST, text: str) -> bool:
    """`text` is one of several positional arguments of a call (`x.view(n, 4, 8)`), which
    the match pairs with export's whole size list: a view's numbered sizes, left to
    ``codegen/literal_sizes.py``, whose reason (sizes captured as numbers) names the view."""
    return any(isinstance(n, ast.Call) and len(n.args) > 1
               and any(isinstance(a, ast.Name) and a.id == text for a in n.args)
               for n in ast.walk(func))


def param_baked(func: ast.FunctionDef | ast.AsyncFunctionDef, receiver: str | None,
                line: int, baked: Iterable[tuple[str, Any]],
                segment: Callable[[ast.AST], str]) -> str | None:
    """Why the edit at `line` would hold a number a caller passes, or None; `receiver`:
    the module's own name (`self`); `segment` gives a statement's source text."""
    params = _params(func, receiver)
    for text, value in baked:
        try:
            expr = ast.parse(text, mode="eval").body
        except SyntaxError:
            continue
        found = _from_param(func, expr, line, params, set())
        if found is None or (isinstance(value, list) and _spread(func, text)):
            continue
        param, via = found
        what = (f"`{text}` is a parameter" if text == param and via is None else
                f"`{text}`" + ("" if via is None else f" (line {via.lineno}: "
                                                      f"`{segment(via)}`)")
                + f" reads `{param}`, a parameter")
        return (f"{what} of `{func.name}` (line {func.lineno}): its callers may pass other "
                f"values than the {value!r} built into the kernel; where all pass that value, "
                f"write it into `{func.name}` to fuse these lines")
    return None
