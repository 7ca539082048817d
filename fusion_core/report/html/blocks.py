"""Repeated blocks (a transformer's layers) and the horizontal bands the page draws.

Reads the drawn nodes in topological order with each one's module path (``blocks.3.attn``,
``transformer.h.11.mlp``, from FX's or export's ``nn_module_stack``); writes one band per
block instance and per stretch of graph between blocks, and the groups of consecutive
instances of one container (``h.0`` … ``h.11``) whose op sequences are identical, which the
page can collapse into their first instance marked ×N. Without module paths, the longest
stretch of the graph that repeats one op sequence (four ops or more) gives the blocks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...names import module_written

# The outermost `<container>.<index>` of a module path: `blocks.3` in `blocks.3.attn.proj`.
_INDEXED = re.compile(r"^(?P<prefix>(?:.*?\.)?[A-Za-z_][\w]*)\.(?P<index>\d+)(?=\.|$)")


@dataclass(frozen=True)
class Band:
    label: str  # `self.blocks[3]`, or `` for a stretch between blocks
    nodes: tuple[str, ...]
    group: int = -1  # index into `Bands.groups`, -1 when not part of a repeated run


@dataclass(frozen=True)
class Group:
    label: str  # `self.blocks[0–11]`
    bands: tuple[int, ...]  # consecutive band indices, the first one stays shown collapsed
    # Node of each hidden instance -> its counterpart in the first instance (same position).
    counterpart: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Bands:
    bands: tuple[Band, ...]
    groups: tuple[Group, ...]

    def band_of(self) -> dict[str, int]:
        return {n: i for i, b in enumerate(self.bands) for n in b.nodes}


def block_key(module_path: str) -> tuple[str, int] | None:
    """(`blocks`, 3) for `blocks.3.attn`; None for a path with no indexed container."""
    m = _INDEXED.match(module_path.removeprefix("L['self'].").removeprefix("self."))
    return (m["prefix"], int(m["index"])) if m else None


MIN_PERIOD = 4  # ops; shorter repeats (view → transpose pairs) are not blocks


def repeated_run(ops: Sequence[str]) -> tuple[int, int, int] | None:
    """(start, period, count) of the longest stretch made of one op sequence repeated, or
    None. Among runs covering as many ops, the shortest period wins (12 layers, not 6
    pairs of layers)."""
    best: tuple[int, int, int] | None = None
    n = len(ops)
    for period in range(MIN_PERIOD, n // 2 + 1):
        i = 0
        while i + period < n:
            j = i
            while j + period < n and ops[j] == ops[j + period]:
                j += 1
            count = (j - i) // period + 1
            if count >= 2 and (best is None or count * period > best[1] * best[2]):
                best = (i, period, count)
            i = j + 1
    return best


def _sequence_keys(nodes: Sequence[str], ops: dict[str, str]) -> dict[str, tuple[str, int]]:
    """Without module paths: blocks from the longest repeated op sequence."""
    run = repeated_run([ops[n] for n in nodes])
    if run is None:
        return {}
    start, period, count = run
    return {nodes[start + k * period + i]: ("repeat", k)
            for k in range(count) for i in range(period)}


def find_bands(nodes: Sequence[str], paths: dict[str, str], ops: dict[str, str]) -> Bands:
    """Bands in execution order; `paths`: node -> outermost module path ('' when none)."""
    keys = {n: block_key(paths.get(n, "")) for n in nodes}
    # module paths are labelled as the user indexes them (`self.blocks[3]`); repeats found
    # without them keep their made-up `repeat.0`
    said = module_written if any(keys.values()) else (lambda p: p)
    if not any(keys.values()):
        keys.update(_sequence_keys(nodes, ops))
    members: list[list[str]] = []
    labels: list[tuple[str, int] | None] = []
    band_of_key: dict[tuple[str, int], int] = {}
    for i, n in enumerate(nodes):
        key = keys[n]
        if key is None:
            # Between two nodes of the same block it stays in that block's band.
            prev = labels[-1] if labels else None
            nxt = next((keys[m] for m in nodes[i + 1:] if keys[m] is not None), None)
            if prev is not None and prev == nxt:
                members[-1].append(n)
                continue
            if prev is not None or not members:
                members.append([])
                labels.append(None)
            members[-1].append(n)
        elif key in band_of_key:
            members[band_of_key[key]].append(n)
        else:
            band_of_key[key] = len(members)
            members.append([n])
            labels.append(key)
    groups = _groups(members, labels, ops, said)
    in_group = {b: gi for gi, g in enumerate(groups) for b in g.bands}
    bands = tuple(Band(label=said(f"{k[0]}.{k[1]}") if k else "", nodes=tuple(ms),
                       group=in_group.get(i, -1))
                  for i, (ms, k) in enumerate(zip(members, labels, strict=True)))
    return Bands(bands=bands, groups=tuple(groups))


def _groups(members: list[list[str]], labels: list[tuple[str, int] | None],
            ops: dict[str, str], said: Callable[[str], str]) -> list[Group]:
    """Runs of consecutive bands `p.i`, `p.i+1`, … with the same op sequence; `said` spells
    a band's path (`self.blocks[0]`), and so the run's: `self.blocks[0–11]`."""
    groups: list[Group] = []
    i = 0
    while i < len(members):
        j = i + 1
        sig = tuple(ops[n] for n in members[i])
        while (j < len(members) and labels[i] is not None and labels[j] is not None
               and labels[j][0] == labels[i][0] and labels[j][1] == labels[j - 1][1] + 1
               and tuple(ops[n] for n in members[j]) == sig):
            j += 1
        if j - i >= 2:
            first = members[i]
            pairs = tuple((n, first[k]) for b in range(i + 1, j)
                          for k, n in enumerate(members[b]))
            prefix, lo = labels[i]  # type: ignore[misc]
            first_label = said(f"{prefix}.{lo}")  # `p.lo` or `self.p[lo]`: `–hi` goes inside
            hi = labels[j - 1][1]  # type: ignore[index]
            label = (first_label[:-1] + f"–{hi}]" if first_label.endswith("]")
                     else f"{first_label}–{hi}")
            groups.append(Group(label=label,
                                bands=tuple(range(i, j)), counterpart=pairs))
        i = j
    return groups
