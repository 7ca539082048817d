"""What `--apply` inserts at the top of a file it edits, where, and whether it may at all.

Reads the file's text (or its parsed tree) and its ``FilePlan``; writes nothing.
``apply.rewrite`` inserts the block ``added_imports`` returns, and the Source edits preview
(preview.py) shows that same block, so the two cannot disagree; ``refusal`` is what both
say instead when an earlier `--apply` already rewrote the file (``fused.wrote_imports``).
"""

from __future__ import annotations

import ast

from .apply_plan import FilePlan
from .fused import import_block, wrote_imports


def _insert_at(tree: ast.Module) -> int:
    """0-based line index just below the module's leading docstring and imports."""
    at = 0
    for i, st in enumerate(tree.body):
        if isinstance(st, (ast.Import, ast.ImportFrom)) or (
                i == 0 and isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)):
            at = st.end_lineno or st.lineno
        else:
            break
    return at


def added_imports(tree: ast.Module, plan: FilePlan, newline: str = "\n") -> tuple[int, str]:
    """Where (0-based line index) and what `rewrite` inserts at the top of the file; the
    Source edits preview shows the same lines (preview.py)."""
    block = import_block(plan.path.stem, [o.call for o in plan.ops], newline)
    # What the edits' own expressions need (unbiased.py), above the kernels' block.
    block = "".join(f"{i}{newline}" for i in dict.fromkeys(
        i for m in plan.edits for i in m.imports)) + block
    return _insert_at(tree), block


def refusal(text: str) -> str | None:
    """Why `--apply` writes nothing to a file of this text, whatever the plan (the preview
    says it too)."""
    if wrote_imports(text):
        return ("already calls kernels from an earlier --apply: restore its backup (.bak) "
                "before applying again")
    return None
