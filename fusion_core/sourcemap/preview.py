"""What `--apply` would do to the model's files, shown with the Source edits on every run.

Reads an ``ApplyPlan`` (``apply_plan.plan_apply``) and the text of each file it edits;
writes nothing.
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
from .apply_plan import ApplyPlan, FilePlan
from .diff import distinct, styled
from .insert import added_imports, refusal
from .source_mapping import SourceMapping


@dataclass(frozen=True)
class FileImports:
    """The lines --apply adds at the top of one file it edits."""

    file: str
    line: int | None  # 1-based line of the first added import; None: nothing to add
    imports: tuple[str, ...]  # every line --apply adds at the top of the file, in order
    refused: str | None = None  # why --apply would write nothing at all (then no imports)


@dataclass(frozen=True)
class ApplyPreview:
    file: str  # the model file; its imports are `line` and `imports`
    line: int | None
    imports: tuple[str, ...]
    skipped: tuple[tuple[int, str], ...]  # (cluster, why) per shown edit --apply leaves out
    refused: str | None = None  # why --apply would write nothing at all (then no imports)
    others: tuple[FileImports, ...] = ()  # the other files it edits, as the plan orders them
    refused_file: str | None = None  # the file `refused` is about (any of them refuses all)


def _imports(plan: FilePlan) -> FileImports | None:
    """The file's added lines, or why it refuses; None when the file cannot be read."""
    try:
        text = plan.path.read_text(encoding="utf-8")
        tree = parse_source(text, str(plan.path))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None
    refused = refusal(text)
    if refused is not None or not plan.edits:
        return FileImports(str(plan.path), None, (), refused)
    at, block = added_imports(tree, plan)
    return FileImports(str(plan.path), at + 1, tuple(block.splitlines()))


def preview(plan: ApplyPlan, mappings: Sequence[SourceMapping]) -> ApplyPreview | None:
    """The plan as the Source edits section shows it; None when a file cannot be read."""
    model = _imports(plan.file(plan.path))
    read = [_imports(f) for f in plan.files if f.path != plan.path]
    others = tuple(f for f in read if f is not None)
    if model is None or len(others) < len(read):
        return None
    written = {(e.file and Path(e.file).resolve(), e.start) for e in plan.edits}
    why = {s.cluster: s.reason for s in reversed(plan.skipped)}  # first reason wins
    skipped = []
    for m in distinct(mappings):
        if (m.file and Path(m.file).resolve(), m.start) not in written:
            clusters = (m.cluster_index, *m.shared_with)
            skipped.append((m.cluster_index, next(
                (why[i] for i in clusters if i in why), "another edit of these lines is written")))
    # --apply writes all of its files or none: one refusal stops every file's imports
    refusing = next((f for f in (model, *others) if f.refused is not None), None)
    if refusing is not None:
        model = FileImports(model.file, None, ())
        others = tuple(FileImports(f.file, None, ()) for f in others)
    return ApplyPreview(model.file, model.line, model.imports, tuple(skipped),
                        refusing and refusing.refused, others, refusing and refusing.file)


def print_imports(p: ApplyPreview, console: Console) -> None:
    """The import lines --apply adds, a hunk at each file's own line numbers."""
    if p.refused is not None:
        console.print()
        console.print(Text(f"--apply would write nothing: "
                           f"{short_path(p.refused_file or p.file)} {p.refused}", style="dim"),
                      soft_wrap=True)
    for f in (FileImports(p.file, p.line, p.imports), *p.others):
        if f.line is None:
            continue
        console.print()
        console.print(Text(f"{short_path(f.file)}:{f.line}  imports --apply adds",
                           style="bold"))
        n = len(f.imports)
        for line in (f"@@ -{f.line - 1},0 +{f.line},{n} @@" if n != 1 else
                     f"@@ -{f.line - 1},0 +{f.line} @@", *(f"+{i}" for i in f.imports)):
            console.print(styled(line), soft_wrap=True)


def preview_dict(p: ApplyPreview) -> dict[str, Any]:
    """The `--json` `apply` section: the model file's imports, then the other files'."""
    return {"file": p.file, "line": p.line, "imports": list(p.imports),
            "skipped": [{"cluster": c, "reason": r} for c, r in p.skipped],
            "refused": p.refused, "refused_file": p.refused_file,
            "other_files": [{"file": f.file, "line": f.line, "imports": list(f.imports)}
                            for f in p.others]}
