"""Two parameters of the edited function that held one tensor in the traced call.

Reads the function's AST and the source texts the match bound to each cluster input;
writes nothing. The kernel reads such a tensor once, under the first name the match met:
`def mix(self, a, b): s = a + b` called as `self.mix(x, x)` would become
`return cluster0(a)`, which ignores `b` for every caller that passes two tensors. A name
the function binds to another (`c = b`) counts as that one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping

from .pysource import stored_names


def _roots(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """Name -> the parameter it always holds: a parameter never reassigned, or a name
    assigned once, from such a name."""
    a = func.args
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    stores: dict[str, list[ast.AST]] = {}
    for st in ast.walk(func):
        if isinstance(st, ast.stmt) and not isinstance(st, (ast.FunctionDef, ast.ClassDef)):
            for name in stored_names(st):
                stores.setdefault(name, []).append(st)
    roots = {p: p for p in params if p not in stores}
    for _ in range(len(stores)):  # chains of `c = b`, each link resolved on one pass
        for name, sts in stores.items():
            (st,) = sts if len(sts) == 1 else (None,)
            if (isinstance(st, ast.Assign) and len(st.targets) == 1
                    and isinstance(st.value, ast.Name) and st.value.id in roots):
                roots[name] = roots[st.value.id]
    return roots


def aliased_parameters(func: ast.FunctionDef | ast.AsyncFunctionDef,
                       bound: Mapping[str, Iterable[str]]) -> str | None:
    """Why the edit would be wrong (`bound`: cluster input -> every text the match read it
    as), or None."""
    roots = _roots(func)
    for texts in bound.values():
        params = dict.fromkeys(roots[t] for t in texts if t in roots)
        if len(params) > 1:
            first, second = list(params)[:2]
            return (f"`{first}` and `{second}`, parameters of {func.name} (line "
                    f"{func.lineno}), are one tensor in the traced call: the kernel reads it "
                    f"once, so the edit would ignore `{second}` where a caller passes two "
                    "tensors")
    return None
