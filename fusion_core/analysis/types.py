"""Results of fusion analysis: clusters, rejections, traffic estimates."""

from __future__ import annotations

from dataclasses import dataclass

CHECKS = ("device", "fan-out", "convexity", "shapes", "aliasing", "reduction", "lowering",
          "dead-code")


@dataclass(frozen=True)
class LineSpan:
    file: str
    start: int
    end: int

    def __str__(self) -> str:
        return f"L{self.start}" if self.start == self.end else f"L{self.start}-{self.end}"

    @property
    def where(self) -> str:
        """`file:15-17`, the form used in messages."""
        tail = f"{self.start}" if self.start == self.end else f"{self.start}-{self.end}"
        return f"{self.file}:{tail}"


@dataclass(frozen=True)
class TrafficEstimate:
    """DRAM bytes moved by a group of ops, unfused (eager) and fused (one kernel)."""

    unfused_bytes: int
    fused_bytes: int

    @property
    def saved_bytes(self) -> int:
        return self.unfused_bytes - self.fused_bytes

    @property
    def saved_fraction(self) -> float:
        return self.saved_bytes / self.unfused_bytes if self.unfused_bytes else 0.0


@dataclass(frozen=True)
class ShapeRead:
    """`read` (`h.shape`, `h.size(-1)`) reads the shape of cluster value `of`, which the
    shapes of `sources` (values read before the cluster) broadcast to at any input size:
    `of` need not be stored for it (``analysis/group.py`` ``shape_sources``)."""

    read: str
    of: str
    sources: tuple[str, ...]
    # Group nodes from `sources` to `of` when a view is among them: the read replays them on
    # shapes alone (meta tensors), since the view, not broadcasting, decides the shape.
    via: tuple[str, ...] = ()


@dataclass(frozen=True)
class MetadataRead:
    """`read` (`x.dtype`, `h.device`) reads `attribute` (``ir.graph.METADATA_ATTRS``) of
    cluster value `of`, which input `source` of the cluster has too: `of` need not be stored
    for it, the patched graph reads `source`'s instead (``analysis/metadata_reads.py``)."""

    attribute: str
    read: str
    of: str
    source: str


@dataclass(frozen=True)
class Cluster:
    index: int
    nodes: tuple[str, ...]  # topological order
    ops: tuple[str, ...]  # registry op of each node, same order
    category: str
    inputs: tuple[str, ...]  # values read from outside (activations, params, buffers)
    outputs: tuple[str, ...]  # values written out (last one is the cluster's result)
    traffic: TrafficEstimate
    lines: LineSpan | None
    # Values another cluster also computes, recomputed here from their inputs instead of
    # read back from memory (analysis/recompute.py).
    recomputes: tuple[str, ...] = ()
    shape_reads: tuple[ShapeRead, ...] = ()
    metadata_reads: tuple[MetadataRead, ...] = ()

    @property
    def chain(self) -> str:
        return " → ".join(self.ops)

    @property
    def dtype_reads(self) -> tuple[MetadataRead, ...]:
        return tuple(r for r in self.metadata_reads if r.attribute == "dtype")

    @property
    def device_reads(self) -> tuple[MetadataRead, ...]:
        return tuple(r for r in self.metadata_reads if r.attribute == "device")


@dataclass(frozen=True)
class Rejection:
    check: str  # one of CHECKS
    nodes: tuple[str, ...]  # the candidate group that failed
    ops: tuple[str, ...]
    culprits: tuple[str, ...]  # nodes the pruning dropped for this failure
    reason: str
    lines: LineSpan | None

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise ValueError(f"unknown legality check {self.check!r}")


@dataclass(frozen=True)
class Failure:
    check: str
    culprits: tuple[str, ...]
    reason: str
