"""What `--apply` would do to the model file, shown with the Source edits on every run.

Reads an ``ApplyPlan`` (``apply_plan.plan_apply``) and the model file's text; writes nothing.
The import lines come from ``insert.added_imports``, the function ``apply.rewrite`` writes
them with, so the preview and the written file cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from ..report.units import short_path
from ..source_trees import parse_source
from .apply_plan import ApplyPlan
from .diff import distinct, styled
from .insert import added_imports, refusal
from .source_mapping import SourceMapping


@dataclass(frozen=True)
class ApplyPreview:
    file: str
    line: int | None  # 1-based line of the first added import; None: nothing to add
    imports: tuple[str, ...]  # every line --apply adds at the top of the file, in order
    skipped: tuple[tuple[int, str], ...]  # (cluster, why) per shown edit --apply leaves out
    refused: str | None = None  # why --apply would write nothing at all (then no imports)


def preview(plan: ApplyPlan, mappings: Sequence[SourceMapping]) -> ApplyPreview | None:
    """The plan as the Source edits section shows it; None when the file cannot be read."""
    try:
        text = plan.path.read_text(encoding="utf-8")
        tree = parse_source(text, str(plan.path))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None
    written = {(e.file and Path(e.file).resolve(), e.start) for e in plan.edits}
    why = {s.cluster: s.reason for s in reversed(plan.skipped)}  # first reason wins
    skipped = []
    for m in distinct(mappings):
        if (m.file and Path(m.file).resolve(), m.start) not in written:
            clusters = (m.cluster_index, *m.shared_with)
            skipped.append((m.cluster_index, next(
                (why[i] for i in clusters if i in why), "another edit of these lines is written")))
    refused = refusal(text)
    if refused is not None or not plan.edits:
        return ApplyPreview(str(plan.path), None, (), tuple(skipped), refused)
    at, block = added_imports(tree, plan)
    return ApplyPreview(str(plan.path), at + 1, tuple(block.splitlines()), tuple(skipped),
                        refused)


def print_imports(p: ApplyPreview, console: Console) -> None:
    """The import lines --apply adds, as a hunk at the file's own line numbers."""
    if p.refused is not None:
        console.print()
        console.print(Text(f"--apply would write nothing: {short_path(p.file)} {p.refused}",
                           style="dim"),
                      soft_wrap=True)
    if p.line is None:
        return
    console.print()
    console.print(Text(f"{short_path(p.file)}:{p.line}  imports --apply adds", style="bold"))
    n = len(p.imports)
    for line in (f"@@ -{p.line - 1},0 +{p.line},{n} @@" if n != 1 else
                 f"@@ -{p.line - 1},0 +{p.line} @@", *(f"+{i}" for i in p.imports)):
        console.print(styled(line), soft_wrap=True)


def preview_dict(p: ApplyPreview) -> dict[str, Any]:
    """The `--json` `apply` section."""
    return {"file": p.file, "line": p.line, "imports": list(p.imports),
            "skipped": [{"cluster": c, "reason": r} for c, r in p.skipped],
            "refused": p.refused}
