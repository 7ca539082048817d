"""Sizes and counts in words, for reports and for the reasons analysis gives (no pass of
its own)."""

from __future__ import annotations


def fmt_bytes(n: float) -> str:
    """Binary units (1 MB = 2**20 bytes), one decimal: `384.0 MB`."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """`noun` agreeing with the count `n`: `kernel` for 1, `kernels` (or `many`) otherwise."""
    return noun if n == 1 else many or noun + "s"


def counted(n: int, noun: str, many: str | None = None) -> str:
    """A count and its noun, agreeing: `1 kernel`, `3 kernels`, `2 matches` (`many`)."""
    return f"{n} {plural(n, noun, many)}"


def was(n: int) -> str:
    """The past of "to be" agreeing with the count `n`: `1 was given`, `2 were given`."""
    return "was" if n == 1 else "were"
