"""The user's comments inside an edited range, kept above the fused call.

Reads an exact ``SourceMapping``'s original lines and its replacement; writes nothing. An
edit replaces whole statements, so a comment between them (`# scale, then clip`) or after
one of their lines would go with them: the replacement gets each comment it does not
already carry (an argument spelled as written keeps its own) on a line of its own above
the call, in the original order, so --apply never drops the user's text.
"""

from __future__ import annotations

import io
import textwrap
import tokenize
from collections import Counter
from dataclasses import replace

from .source_mapping import SourceMapping


def _comments(text: str) -> list[str] | None:
    """The comments of `text` (whole statements), in order; None when it does not tokenize."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(textwrap.dedent(text)).readline))
    except (tokenize.TokenError, SyntaxError):  # IndentationError is a SyntaxError
        return None
    return [t.string for t in tokens if t.type == tokenize.COMMENT]


def keep_comments(m: SourceMapping) -> SourceMapping:
    """`m` with the comments of its original lines that its replacement would drop."""
    if not m.exact or m.original is None or m.replacement is None:
        return m
    original, written = _comments(m.original), _comments(m.replacement)
    if not original or written is None:
        return m
    missing = Counter(original) - Counter(written)
    kept = []
    for c in original:
        if missing[c] > 0:
            missing[c] -= 1
            kept.append(c)
    if not kept:
        return m
    first = m.replacement.splitlines()[0]
    indent = first[:len(first) - len(first.lstrip())]
    return replace(m, replacement="\n".join([*(indent + c for c in kept), m.replacement]))


def leading_comments(replacement: str) -> int:
    """How many lines of `replacement` are comments above its first statement."""
    lines = replacement.splitlines()
    return next((i for i, line in enumerate(lines) if not line.lstrip().startswith("#")),
                len(lines))
