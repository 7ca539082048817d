"""Formatting shared by the console and Markdown reports."""

from __future__ import annotations

import os
from pathlib import Path

from ..units import fmt_bytes  # the reports' name for it; analysis reasons use it too

__all__ = ["fmt_bytes", "short_path", "speedup_words"]


def speedup_words(speedup: float, sign: str = "×") -> str:
    """A speedup (eager time / fused time) worded by its direction: 1.45 is `1.45× faster`,
    0.69 is `1.45× slower` (a speedup below 1 is a slowdown, never "0.69× faster")."""
    if speedup >= 1:
        return f"{speedup:.2f}{sign} faster"
    return f"{1 / speedup:.2f}{sign} slower" if speedup > 0 else "no measurable time"


def short_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else Path(rel).as_posix()
