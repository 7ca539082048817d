"""The baseline data model: what one test's fusion result looks like in memory.

Reads nothing and writes nothing: it defines the ``Snapshot`` of plain values that
``snapshot_build.py`` makes from an ``Analysis`` and ``schema.py`` turns into YAML data and
back. A cluster is identified by what it is: its ops, the module path and function it
runs in, and its ordinal among identical clusters there (``ClusterId``). Source
lines are kept as information only, so an edit elsewhere in the file does not
change any identity; timings are keyed by the identity. Paths are
rootdir-relative, so a baseline made on one checkout applies to every other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from .construction import Construction

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
    reason: str = "fusion-advisor cannot fuse through it"  # fusion_core's Barrier.reason


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
