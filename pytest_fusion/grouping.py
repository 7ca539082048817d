"""Repeated module structure: the same cluster in `h.0` … `h.11`, stored and said once.

Reads module paths (``blocks.3.mlp``) and YAML entries (dicts with an ``in`` key);
writes the range form ``blocks.{0..11}.mlp`` (``{0,2,5}`` and ``{0..3,7}`` for gaps)
and the short form messages use (``blocks.0…blocks.11``). ``compact`` merges entries
that differ only in the item of one container (the last numbered segment of ``in``)
and in their per-instance lists; ``expand`` undoes it. Pure functions on plain data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

_RANGE = re.compile(r"^(?P<head>[^{}]*)\{(?P<spec>[0-9.,]+)\}(?P<tail>[^{}]*)$")


def split_item(path: str) -> tuple[str, int, str] | None:
    """(`blocks.`, 3, `.mlp`) for `blocks.3.mlp`: the last numbered segment; None if none."""
    parts = path.split(".")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i].isdigit():
            head = ".".join(parts[:i]) + ("." if i else "")
            tail = ("." if i < len(parts) - 1 else "") + ".".join(parts[i + 1:])
            return head, int(parts[i]), tail
    return None


def pattern(path: str) -> str:
    """`blocks.*.mlp`: the path with its last numbered segment as `*` (itself if none)."""
    found = split_item(path)
    return path if found is None else f"{found[0]}*{found[2]}"


def _runs(numbers: Sequence[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def range_form(paths: Sequence[str]) -> str:
    """`h.{0..11}` for h.0 … h.11 (paths that share a pattern); one path stays as it is."""
    if len(paths) == 1:
        return paths[0]
    head, _, tail = split_item(paths[0])  # type: ignore[misc]
    spec = ",".join(f"{a}..{b}" if b > a + 1 else f"{a},{b}" if b > a else f"{a}"
                    for a, b in _runs([split_item(p)[1] for p in paths]))  # type: ignore[index]
    return f"{head}{{{spec}}}{tail}"


def expand_range(text: str) -> list[str]:
    """The paths a range form names, in ascending order; raises ValueError if malformed."""
    m = _RANGE.match(text)
    if m is None:
        if "{" in text or "}" in text:
            raise ValueError(f"`in: {text}` is not a module path or a range like h.{{0..11}}")
        return [text]
    numbers: list[int] = []
    for part in m["spec"].split(","):
        a, sep, b = part.partition("..")
        if not a.isdigit() or (sep and not b.isdigit()):
            raise ValueError(f"`in: {text}` has a malformed range `{part}`")
        numbers += range(int(a), int(b) + 1) if sep else [int(a)]
    return [f"{m['head']}{n}{m['tail']}" for n in sorted(set(numbers))]


def short_form(paths: Sequence[str]) -> str:
    """`h.0…h.11 (×12)` for messages; gaps as `h.0…h.3, h.7 (×5)`; one path as itself."""
    if len(paths) == 1:
        return paths[0]
    head, _, tail = split_item(paths[0])  # type: ignore[misc]
    runs = _runs([split_item(p)[1] for p in paths])  # type: ignore[index]
    name = f"{head}{{}}{tail}".format
    text = ", ".join(name(a) if a == b else f"{name(a)}…{name(b)}" for a, b in runs)
    return f"{text} (×{len(paths)})"


def _item(entry: dict[str, Any]) -> int:
    found = split_item(entry["in"])
    return found[1] if found else 0


def compact(entries: Iterable[dict[str, Any]], per_instance: Sequence[str]
            ) -> list[dict[str, Any]]:
    """Merge entries equal but for `in` (same pattern) and the `per_instance` lists.

    Groups keep the position of their first entry; instances are in item order, and
    each per-instance key holds one list per instance.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    for i, e in enumerate(entries):
        if "in" in e and split_item(e["in"]) is not None:
            rest = {k: v for k, v in e.items() if k not in per_instance and k != "in"}
            key = json.dumps([pattern(e["in"]), rest], sort_keys=True, default=str)
        else:
            key = f"#{i}"  # no container item to vary: never merged
        groups.setdefault(key, []).append(e)
    out = []
    for members in groups.values():
        if len(members) == 1:
            out.append(members[0])
            continue
        members = sorted(members, key=_item)
        merged = dict(members[0])
        merged["in"] = range_form([m["in"] for m in members])
        for k in per_instance:
            if k in merged:
                merged[k] = [m[k] for m in members]
        out.append(merged)
    return out


def expand(entry: dict[str, Any], per_instance: Sequence[str]) -> list[dict[str, Any]]:
    """The entries one (possibly merged) entry stands for; ValueError when inconsistent."""
    if not isinstance(entry.get("in"), str):
        return [entry]
    paths = expand_range(entry["in"])
    if len(paths) == 1 and paths[0] == entry["in"]:
        return [entry]
    out = [dict(entry, **{"in": p}) for p in paths]
    for k in per_instance:
        if k not in entry:
            continue
        lists = entry[k]
        if not (isinstance(lists, list) and len(lists) == len(paths)
                and all(isinstance(x, list) for x in lists)):
            raise ValueError(f"`{k}` must hold one list per module in `in` ({len(paths)})")
        for e, x in zip(out, lists, strict=True):
            e[k] = x
    return out
