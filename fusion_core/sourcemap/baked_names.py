"""Values built into a kernel that the code takes from a name other calls may see otherwise.

Reads the function's and the file's AST and the texts the match would build into the kernel
(``baked``); writes nothing. With `s = 0.25` and then `if h.shape[0] > 4: s = 0.5` above
`return torch.relu(s * h)`, the traced call took one path, and `return cluster0(h)` would
hold its 0.25 in every call. A name the kernel holds must be bound once, by a statement that
runs on every path to the edited lines (or once at the file's top level, with no function
declaring it `global`); so must each name that statement reads. Parameters are
``baked_params.py``'s to judge; a module's attributes (`self.alpha`) are one value per instance.
A name bound in the branches of an `if` on `training` flags (`if self.training: ... else:`) is
bound once in eval mode, where the fused call runs (``eval_settled.py``): the flags that
settle it are added to ``assumes`` for the edit's guard.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any

from .bindings import bindings, declared_global, runs_before, statement_of
from .eval_settled import chosen_store, flag_reads
from .pysource import loaded_names

_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _lines(nodes: list[ast.AST]) -> str:
    return ", ".join(str(n) for n in sorted({n.lineno for n in nodes}))


def _unsettled(func: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module, name: str,
               line: int, segment: Callable[[ast.AST], str], seen: set[str],
               receiver: str | None, assumes: set[str]) -> str | None:
    """Why `name`, read at `line`, may hold another value in another call; None if not."""
    if name in seen:
        return None
    seen.add(name)
    local = bindings(func, name)
    if any(isinstance(b, ast.arg) for b in local):
        return None  # a parameter: baked_params.py
    if any(isinstance(b, (ast.Global, ast.Nonlocal)) for b in local):
        return f"`{name}` is declared `global` or `nonlocal` in `{func.name}`"
    stores = [b for b in local if isinstance(b, ast.Name)]
    if not stores:
        if local:  # an import or a definition
            return None
        if declared_global(tree, name):
            return f"`{name}` is declared `global` in a function of the file"
        at_top = [b for b in bindings(tree, name) if isinstance(b, ast.Name)]
        if len(at_top) > 1:
            return f"`{name}` is bound at lines {_lines(at_top)}"
        return None
    reaches: ast.stmt | None = None  # the statement that must run before the line
    if len(stores) > 1:
        picked = chosen_store(func, stores, receiver)
        if picked is None:
            return f"`{name}` is bound at lines {_lines(stores)}"
        reaches, st, flags = picked
        assumes.update(flags)
    else:
        st = statement_of(func, stores[0])
        if st is None:
            return None
    head = segment(st).splitlines()[0].strip()
    if isinstance(st, _LOOPS) and st.lineno <= line <= (st.end_lineno or st.lineno):
        return (f"`{name}` (line {st.lineno}: `{head}`) changes from one pass of the loop "
                "to the next")
    if not runs_before(func, reaches or st, line):
        return f"`{name}` (line {st.lineno}: `{head}`) is not set on every path to line {line}"
    if isinstance(st, ast.Assign):  # `s = 0.5 * k`: so must `k` be
        assumes.update(flag_reads(st.value, receiver))  # `t = self.gate.training`
        for read in sorted(loaded_names(st.value)):
            why = _unsettled(func, tree, read, st.lineno, segment, seen, receiver, assumes)
            if why is not None:
                return why
    return None


def rebound_baked(func: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module, line: int,
                  baked: Iterable[tuple[str, Any]], segment: Callable[[ast.AST], str],
                  receiver: str | None = None, assumes: set[str] | None = None
                  ) -> str | None:
    """Why the edit at `line` would hold a number another call may not see, or None; the
    `training` flags that must be False for it to hold are added to `assumes`."""
    assumes = set() if assumes is None else assumes
    for text, value in baked:
        try:
            expr = ast.parse(text, mode="eval").body
        except SyntaxError:
            continue
        for name in sorted(loaded_names(expr)):
            why = _unsettled(func, tree, name, line, segment, set(), receiver, assumes)
            if why is not None:
                return (f"{why}: the kernel would hold the {value!r} of the traced call in "
                        f"every call; bind `{name}` once, above the fused lines, to fuse them")
    return None
