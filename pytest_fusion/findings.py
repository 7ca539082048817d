"""Findings of a comparison, and how they become the messages a reviewer reads.

Reads ``Finding``s (a bucket, a text with a placeholder where the module goes, the
module path); returns the message lists. Findings that say the same thing about
the items of one repeated container (`h.0` … `h.11`) become one message naming
them all: "`add → layer_norm` in h.0…h.11 (×12) at … no longer fuses: …". Labels
that carry the item (`self.h.3.fc`) or a node counter (`relu_3`) are read as the
same when grouping, and shown with `*` / without the counter in the grouped text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .grouping import pattern, short_form, split_item

if TYPE_CHECKING:
    from .snapshot import ClusterRec, RejectionRec

LOC = "\x00"  # where " in <module>" goes in a finding's text
BUCKETS = ("regressions", "improvements", "changes", "notes")  # notes: rejections gone
_COUNTER = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*?)_\d+`")  # `relu_3`: an FX node name


@dataclass(frozen=True)
class Finding:
    bucket: str  # one of BUCKETS
    text: str  # holds LOC once, where the module path goes
    module: str | None  # None or "": the model itself, or not recorded


def at(rec: ClusterRec | RejectionRec) -> str:
    """` at file:lines` after the module placeholder."""
    return f"{LOC} at {rec.lines}"


def located(text: str, module: str | None, times: int = 1) -> str:
    """The text with its place filled: ` in h.3` (nothing for the model itself), and how
    many clusters it is about when more than one (` (×4)`)."""
    return text.replace(LOC, (f" in {module}" if module else "") +
                        (f" (×{times})" if times > 1 else ""))


def _generic(f: Finding) -> str | None:
    """The text with the item of its container made generic; None if it has none."""
    if not f.module or split_item(f.module) is None:
        return None
    star = pattern(f.module)
    # Module paths appear in messages only inside labels (`self.h.3.fc`); a bare "0" of a
    # Sequential's child must not rewrite numbers elsewhere in the text.
    text = re.sub(rf"(?<=`self\.){re.escape(f.module)}(?=[.`])", star, f.text)
    # The same label as the source indexes it: `self.h[3].fc` is `self.h[*].fc`.
    from fusion_core.names import written  # here: a run without fusion tests loads none

    spelled, item = written(f"self.{f.module}"), f"[{split_item(f.module)[1]}]"  # type: ignore[index]
    cut = spelled.rfind(item)
    if cut > 0:
        text = re.sub(rf"`{re.escape(spelled)}(?=[.`\[])",
                      f"`{spelled[:cut]}[*]{spelled[cut + len(item):]}", text)
    return _COUNTER.sub(r"`\1`", text)


def messages(findings: Iterable[Finding]) -> dict[str, tuple[str, ...]]:
    """Bucket -> messages, one per group of findings, in order of first appearance."""
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        generic = _generic(f)
        # The same words about the same module (the identical clusters a loop makes, told
        # apart only by their order) are one message.
        key = (f.bucket, generic) if generic is not None else (f.bucket, f.text, f.module)
        groups.setdefault(key, []).append(f)
    out: dict[str, list[str]] = {b: [] for b in BUCKETS}
    for (bucket, generic, *_), members in groups.items():
        modules = list(dict.fromkeys(m.module for m in members))
        if len(modules) == 1:
            said = Counter(m.text for m in members)
            out[bucket] += [located(text, modules[0], n) for text, n in said.items()]
        else:
            paths = sorted(modules, key=lambda p: split_item(p)[1])  # type: ignore[arg-type,index]
            out[bucket].append(str(generic).replace(LOC, f" in {short_form(paths)}"))
    return {b: tuple(v) for b, v in out.items()}
