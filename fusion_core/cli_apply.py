"""`--apply` in the CLI: the terminal question, the flag checks, and the apply step.

Reads the analysis, its mappings, the generated kernels and the validation verdicts (all
typed, handed on by ``cli_run.Run``); writes the edits through ``sourcemap.apply``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click
from rich.console import Console

from .errors import FusionAdvisorError
from .pipeline import Analysis
from .sourcemap.apply import apply, no_terminal
from .sourcemap.apply_plan import ApplyPlan


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


def apply_edits(plan: ApplyPlan, analysis: Analysis, console: Console,
                assume_yes: bool) -> None:
    """Show, confirm, write, verify (see ``sourcemap.apply.apply``)."""
    console.print()
    apply(plan, analysis, console, assume_yes=assume_yes, ask=terminal_prompt())
