"""A layered (Sugiyama-style) layout of a data-flow graph, top to bottom, in pure Python.

Reads drawable nodes (in topological order, each with a width and a *band*) and the edges
between them; returns each node's x and layer, each edge's waypoints and the edges drawn as
stubs. Bands are horizontal strips that never share a layer: one per repeated block (a
transformer layer) and one per stretch of graph between blocks, so the page can hide a band
and slide the ones below it up without laying the graph out again.

Steps: longest-path layering inside each band (nodes with no inputs, and recompute copies,
sink to just above their first consumer), one dummy node per layer an edge crosses, a few
barycenter sweeps to cut crossings (a cluster's members kept side by side in each layer),
then x positions: each sweep moves every node towards the mean x of its neighbours, as close
as the order and spacing allow (isotonic regression by pool-adjacent-violators). Edges that
would skip a whole band or span more than ``MAX_SPAN`` layers become stubs (labelled at both
ends) instead of long lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GAP = 14.0  # horizontal space between neighbours in a layer
DUMMY_WIDTH = 6.0
SWEEPS = 4  # barycenter sweep pairs (down + up); more rarely helps on model graphs
MAX_SPAN = 60  # layers; a longer edge is drawn as a stub


@dataclass(frozen=True)
class LayoutNode:
    name: str
    width: float
    band: int
    group: int = -1  # members of one group (a cluster) stay adjacent within a layer
    # Sinks to just above its first consumer in its band: a node with no drawn inputs, or
    # a recompute copy, which belongs beside the op reading it, not beside its inputs.
    sink: bool = False


@dataclass(frozen=True)
class Layout:
    x: dict[str, float]  # centre
    layer: dict[str, int]  # global layer index (bands are consecutive layer ranges)
    band_start: tuple[int, ...]  # first layer of each band
    band_depth: tuple[int, ...]  # layers in each band
    edges: tuple[tuple[str, str, tuple[tuple[float, int], ...]], ...]  # (u, v, waypoints)
    stubs: tuple[tuple[str, str], ...]
    width: float


def _layers(nodes: Sequence[LayoutNode], preds: dict[str, list[str]],
            succs: dict[str, list[str]]) -> dict[str, int]:
    """Band-local longest-path layers; sinking nodes move down towards their consumers."""
    band = {n.name: n.band for n in nodes}
    local: dict[str, int] = {}
    for n in nodes:
        inside = [local[p] for p in preds[n.name] if band[p] == n.band]
        local[n.name] = max(inside) + 1 if inside else 0
    for n in reversed(nodes):
        if n.sink:
            below = [local[s] for s in succs[n.name] if band[s] == n.band]
            if below:
                local[n.name] = max(local[n.name], min(below) - 1)
    return local


def _isotonic(target: list[float], weight: list[float]) -> list[float]:
    """Non-decreasing values closest to `target` in weighted least squares (PAV)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for t, w in zip(target, weight, strict=True):
        blocks.append([t, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    out: list[float] = []
    for mean, _, count in blocks:
        out += [mean] * int(count)
    return out


class _Builder:
    def __init__(self, nodes: Sequence[LayoutNode], edges: Sequence[tuple[str, str]]):
        self.nodes = list(nodes)
        self.width = {n.name: n.width for n in nodes}
        self.group = {n.name: n.group for n in nodes}
        self.band = {n.name: n.band for n in nodes}
        self.preds: dict[str, list[str]] = {n.name: [] for n in nodes}
        self.succs: dict[str, list[str]] = {n.name: [] for n in nodes}
        kept = []
        for u, v in dict.fromkeys(edges):
            if u in self.width and v in self.width and u != v:
                self.preds[v].append(u)
                self.succs[u].append(v)
                kept.append((u, v))
        self.edges = kept

    def run(self) -> Layout:
        local = _layers(self.nodes, self.preds, self.succs)
        n_bands = max((n.band for n in self.nodes), default=-1) + 1
        depth = [0] * n_bands
        for n in self.nodes:
            depth[n.band] = max(depth[n.band], local[n.name] + 1)
        start = [0] * n_bands
        for b in range(1, n_bands):
            start[b] = start[b - 1] + depth[b - 1]
        layer = {n.name: start[n.band] + local[n.name] for n in self.nodes}
        chains, stubs = self._chains(layer)
        order = self._order(layer, chains)
        x = self._positions(order, chains)
        left = min(x[v] - self.width.get(v, DUMMY_WIDTH) / 2 for v in x) if x else 0.0
        right = max(x[v] + self.width.get(v, DUMMY_WIDTH) / 2 for v in x) if x else 0.0
        x = {v: round(p - left, 1) for v, p in x.items()}
        dummy_layer = {d: layer[u] + i + 1 for (u, _), ds in chains.items()
                       for i, d in enumerate(ds)}
        edges = tuple((u, v, tuple((x[d], dummy_layer[d]) for d in chains[(u, v)]))
                      for u, v in self.edges if (u, v) in chains)
        return Layout(x={n.name: x[n.name] for n in self.nodes}, layer=layer,
                      band_start=tuple(start), band_depth=tuple(depth), edges=edges,
                      stubs=tuple(stubs), width=round(right - left, 1))

    def _chains(self, layer: dict[str, int]):
        """Dummy names per drawn edge (one per layer crossed), and the stub edges."""
        chains: dict[tuple[str, str], list[str]] = {}
        stubs = []
        for u, v in self.edges:
            span = layer[v] - layer[u]
            if span <= 0 or self.band[v] - self.band[u] >= 2 or span > MAX_SPAN:
                stubs.append((u, v))
                continue
            chains[(u, v)] = [f"\0{u}\0{v}\0{i}" for i in range(1, span)]
        return chains, stubs

    def _order(self, layer: dict[str, int], chains) -> list[list[str]]:
        n_layers = max(layer.values(), default=-1) + 1
        order: list[list[str]] = [[] for _ in range(n_layers)]
        up: dict[str, list[str]] = {}
        down: dict[str, list[str]] = {}
        for n in self.nodes:
            order[layer[n.name]].append(n.name)
        for (u, v), ds in chains.items():
            path = [u, *ds, v]
            for a, b in zip(path, path[1:], strict=False):
                down.setdefault(a, []).append(b)
                up.setdefault(b, []).append(a)
            for i, d in enumerate(ds):
                order[layer[u] + i + 1].append(d)
        for _ in range(SWEEPS):
            self._sweep(order, range(1, n_layers), up)
            self._sweep(order, range(n_layers - 2, -1, -1), down)
        self._sweep(order, range(1, n_layers), up)
        for row in order:  # a cluster's members side by side, where its first member is
            first: dict[int, int] = {}
            for i, v in enumerate(row):
                g = self.group.get(v, -1)
                if g >= 0:
                    first.setdefault(g, i)
            rank = {v: (first.get(self.group.get(v, -1), i), i) for i, v in enumerate(row)}
            row.sort(key=rank.__getitem__)
        self.up, self.down = up, down
        return order

    @staticmethod
    def _sweep(order: list[list[str]], layers: range, nbrs: dict[str, list[str]]) -> None:
        for li in layers:
            ref = order[li - 1] if layers.step > 0 else order[li + 1]
            pos = {v: i for i, v in enumerate(ref)}
            row = order[li]
            scale = len(ref) / max(len(row), 1)  # a node with no neighbour keeps its place
            keys = {}
            for i, v in enumerate(row):
                ps = [pos[p] for p in nbrs.get(v, ()) if p in pos]
                keys[v] = sum(ps) / len(ps) if ps else i * scale
            order[li] = sorted(row, key=keys.__getitem__)

    def _positions(self, order: list[list[str]], chains) -> dict[str, float]:
        width = dict(self.width)
        for ds in chains.values():
            width.update(dict.fromkeys(ds, DUMMY_WIDTH))
        x: dict[str, float] = {}
        for row in order:  # packed from the left to start
            cursor = 0.0
            for v in row:
                x[v] = cursor + width[v] / 2
                cursor += width[v] + GAP
        for _ in range(SWEEPS):
            for nbrs, rows in ((self.up, order[1:]), (self.down, order[-2::-1])):
                for row in rows:
                    self._place(row, x, width, nbrs)
        return x

    @staticmethod
    def _place(row: list[str], x: dict[str, float], width: dict[str, float],
               nbrs: dict[str, list[str]]) -> None:
        """Move a layer towards its neighbours' mean x, keeping its order and spacing."""
        if not row:
            return
        offset, offsets = 0.0, []
        for i, v in enumerate(row):
            if i:
                offset += (width[row[i - 1]] + width[v]) / 2 + GAP
            offsets.append(offset)
        target, weight = [], []
        for v, off in zip(row, offsets, strict=True):
            ns = nbrs.get(v, ())
            want = sum(x[n] for n in ns) / len(ns) if ns else x[v]
            target.append(want - off)
            # Real nodes pull harder than edge bends, so long edges give way to chains.
            weight.append((1.0 if ns else 0.2) * (1.0 if v[0] != "\0" else 0.5))
        for v, y, off in zip(row, _isotonic(target, weight), offsets, strict=True):
            x[v] = y + off


def layout(nodes: Sequence[LayoutNode], edges: Sequence[tuple[str, str]]) -> Layout:
    """Lay `nodes` (topological order, bands in order) out; see the module docstring."""
    return _Builder(nodes, edges).run()
