"""An augmented assignment ending a fused run: `result += input` (torchvision's
MobileNetV3/EfficientNet residual, under `if self.use_res_connect:`).

The capture makes the in-place add an out-of-place one (``ir/functionalize.py``), so the
matcher reads the statement as its sum, `result + input`, and the edit rebinds the name:
`result = cluster3(..., input)`. That is the same only when no one else holds the tensor
the add wrote into: one the cluster computes on these lines.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Sequence

from .pysource import SourceFile, Statement, stored_names


def augmented_value(st: ast.stmt) -> ast.BinOp | None:
    """`result += input` read as `result + input`; None for any other statement."""
    if not (isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name)):
        return None
    value = ast.BinOp(st.target, st.op, st.value)
    return ast.copy_location(value, st)  # spans the statement: said whole in messages


def is_augmented(st: ast.stmt, expr: ast.expr | None) -> bool:
    """`expr` is the sum `augmented_value` read `st` (`result += input`) as."""
    return (isinstance(st, ast.AugAssign) and isinstance(expr, ast.BinOp)
            and expr.left is st.target)


def rebinding_refused(src: SourceFile, stmts: Sequence[Statement],
                      values: Sequence[str | None], cluster: Collection[str]) -> str | None:
    """Why rebinding the last statement's name (`result += input`) to the kernel's result
    would differ from writing into the tensor it holds; None when it would not. `values`:
    the graph value each statement computes, as the matcher found it."""
    st = stmts[-1].node
    assert isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name)
    name, last = st.target.id, len(stmts) - 1
    j = next((k for k in range(last - 1, -1, -1) if name in stored_names(stmts[k].node)), None)
    # Another name for that tensor is read later only where the capture kept the add in
    # place (no cluster holds it then), or `_check_dead` refuses the range.
    if j is not None and values[j] in cluster:
        return None
    text = src.segment(st)
    op = text[len(name):].lstrip().split("=", 1)[0].strip()
    held = ("a tensor from before these lines (the caller's or an earlier line's)"
            if j is None else f"which holds `{src.segment(stmts[j].node.value)}` (line "  # type: ignore[attr-defined]
            f"{stmts[j].start}), a tensor the kernel only reads")
    return (f"`{text}` (line {st.lineno}) writes in place into `{name}`, {held}; "
            f"rebinding `{name}` to the kernel's result would leave that tensor unchanged: "
            f"write `{name} = {name} {op} {src.segment(st.value)}` if nothing else reads it")
