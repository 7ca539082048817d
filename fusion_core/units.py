"""Sizes in words, for reports and for the reasons analysis gives (no pass of its own)."""

from __future__ import annotations


def fmt_bytes(n: float) -> str:
    """Binary units (1 MB = 2**20 bytes), one decimal: `384.0 MB`."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"
