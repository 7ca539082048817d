"""What the analysis leaves unfused without a candidate group to reject: ops whose sizes
come from a tensor's values, and an enabled autocast block torch.export keeps as one call.
The console prints each as a "Left unfused" header line; `--json` carries the same notes
(``left_unfused``), with where they are, so a tool reading the JSON learns of them too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..ir import data_dependent, inline_blocks
from ..ir.graph import FusionGraph, SourceLoc


@dataclass(frozen=True)
class LeftUnfused:
    kind: str  # "sized-by-value" or "autocast-block"
    source: SourceLoc | None  # the first such op's line
    count: int  # how many ops (or blocks) the note covers
    note: str  # the console's line


def left_unfused(g: FusionGraph, path: Callable[[str], str] = str) -> list[LeftUnfused]:
    """The notes, in the console header's order; `path` shortens file names in `note`."""
    out = []
    if (note := data_dependent.describe(g, path)) is not None:
        nodes = data_dependent.unsized_nodes(g)
        out.append(LeftUnfused("sized-by-value", nodes[0].source, len(nodes), note))
    if (note := inline_blocks.describe_kept(g, path)) is not None:
        kept = inline_blocks.kept_blocks(g)
        out.append(LeftUnfused("autocast-block", kept[0].source, len(kept), note))
    return out


def left_unfused_dict(item: LeftUnfused) -> dict[str, Any]:
    src = item.source
    return {"kind": item.kind, "file": src.file if src else None,
            "line": src.line if src else None, "code": src.code if src else None,
            "count": item.count, "note": item.note}
