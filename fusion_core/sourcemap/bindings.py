"""Where a name is bound, scope by scope, and whether one binding runs before a line.

Reads a function's or a file's AST; writes nothing. A scope's own names exclude those of the
functions, lambdas, classes and comprehensions nested in it, which bind their own.
``held_numbers.py`` asks whether a name can only hold a constant; ``baked_names.py`` whether
the value a kernel holds for a name is the one every call would see.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)
_DEFINED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def own_scope(root: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `root`'s own scope (its parameters and body); a nested function or
    class is yielded (its name is bound here) but not entered."""
    stack = list(ast.iter_child_nodes(root))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _NESTED):
            stack.extend(ast.iter_child_nodes(node))


def bindings(root: ast.AST, name: str) -> list[ast.AST]:
    """Every node of `root`'s own scope that binds `name`: a target (`name = ...`, a loop's,
    a `with ... as`, `:=`), a parameter, an import, a `def` or `class`, and a `global` or
    `nonlocal` declaration (the name is then bound elsewhere too)."""
    return [n for n in own_scope(root) if (
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
        or isinstance(n, ast.arg) and n.arg == name
        or isinstance(n, _DEFINED) and n.name == name
        or isinstance(n, (ast.Import, ast.ImportFrom))
        and any((a.asname or a.name).split(".")[0] == name for a in n.names)
        or isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names)]


def declared_global(tree: ast.Module, name: str) -> bool:
    """Some function of the file declares `global name`: it may rebind the module's."""
    return any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(tree))


def plain_assignment(root: ast.AST, target: ast.AST) -> ast.Assign | None:
    """The `name = value` statement of `root` whose only target is `target`, if it is one."""
    return next((st for st in ast.walk(root) if isinstance(st, ast.Assign)
                 and len(st.targets) == 1 and st.targets[0] is target), None)


def blocks(root: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every statement list of `root`: bodies, `else` and `finally` branches, handlers'."""
    for node in ast.walk(root):
        for key in ("body", "orelse", "finalbody"):
            block = getattr(node, key, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def runs_before(root: ast.AST, statement: ast.stmt, line: int) -> bool:
    """`statement` runs on every path to `line`: a later statement of its own block holds
    the line (not a branch beside it, nor a line above it)."""
    for block in blocks(root):
        for i, st in enumerate(block):
            if st is statement:
                return any(later.lineno <= line <= (later.end_lineno or later.lineno)
                           for later in block[i + 1:])
    return False


def statement_of(root: ast.AST, node: ast.AST) -> ast.stmt | None:
    """The innermost statement of `root` that holds `node`."""
    best = None
    for st in ast.walk(root):
        if isinstance(st, ast.stmt) and st is not root and any(n is node for n in ast.walk(st)):
            if best is None or (st.lineno, -(st.end_lineno or 0)) > (
                    best.lineno, -(best.end_lineno or 0)):
                best = st
    return best
