"""Show the swap each `exact` cluster enables as a unified diff.

Reads ``SourceMapping``s (the original text of the range and its replacement);
writes diff text: a ``file:15-17`` header, ``---``/``+++``/``@@`` lines, then
the removed and added lines. On a terminal removed lines are red and added
ones green; piped output carries no colour codes (rich decides from the stream).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ..report.units import short_path
from .source_mapping import SourceMapping

_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def distinct(mappings: Sequence[SourceMapping]) -> list[SourceMapping]:
    """Exact mappings, one per edited range (clusters sharing lines show once)."""
    seen: set[tuple[str | None, int | None]] = set()
    out = []
    for m in mappings:
        if m.exact and (m.file, m.start) not in seen:
            seen.add((m.file, m.start))
            out.append(m)
    return out


def header(m: SourceMapping) -> str:
    path = short_path(m.file or "")
    tail = f"{m.start}" if m.start == m.end else f"{m.start}-{m.end}"
    names = ", ".join(str(i) for i in sorted((m.cluster_index, *m.shared_with)))
    plural = "s" if m.shared_with else ""
    # Another call of the lines runs part of a cluster the edit does not apply (served.py).
    also = "".join(f"; also the call {s.site}, as cluster {s.part.index}'s "
                   f"{' → '.join(s.part.ops)}" for s in m.serves)
    # Written only with the edits that stop reading the value it drops (paired.py).
    needs = "".join(f"; written with cluster {i}'s edit" for i in m.needs)
    return f"{path}:{tail}  cluster{plural} {names}{also}{needs}"


def diff_lines(m: SourceMapping) -> list[str]:
    """The unified diff of one exact mapping, without the `file:line` header."""
    if not m.exact or m.original is None or m.replacement is None:
        raise ValueError(f"cluster {m.cluster_index} has no exact mapping to diff")
    old = m.original.splitlines()
    new = m.replacement.splitlines()
    body = list(difflib.unified_diff(old, new, *_names(m.file or ""), n=0, lineterm=""))
    # difflib numbers hunks from 1; shift them to the file's real line numbers.
    return [_shift_hunk(line, m.start - 1) if line.startswith("@@") else line for line in body]


def _names(file: str) -> tuple[str, str]:
    # git's a/ b/ prefixes for a path under the working folder; a path outside it stays
    # absolute, as plain `diff -u` writes it (`a//tmp/m.py` would name no file).
    path = short_path(file)
    return (path, path) if Path(path).is_absolute() else (f"a/{path}", f"b/{path}")


def text_diff(file: str, old: str, new: str) -> list[str]:
    """The unified diff of a whole file's text, as `--apply` would write it: its edits and
    the import lines it adds at the top (hunks at the file's own line numbers)."""
    return list(difflib.unified_diff(old.splitlines(), new.splitlines(), *_names(file), n=0,
                                     lineterm=""))


def print_text_diff(file: str, old: str, new: str, console: Console) -> None:
    """`text_diff` under a header, coloured as the Source edits are."""
    console.print(Text(f"Changes to {short_path(file)}", style="bold"))
    for line in text_diff(file, old, new):
        console.print(styled(line), soft_wrap=True)


def _shift_hunk(line: str, offset: int) -> str:
    _, old, new, *_ = line.split(" ")

    def shift(part: str) -> str:
        sign, rest = part[0], part[1:]
        start, _, count = rest.partition(",")
        return f"{sign}{int(start) + offset}" + (f",{count}" if count else "")

    return f"@@ {shift(old)} {shift(new)} @@"


def render(mappings: Sequence[SourceMapping]) -> str:
    """All exact diffs as plain text (for files, logs and tests)."""
    blocks = ["\n".join([header(m), *diff_lines(m)]) for m in distinct(mappings)]
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def styled(line: str) -> Text:
    style = next((s for prefix, s in _STYLES if line.startswith(prefix)), "")
    return Text(line, style=style)


def print_diffs(mappings: Sequence[SourceMapping], console: Console,
                skipped: Mapping[int, str] | None = None) -> None:
    """Exact clusters as coloured diffs; pointer clusters as a line saying why not.
    `skipped`: shown edit's cluster → why `--apply` would leave it out (preview.py)."""
    exact = distinct(mappings)
    pointers = [m for m in mappings if not m.exact]
    if not exact and not pointers:
        return
    console.print()
    console.print(Text("Source edits", style="bold"))
    for m in exact:
        console.print()
        console.print(Text(header(m), style="bold"))
        for line in diff_lines(m):
            console.print(styled(line), soft_wrap=True)
        if m.baked:
            console.print(Text("note: built into the kernel (values at analysis; re-run "
                               f"fusion-advisor if they change): {', '.join(m.baked)}",
                               style="dim"), soft_wrap=True)
        if skipped and m.cluster_index in skipped:
            console.print(Text(f"--apply skips this edit: {skipped[m.cluster_index]}",
                               style="dim"), soft_wrap=True)
    if pointers:
        console.print()
    for m in pointers:
        where = m.where.replace(m.file, short_path(m.file), 1) if m.file else m.where
        console.print(Text(f"cluster {m.cluster_index}: pointer to {where}, no diff: "
                           f"{m.reason}"), soft_wrap=True)
