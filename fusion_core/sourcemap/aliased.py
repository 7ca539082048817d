"""Two names the traced call gave one tensor, which the code does not always give one.

Reads the function's AST and the source texts the match bound to each cluster input;
writes nothing. The kernel reads such a tensor once, under the first name the match met:
`def mix(self, a, b): s = a + b` called as `self.mix(x, x)` would become
`return cluster0(a)`, ignoring `b` for every caller that passes two tensors; `if c: h = x`
above `return h * x` would read `h` for both where the branch is not taken. Names are one
tensor for sure only through plain assignments (`y = x`) in the block of the edited lines,
with no other assignment after them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping

from .bindings import blocks
from .pysource import last_store

Origin = tuple[str, int]  # (name, line of the assignment it holds; 0: the parameter)


def _origin(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str, line: int,
            block: list[ast.stmt]) -> Origin:
    """What `name` holds at `line`: the assignment it was last given before it, followed
    through `name = other` when that stands in `block` itself."""
    last = last_store(func, name, line)
    if last is None:
        return name, 0
    if (isinstance(last, ast.Assign) and len(last.targets) == 1
            and isinstance(last.targets[0], ast.Name) and isinstance(last.value, ast.Name)
            and any(st is last for st in block)):
        return _origin(func, last.value.id, last.lineno, block)
    return name, last.lineno


def aliased_names(func: ast.FunctionDef | ast.AsyncFunctionDef, first: ast.stmt,
                  bound: Mapping[str, Iterable[str]]) -> str | None:
    """Why the edit starting at statement `first` would be wrong (`bound`: cluster input ->
    every text the match read it as), or None."""
    block = next((b for b in blocks(func) if any(st is first for st in b)), [])
    for texts in bound.values():
        names = [t for t in texts if t.isidentifier()]
        origins = {n: _origin(func, n, first.lineno, block) for n in names}
        if len(set(origins.values())) < 2:
            continue
        a, b = names[0], next(n for n in names if origins[n] != origins[names[0]])
        late, at = max(((n, origins[n][1]) for n in (a, b)), key=lambda p: p[1])
        why = (f"both are parameters of {func.name} (line {func.lineno})" if not at else
               f"`{late}` is assigned at line {at}, which does not make it "
               f"`{b if late == a else a}`")
        return (f"`{a}` and `{b}` held one tensor in the traced call ({why}): the kernel "
                f"reads it once, as `{a}`, so the edit would ignore `{b}` where they differ")
    return None
