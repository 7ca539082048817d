"""The CLI's source-mapping steps: the `map` column, the JSON section, and `--apply`.

Reads an ``Analysis``, its ``SourceMapping``s and the JSON extras the validation
step returned (``validation.clusters[*].usable``); writes the ``source_map``
JSON section and, with ``--apply``, the edits (through ``apply.apply``). Kept
out of ``cli.py`` so the command stays a thin layer over the passes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ..codegen import Kernel, LoweringError, generate
from ..errors import FusionAdvisorError
from ..pipeline import Analysis
from .apply import Verdicts, apply, no_terminal, plan_apply
from .mapping import SourceMapping


def map_column(mappings: Sequence[SourceMapping]) -> dict[int, str]:
    return {m.cluster_index: m.quality for m in mappings}


def lines_column(mappings: Sequence[SourceMapping]) -> dict[int, str]:
    """The statements each mapping covers (`L15-17`; multi-line statements whole)."""
    return {m.cluster_index: f"L{m.start}" if m.start == m.end else f"L{m.start}-{m.end}"
            for m in mappings if m.start is not None}


def mapping_dict(m: SourceMapping) -> dict[str, Any]:
    lines = None if m.file is None else {"file": m.file, "start": m.start, "end": m.end}
    return {"cluster": m.cluster_index, "map": m.quality, "lines": lines,
            "function": m.function, "reason": m.reason,
            "replacement": m.replacement.strip() if m.replacement else None,
            "shared_with": list(m.shared_with), "baked": list(m.baked)}


def source_map_extra(mappings: Sequence[SourceMapping]) -> dict[str, Any]:
    return {"source_map": [mapping_dict(m) for m in mappings]}


def verdicts(extra: dict[str, Any]) -> Verdicts:
    """Per cluster (usable, status) from the validation step's JSON section."""
    section = extra.get("validation") or {}
    return {c["cluster"]: (bool(c["usable"]), str(c["status"]))
            for c in section.get("clusters", [])}


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def terminal_prompt() -> Callable[[str], bool] | None:
    """A yes/no question on the terminal; None when stdin is not one (pipes, CI)."""
    if not stdin_is_terminal():
        return None
    return lambda question: click.confirm(question, default=False)


def check_apply_flags(apply_edits: bool, assume_yes: bool) -> None:
    """Refuse before any work when --apply could not ask its question."""
    if assume_yes and not apply_edits:
        raise FusionAdvisorError("--yes answers --apply's question: pass --apply too")
    if apply_edits and not assume_yes and not stdin_is_terminal():
        raise no_terminal()


def _kernels(analysis: Analysis, mappings: Sequence[SourceMapping]) -> dict[int, Kernel]:
    out: dict[int, Kernel] = {}
    for m in mappings:
        rep = int(m.call.removeprefix("cluster")) if m.exact and m.call else None
        if rep is not None and rep not in out:
            try:
                out[rep] = generate(analysis, analysis.clusters[rep])
            except LoweringError:
                continue  # plan_apply says "no kernel was generated for it"
    return out


def apply_step(analysis: Analysis, mappings: Sequence[SourceMapping], model_path: str | Path,
               extra: dict[str, Any], console: Console, assume_yes: bool) -> None:
    """`--apply`: plan, show, confirm, write, verify (see ``apply.apply``)."""
    plan = plan_apply(analysis, tuple(mappings), model_path, _kernels(analysis, mappings),
                      verdicts(extra))
    console.print()
    apply(plan, analysis, console, assume_yes=assume_yes, ask=terminal_prompt())
