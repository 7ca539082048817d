"""Small pieces for writing generated code: lines with indentation, index terms.

Nothing here searches generated text: an index is a tuple of ``Term`` objects that know
which block axes they vary along (the scalar parameters they name are registered in
``signature.py``'s ``KernelParams``). Read by ``emit.py``, ``loads.py`` and the launcher's writers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

INDENT = "    "


class CodeWriter:
    """Lines of Python source at the current indentation (blank lines stay empty)."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._level = 0

    def line(self, text: str = "") -> None:
        self._lines.append(INDENT * self._level + text if text else "")

    def lines(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.line(text)

    def wrapped(self, items: Iterable[str], width: int = 96) -> None:
        """Comma-separated `items` over lines of at most `width` characters, indentation
        included (an argument list)."""
        self._lines.extend(wrap_args(items, INDENT * self._level, width))

    def bracketed(self, opening: str, items: Iterable[str]) -> None:
        """`opening` (ending in a bracket), the items wrapped one level deeper, the closing."""
        self.line(opening)
        with self.indented():
            self.wrapped(items)
        self.line({"(": ")", "[": "]"}[opening[-1]])

    @contextmanager
    def indented(self) -> Iterator[None]:
        self._level += 1
        try:
            yield
        finally:
            self._level -= 1

    def result(self) -> list[str]:
        return list(self._lines)


def wrap_args(items: Iterable[str], indent: str, width: int = 96) -> list[str]:
    """Comma-separated `items` as lines of at most `width` characters (generated code)."""
    lines, cur = [], indent
    for item in items:
        piece = item + ","
        if cur.strip() and len(cur) + len(piece) + 1 > width:
            lines.append(cur.rstrip())
            cur = indent
        cur += piece + " "
    if cur.strip():
        lines.append(cur.rstrip())
    return lines


def tuple_literal(items: Iterable[str]) -> str:
    """A tuple literal of `items` (a trailing comma for one)."""
    items = list(items)
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


# -- index terms ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Base:
    """What an index term starts from: `offs`, `rows`, `cols` or a row-major mix of them."""

    text: str
    axes: frozenset[str]  # block axes it varies along: offs, rows, cols
    compound: bool = False  # a sum: parenthesized before an operator binds tighter

    @property
    def bare(self) -> bool:
        return self.text.isidentifier()


OFFS = Base("offs", frozenset({"offs"}))
ROWS = Base("rows", frozenset({"rows"}))
COLS = Base("cols", frozenset({"cols"}))
ROW_MAJOR = Base("rows * n_cols + cols", frozenset({"rows", "cols"}), compound=True)


def row_remainder(rspan: str) -> Base:
    """The position within an index group that starts inside the rows: a per-row
    remainder, then the columns."""
    return Base(f"(rows % {rspan}) * n_cols + cols", frozenset({"rows", "cols"}), compound=True)


# The generated file's helpers dividing an index by a span (``FastDivisor``). Compiled, a
# division by a run-time value costs 7 instructions an element (a float reciprocal, then
# corrections); a multiply-high and a shift, 3 (Inductor's kernels, specialized to the shape,
# divide by a constant in 2). But Triton's axis analysis knows that `x % d` stays contiguous
# in runs of 16 where the launcher's `d` is a multiple of 16 (it specializes such arguments),
# which keeps vector loads, and knows nothing of a multiply-high: so the helpers divide
# through the multiply-high only where the span is no multiple of 16 (its `fast` constexpr),
# where `%` keeps nothing contiguous either, nor 1 (a constant to Triton), and the tensor holds
# under 2**30 elements.
INDEX_DIV, INDEX_MOD = "_index_div", "_index_mod"


@dataclass(frozen=True)
class FastDivisor:
    """A span an index is divided by (or reduced modulo) through `INDEX_DIV`: the span's
    parameter, those of its multiplier and shift (``runtime._divisor``), and the constexpr
    saying the multiply-high serves (``signature.fast_name``; else `//` and `%`)."""

    value: str
    multiplier: str
    shift: str
    fast: str

    def div(self, x: str) -> str:
        return f"{INDEX_DIV}({x}, {self.value}, {self.multiplier}, {self.shift}, {self.fast})"

    def mod(self, x: str) -> str:
        return f"{INDEX_MOD}({x}, {self.value}, {self.multiplier}, {self.shift}, {self.fast})"


def index_division_lines() -> list[str]:
    """The module-level definitions of `INDEX_DIV` and `INDEX_MOD` (a masked lane's garbage
    index gives garbage, which its mask hides)."""
    return ["# An index divided by a span d >= 1: where d is no multiple of 16 nor 1 and the",
            "# tensor holds under 2**30 elements (FAST), without a division: (m, l) from the",
            "# launcher's _divisor(d), x // d == umulhi(4x, m) >> l; else `//` and `%`, which",
            "# Triton knows keep runs of 16 (or folds away: d == 1).",
            "@triton.jit", f"def {INDEX_DIV}(x, d, m, l, FAST: tl.constexpr):",
            "    if FAST:",
            "        q = tl.umulhi(x.to(tl.uint32) * 4, m.to(tl.uint32))",
            "        q = (q >> l).to(tl.int32)  # l: Triton makes a 1 a constant",
            "    else:",
            "        q = x // d",
            "    return q",
            "", "", "@triton.jit", f"def {INDEX_MOD}(x, d, m, l, FAST: tl.constexpr):",
            "    if FAST:",
            f"        r = x - {INDEX_DIV}(x, d, m, l, FAST) * d",
            "    else:",
            "        r = x % d",
            "    return r"]


@dataclass(frozen=True)
class Term:
    """One summand of an offset: `base % modulo // divisor * stride` (parts optional); a
    `FastDivisor` modulo or divisor goes through the file's `INDEX_MOD` / `INDEX_DIV`."""

    base: Base
    modulo: str | FastDivisor | None = None
    divisor: str | FastDivisor | None = None
    stride: str | None = None

    @property
    def zero(self) -> bool:
        return self.stride == "0"  # only gives the pointer block its shape

    @property
    def bare(self) -> bool:
        return self.base.bare and not (self.modulo or self.divisor or self.stride)

    def __str__(self) -> str:
        text, called = self.base.text, False  # called: the text is one call (no parentheses)
        if isinstance(self.modulo, FastDivisor):
            text, called = self.modulo.mod(text), True
        elif self.modulo:
            text = (f"({text})" if self.base.compound else text) + f" % {self.modulo}"
        if isinstance(self.divisor, FastDivisor):
            text, called = self.divisor.div(text), True
        elif self.divisor:
            if self.base.compound and not self.modulo:
                text = f"({text})"
            text += f" // {self.divisor}"
            called = False
        if self.stride:
            plain = called or (self.base.bare and not (self.modulo or self.divisor))
            text = f"{text} * {self.stride}" if plain else f"({text}) * {self.stride}"
        return text


def zero_term(base: Base) -> Term:
    return Term(base, stride="0")


@dataclass(frozen=True)
class Index:
    """A tensor's offset for the current block: a sum of terms (no terms: offset 0)."""

    terms: tuple[Term, ...] = ()

    @property
    def is_zero(self) -> bool:
        return not self.terms

    def varies(self, axis: str) -> bool:
        return any(axis in t.base.axes for t in self.terms if not t.zero)

    def shaped(self, axis: str) -> bool:
        """The pointer block has this axis (a zero term gives it one too)."""
        return any(axis in t.base.axes for t in self.terms)

    def plus(self, before: tuple[Term, ...] = (), after: tuple[Term, ...] = ()) -> Index:
        return Index(before + self.terms + after)

    def __str__(self) -> str:
        return " + ".join(map(str, self.terms)) if self.terms else "0"

    def offset(self, ptr: str) -> str:
        """`ptr + index`, parenthesized unless the index is one bare name."""
        text = str(self)
        one = len(self.terms) == 1 and self.terms[0].bare
        return f"{ptr} + {text}" if one else f"{ptr} + ({text})"
