"""Formatting shared by the console and Markdown reports."""

from __future__ import annotations

import os
from pathlib import Path


def fmt_bytes(n: float) -> str:
    """Binary units (1 MB = 2**20 bytes), one decimal: `384.0 MB`."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


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
