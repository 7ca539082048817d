"""The baseline data model: what one test's fusion result looks like in memory.

Reads an ``Analysis`` (and optional measurements) and the rootdir; writes a
``Snapshot`` of plain values (``schema.py`` turns it into YAML data and back).
A cluster is identified by what it is: its ops, the module path and function it
runs in, and its ordinal among identical clusters there (``ClusterId``). Source
lines are kept as information only, so an edit elsewhere in the file does not
change any identity; timings are keyed by the identity. Paths are
rootdir-relative, so a baseline made on one checkout applies to every other.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .construction import Construction

MAX_NAME = 120
# What a baseline describes: the device the model is analysed for (Inductor lowers some ops
# differently there), not where the test's tensors live. Baselines without it are "cpu".
TARGETS = ("cpu", "cuda")


class BaselineError(Exception):
    """A baseline file that cannot be used; `str()` is the one line shown to the user."""


@dataclass(frozen=True)
class ClusterId:
    """What a cluster is, independent of line numbers."""

    ops: tuple[str, ...]
    module: str | None  # "blocks.3.mlp"; "" for the model itself; None: not recorded (v1)
    function: str | None  # "forward"; None: not recorded (v1)
    nth: int = 0  # ordinal among clusters with the same ops, module and function


@dataclass(frozen=True)
class ClusterRec:
    ops: tuple[str, ...]
    lines: str  # "examples/example_net.py:15-17" or "?" when unknown; information only
    category: str
    nodes: tuple[str, ...]
    unfused_bytes: int
    fused_bytes: int
    kernel: str | None = None  # "elementwise" / "reduction" / "reduction (looped)"; None: none
    kernel_error: str = ""  # why code generation failed, when it did
    module: str | None = None  # see ClusterId
    function: str | None = None
    nth: int = 0
    # Where each op runs (`blocks.0.attn:softmax#0`, parallel to `nodes`): how the ops are
    # found again after an edit renamed the nodes. () in baselines written before.
    sites: tuple[str, ...] = ()

    @property
    def chain(self) -> str:
        return " → ".join(self.ops)

    @property
    def saved_bytes(self) -> int:
        return self.unfused_bytes - self.fused_bytes

    @property
    def ident(self) -> ClusterId:
        return ClusterId(self.ops, self.module, self.function, self.nth)


@dataclass(frozen=True)
class RejectionRec:
    check: str
    ops: tuple[str, ...]
    lines: str
    nodes: tuple[str, ...]
    culprits: tuple[str, ...]
    reason: str
    module: str | None = None  # as for ClusterRec; nth counts equal check, ops and scope
    function: str | None = None
    nth: int = 0
    sites: tuple[str, ...] = ()  # as for ClusterRec

    @property
    def chain(self) -> str:
        return " → ".join(self.ops) if len(self.ops) <= 4 else (
            " → ".join(self.ops[:3]) + f" → … ({len(self.ops)} ops)")

    @property
    def ident(self) -> tuple:
        return (self.check, self.ops, self.module, self.function, self.nth)


@dataclass(frozen=True)
class BarrierRec:
    """An op the analyzer cannot fuse through, between compute ops (never stored)."""

    node: str
    op: str  # registry op, module class ("Linear"), or "opaque" for an unknown call
    target: str  # what the user wrote: "torch.roll", "F.relu", "self.proj"
    inplace: bool
    lines: str
    before: tuple[tuple[str, str], ...]  # (node, op) of the compute values reaching it
    after: tuple[tuple[str, str], ...]  # (node, op) of the compute ops reading its result


@dataclass(frozen=True)
class OpRec:
    """One compute, opaque or in-place op of the current graph (never stored): how a
    baseline's ops are found, and named, in the model as it is now."""

    node: str
    op: str  # registry op, module class ("Linear") or "opaque"
    site: str  # see ClusterRec.sites
    target: str  # what the user wrote: "torch.roll", "self.proj", "F.gelu"
    kind: str  # "compute", "opaque", "inplace" or "view" (a view has no site)
    module: str
    line: str  # "blocks.py:44" or "?"
    synthetic: str = ""  # a node the user never wrote: what it stands for ("bias of self.fc")
    reads: tuple[str, ...] = ()  # the ops whose values it reads (through views), by node
    feeds: tuple[str, ...] = ()  # a view's: the ops reading its value (through views)

    @property
    def spelled(self) -> str:
        """The op as the user wrote it."""
        from fusion_core.names import written  # here: a run without fusion tests loads none

        return self.synthetic or written(self.target) or self.op


@dataclass(frozen=True)
class Totals:
    """The whole model with its clusters fused (``fusion_core.model_totals``)."""

    kernels: int
    traffic_bytes: int


@dataclass(frozen=True)
class ClusterTiming:
    cluster: ClusterId
    kernel_us: tuple[float, ...]
    eager_us: tuple[float, ...] = ()
    gbps: float | None = None
    regime: str | None = None
    # Host-timed (launch included) beside device-timed figures: informative, never judged.
    kernel_host_us: tuple[float, ...] = ()
    eager_host_us: tuple[float, ...] = ()


# How the judged figures were timed: CUDA-graph replays ("device", the kernels' own time) or
# a host clock around each call ("host", launch included). Baselines before it: "host".
CLOCKS = ("device", "host")


@dataclass(frozen=True)
class Measured:
    """Timings on one hardware key; samples are repeated runs (lower is better)."""

    clusters: tuple[ClusterTiming, ...] = ()
    model_us: tuple[float, ...] = ()  # the patched model
    model_eager_us: tuple[float, ...] = ()
    date: str = ""
    clock: str = "host"
    # The input shapes the timings were taken at ("64×1024 float32", as Snapshot.inputs);
    # () in memory: the analysis inputs (the YAML always names them).
    inputs: tuple[str, ...] = ()
    model_host_us: tuple[float, ...] = ()
    model_eager_host_us: tuple[float, ...] = ()
    # GPU kernels one forward of the patched model launches (the profiler's count), for the
    # report's host-bound reason; this run's only, never stored in a baseline
    model_launches: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Snapshot:
    test: str
    model: str
    inputs: tuple[str, ...]  # "64×1024 float32"
    clusters: tuple[ClusterRec, ...]
    rejections: tuple[RejectionRec, ...]
    provenance: dict[str, str] = field(default_factory=dict, compare=False)
    measured: dict[str, Measured] = field(default_factory=dict)
    frontend: str = ""  # "fx" or "export"; "" in baselines written before it was recorded
    # What separates compute ops in the current graph (explains a lost cluster); not stored.
    barriers: tuple[BarrierRec, ...] = field(default=(), compare=False)
    # Every op of the current graph by site (finds a baseline's ops again); not stored.
    op_index: tuple[OpRec, ...] = field(default=(), compare=False)
    totals: Totals | None = None  # None in baselines written before it was recorded
    # torch.compile's record per backend ("cpu-inductor"), as CompiledRecord.to_dict() data;
    # {} when not taken (opt-in) and in baselines before schema 4.
    compiled: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Why `auto` captured through torch.export rather than FX ("" otherwise); not stored.
    fallback: str = field(default="", compare=False)

    @property
    def ops(self) -> tuple[OpRec, ...]:
        """The op index; a snapshot without one (read back from YAML, made by hand) knows
        the ops its records name, at their records' lines."""
        if self.op_index:
            return self.op_index
        seen: dict[str, OpRec] = {}
        for rec in (*self.clusters, *self.rejections):
            sites = rec.sites or ("",) * len(rec.nodes)
            for node, op, site in zip(rec.nodes, rec.ops, sites, strict=False):
                seen.setdefault(node, OpRec(node, op, site, op, "compute", rec.module or "",
                                            rec.lines))
        for x in self.barriers:
            seen[x.node] = OpRec(x.node, x.op, "", x.target,
                                 "inplace" if x.inplace else "opaque", "", x.lines)
            for node, op in (*x.before, *x.after):
                seen.setdefault(node, OpRec(node, op, "", op, "compute", "", "?"))
        return tuple(seen.values())

    @property
    def by_site(self) -> dict[str, OpRec]:
        return {o.site: o for o in self.ops if o.site}
    target: str = "cpu"  # one of TARGETS: the device the analysis describes
    built: Construction | None = None  # None: passed built, or not recorded (never compared)

    @property
    def kernels(self) -> int:
        return sum(c.kernel is not None for c in self.clusters)

    @property
    def saved_bytes(self) -> int:
        return sum(c.saved_bytes for c in self.clusters)

    @property
    def unfused_bytes(self) -> int:
        return sum(c.unfused_bytes for c in self.clusters)


def numbered(recs: list, key) -> list:
    """`recs` with `nth` set: the ordinal of each among those with the same `key`."""
    seen: Counter = Counter()
    out = []
    for r in recs:
        k = key(r)
        out.append(replace(r, nth=seen[k]))
        seen[k] += 1
    return out


# ---------------------------------------------------------------- from an Analysis

def relative_file(path: str, rootdir: Path) -> str:
    """A source path relative to the rootdir (POSIX), so baselines are portable."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    p, root = p.resolve(), rootdir.resolve()
    # An installed library (a venv inside the project, as CI makes) is not project code.
    if p.is_relative_to(root) and not {"site-packages", "dist-packages"} & set(p.parts):
        return p.relative_to(root).as_posix()
    return "…/" + "/".join(p.parts[-2:])  # outside the project: keep it short and stable


def line_runs(lines: Iterable[int]) -> str:
    """`15-16, 29` for lines 15, 16 and 29."""
    runs: list[list[int]] = []
    for n in sorted(set(lines)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def where(graph: Any, names: Iterable[str], rootdir: Path) -> str:
    """`blocks.py:15-16, 29`: the lines the nodes come from, in the file most of them do
    (a span from 15 to 29 would quote the class between); "?" when none has a source."""
    locs = [graph[n].source for n in names if graph[n].source is not None]
    if not locs:
        return "?"
    file = Counter(loc.file for loc in locs).most_common(1)[0][0]
    return f"{relative_file(file, rootdir)}:{line_runs(x.line for x in locs if x.file == file)}"


def from_analysis(analysis: Any, test: str, rootdir: Path,
                  measured: dict[str, Measured] | None = None,
                  provenance: dict[str, str] | None = None,
                  kernels: dict[int, tuple[str | None, str]] | None = None,
                  target: str = "cpu") -> Snapshot:
    """`kernels`: cluster index -> (kernel kind or None, lowering error); `target`: the
    device the analysis was made for.

    Clusters keep the analysis' order, so `clusters[c.index]` is cluster `c`.
    """
    import fusion_core

    kernels = kernels or {}
    graph = analysis.graph
    sites = fusion_core.op_sites(graph)
    clusters = []
    for c in analysis.clusters:
        scope = fusion_core.scope_of(graph, c.nodes)
        clusters.append(ClusterRec(
            ops=tuple(c.ops), lines=where(graph, c.nodes, rootdir), category=c.category,
            nodes=tuple(c.nodes), unfused_bytes=int(c.traffic.unfused_bytes),
            fused_bytes=int(c.traffic.fused_bytes),
            kernel=kernels.get(c.index, (None, ""))[0],
            kernel_error=kernels.get(c.index, (None, ""))[1],
            module=scope.module, function=scope.function,
            sites=tuple(sites.get(n, "") for n in c.nodes)))
    rejections = []
    for r in analysis.rejections:
        scope = fusion_core.scope_of(graph, r.nodes)
        rejections.append(RejectionRec(
            check=r.check, ops=tuple(r.ops), lines=where(graph, r.nodes, rootdir),
            nodes=tuple(r.nodes), culprits=tuple(r.culprits), reason=r.reason,
            module=scope.module, function=scope.function,
            sites=tuple(sites.get(n, "") for n in r.nodes)))
    barriers = tuple(BarrierRec(
        node=b.node, op=b.op, target=b.target or b.op, inplace=b.inplace,
        lines=where(graph, [b.node], rootdir),
        before=tuple((n, graph[n].op) for n in b.before),
        after=tuple((n, graph[n].op) for n in b.after))
        for b in fusion_core.find_barriers(graph, analysis.clusters))
    totals = fusion_core.model_totals(graph, analysis.clusters)
    return Snapshot(test=test, model=analysis.model_name,
                    inputs=tuple(str(s) for s in analysis.inputs),
                    clusters=tuple(numbered(clusters, lambda c: c.ident)),
                    rejections=tuple(numbered(rejections, lambda r: r.ident)),
                    provenance=dict(provenance or {}), measured=dict(measured or {}),
                    frontend=graph.frontend, target=target, barriers=barriers,
                    # fusion_core names the file as imported: shown rootdir-relative here.
                    fallback=getattr(analysis, "capture_fallback", "").replace(
                        f"{rootdir.resolve()}/", ""),
                    totals=Totals(totals.kernels, totals.traffic_bytes),
                    op_index=op_index(graph, sites, rootdir,
                                      fusion_core.split_biases(analysis.graph_module)))


_KINDS = {"opaque": "opaque", "inplace": "inplace", "view": "view"}


def op_index(graph: Any, sites: dict[str, str], rootdir: Path, biases: dict[str, str]
             ) -> tuple[OpRec, ...]:
    """Every op with a site, and every view (site ""), in graph order. `biases`: split-off
    bias adds -> their layer (`fusion_core.split_biases`)."""
    feeds: dict[str, list[str]] = {}
    reads = {n.name: _reads(graph, n.name, sites, feeds) for n in graph.nodes
             if n.name in sites or n.kind.value == "view"}
    return tuple(OpRec(node=n.name, op=n.op, site=sites.get(n.name, ""), target=n.target,
                       kind=_KINDS.get(n.kind.value, "compute"), module=n.module,
                       line=where(graph, [n.name], rootdir),
                       synthetic=f"bias of {biases[n.name]}" if n.name in biases else "",
                       reads=reads[n.name], feeds=tuple(feeds.get(n.name, ())))
                 for n in graph.nodes if n.name in reads)


def _reads(graph: Any, name: str, sites: dict[str, str], feeds: dict[str, list[str]]
           ) -> tuple[str, ...]:
    """The ops (nodes with a site) whose values `name` reads, looking through views; an op
    with a site is added to `feeds` of each view it looks through."""
    found: list[str] = []
    todo, seen = list(graph[name].refs), set()
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        if ref in sites:
            found.append(ref)
        elif graph[ref].kind.value == "view":
            if name in sites:
                feeds.setdefault(ref, []).append(name)
            todo += graph[ref].refs
    return tuple(found)


# ---------------------------------------------------------------- file names

def baseline_name(nodeid: str) -> str:
    """A safe, readable file name for a test's node id.

    Only letters, digits, `_`, `.` and `-`: no glob character (`[`, `]`, `*`, `?`), so a
    parametrized test's file can be named unquoted in any shell (zsh stops at `[`). The hash
    of the exact node id keeps names unique however the readable part was shortened or had
    characters replaced.
    """
    readable = _readable(nodeid).replace("[", "_").replace("]", "")  # t[a-b] -> t_a-b
    safe = re.sub(r"[^A-Za-z0-9_.\-]", "_", readable)[:MAX_NAME]
    return f"{safe}-{_digest(nodeid)}.yaml"


def legacy_baseline_name(nodeid: str) -> str:
    """The name earlier versions gave the file (brackets kept); still read, moved on rewrite."""
    safe = re.sub(r"[^A-Za-z0-9_.\-\[\]]", "_", _readable(nodeid))[:MAX_NAME]
    return f"{safe}-{_digest(nodeid)}.yaml"


def _readable(nodeid: str) -> str:
    return nodeid.replace(".py::", "__").replace("::", "__").replace("/", "_")


def _digest(nodeid: str) -> str:
    return hashlib.sha1(nodeid.encode()).hexdigest()[:8]
