"""The baseline data model: what one test's fusion result looks like on disk.

Reads an ``Analysis`` (and optional measurements) and the rootdir; writes a
``Snapshot`` of plain values. ``to_data``/``from_data`` convert to and from the
YAML mapping (stable key order, ``schema_version``, provenance); ``from_data``
validates and raises ``BaselineError`` with one line naming the file. Clusters
and rejections are identified by ops and rootdir-relative source lines, so a
baseline made on one checkout applies to every other.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
MAX_NAME = 120


class BaselineError(Exception):
    """A baseline file that cannot be used; `str()` is the one line shown to the user."""


@dataclass(frozen=True)
class ClusterRec:
    ops: tuple[str, ...]
    lines: str  # "examples/example_net.py:15-17" or "?" when unknown
    category: str
    nodes: tuple[str, ...]
    unfused_bytes: int
    fused_bytes: int
    kernel: str | None = None  # "elementwise" / "reduction" / "reduction (looped)"; None: none
    kernel_error: str = ""  # why code generation failed, when it did

    @property
    def chain(self) -> str:
        return " → ".join(self.ops)

    @property
    def saved_bytes(self) -> int:
        return self.unfused_bytes - self.fused_bytes


@dataclass(frozen=True)
class RejectionRec:
    check: str
    ops: tuple[str, ...]
    lines: str
    nodes: tuple[str, ...]
    culprits: tuple[str, ...]
    reason: str

    @property
    def chain(self) -> str:
        return " → ".join(self.ops) if len(self.ops) <= 4 else (
            " → ".join(self.ops[:3]) + f" → … ({len(self.ops)} ops)")


@dataclass(frozen=True)
class ClusterTiming:
    ops: tuple[str, ...]
    lines: str
    kernel_us: tuple[float, ...]
    eager_us: tuple[float, ...] = ()
    gbps: float | None = None
    regime: str | None = None


@dataclass(frozen=True)
class Measured:
    """Timings on one hardware key; samples are repeated runs (lower is better)."""

    clusters: tuple[ClusterTiming, ...] = ()
    model_us: tuple[float, ...] = ()  # the patched model
    model_eager_us: tuple[float, ...] = ()
    date: str = ""


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

    @property
    def kernels(self) -> int:
        return sum(c.kernel is not None for c in self.clusters)

    @property
    def saved_bytes(self) -> int:
        return sum(c.saved_bytes for c in self.clusters)

    @property
    def unfused_bytes(self) -> int:
        return sum(c.unfused_bytes for c in self.clusters)

    def structural(self) -> Snapshot:
        """The same snapshot without provenance and measurements (for equality)."""
        return replace(self, provenance={}, measured={})


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


def where(span: Any, rootdir: Path) -> str:
    if span is None:
        return "?"
    tail = f"{span.start}" if span.start == span.end else f"{span.start}-{span.end}"
    return f"{relative_file(span.file, rootdir)}:{tail}"


def from_analysis(analysis: Any, test: str, rootdir: Path,
                  measured: dict[str, Measured] | None = None,
                  provenance: dict[str, str] | None = None,
                  kernels: dict[int, tuple[str | None, str]] | None = None) -> Snapshot:
    """`kernels`: cluster index -> (kernel kind or None, lowering error)."""
    kernels = kernels or {}
    clusters = tuple(ClusterRec(
        ops=tuple(c.ops), lines=where(c.lines, rootdir), category=c.category,
        nodes=tuple(c.nodes), unfused_bytes=int(c.traffic.unfused_bytes),
        fused_bytes=int(c.traffic.fused_bytes),
        kernel=kernels.get(c.index, (None, ""))[0],
        kernel_error=kernels.get(c.index, (None, ""))[1]) for c in analysis.clusters)
    rejections = tuple(RejectionRec(
        check=r.check, ops=tuple(r.ops), lines=where(r.lines, rootdir), nodes=tuple(r.nodes),
        culprits=tuple(r.culprits), reason=r.reason) for r in analysis.rejections)
    return Snapshot(test=test, model=analysis.model_name,
                    inputs=tuple(str(s) for s in analysis.inputs), clusters=clusters,
                    rejections=rejections, provenance=dict(provenance or {}),
                    measured=dict(measured or {}), frontend=analysis.graph.frontend)


# ---------------------------------------------------------------- to / from YAML data

def _samples(xs: tuple[float, ...]) -> list[float]:
    return [round(float(x), 3) for x in xs]


def _timing_data(t: ClusterTiming) -> dict[str, Any]:
    d: dict[str, Any] = {"ops": list(t.ops), "lines": t.lines, "kernel_us": _samples(t.kernel_us)}
    if t.eager_us:
        d["eager_us"] = _samples(t.eager_us)
    if t.gbps is not None:
        d["gbps"] = round(float(t.gbps), 1)
    if t.regime is not None:
        d["regime"] = t.regime
    return d


def _cluster_data(c: ClusterRec) -> dict[str, Any]:
    d: dict[str, Any] = {
        "ops": list(c.ops), "lines": c.lines, "category": c.category, "nodes": list(c.nodes),
        "traffic": {"unfused_bytes": c.unfused_bytes, "fused_bytes": c.fused_bytes,
                    "saved_bytes": c.saved_bytes},
        "kernel": c.kernel}
    if c.kernel_error:
        d["kernel_error"] = c.kernel_error
    return d


def to_data(s: Snapshot) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "test": s.test,
        "model": s.model,
        "inputs": list(s.inputs),
    }
    if s.frontend:  # absent from old baselines: rewriting one must not invent it
        data["frontend"] = s.frontend
    data.update({
        "provenance": dict(s.provenance),
        "kernels": s.kernels,
        "clusters": [_cluster_data(c) for c in s.clusters],
        "rejections": [{"check": r.check, "ops": list(r.ops), "lines": r.lines,
                        "nodes": list(r.nodes), "culprits": list(r.culprits),
                        "reason": r.reason} for r in s.rejections],
    })
    if s.measured:
        data["measured"] = {
            key: {"date": m.date, "model_us": _samples(m.model_us),
                  "model_eager_us": _samples(m.model_eager_us),
                  "clusters": [_timing_data(t) for t in m.clusters]}
            for key, m in sorted(s.measured.items())}
    return data


class _Reader:
    """Typed access to parsed YAML that fails with the path to the bad field."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, what: str) -> BaselineError:
        return BaselineError(f"corrupt fusion baseline {self.file}: {what} (fix it, or delete "
                             "it and rerun with --fusion-update-baselines=new)")

    def get(self, d: Any, key: str, typ: type | tuple[type, ...], where: str) -> Any:
        if not isinstance(d, dict) or key not in d:
            raise self.fail(f"missing `{where}{key}`")
        v = d[key]
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            raise self.fail(f"`{where}{key}` has the wrong type ({type(v).__name__})")
        return v

    def strs(self, d: Any, key: str, where: str) -> tuple[str, ...]:
        v = self.get(d, key, list, where)
        if not all(isinstance(x, str) for x in v):
            raise self.fail(f"`{where}{key}` must be a list of strings")
        return tuple(v)

    def nums(self, d: Any, key: str, where: str, default: tuple = ()) -> tuple[float, ...]:
        if key not in d and default is not None:
            return default
        v = self.get(d, key, list, where)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            raise self.fail(f"`{where}{key}` must be a list of numbers")
        return tuple(float(x) for x in v)


def from_data(data: Any, file: str) -> Snapshot:
    r = _Reader(file)
    if not isinstance(data, dict):
        raise r.fail("not a YAML mapping")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BaselineError(
            f"fusion baseline {file} has schema_version {version!r}, this plugin reads "
            f"{SCHEMA_VERSION} (regenerate it with --fusion-update-baselines=failing)")
    clusters = []
    for i, c in enumerate(r.get(data, "clusters", list, "")):
        at = f"clusters[{i}]."
        t = r.get(c, "traffic", dict, at)
        clusters.append(ClusterRec(
            ops=r.strs(c, "ops", at), lines=r.get(c, "lines", str, at),
            category=r.get(c, "category", str, at), nodes=r.strs(c, "nodes", at),
            unfused_bytes=r.get(t, "unfused_bytes", int, at + "traffic."),
            fused_bytes=r.get(t, "fused_bytes", int, at + "traffic."),
            kernel=r.get(c, "kernel", (str, type(None)), at),
            kernel_error=str(c.get("kernel_error", ""))))
    rejections = []
    for i, x in enumerate(r.get(data, "rejections", list, "")):
        at = f"rejections[{i}]."
        rejections.append(RejectionRec(
            check=r.get(x, "check", str, at), ops=r.strs(x, "ops", at),
            lines=r.get(x, "lines", str, at), nodes=r.strs(x, "nodes", at),
            culprits=r.strs(x, "culprits", at), reason=r.get(x, "reason", str, at)))
    measured = {}
    for key, m in (data.get("measured") or {}).items():
        at = f"measured[{key}]."
        if not isinstance(m, dict):
            raise r.fail(f"`{at[:-1]}` is not a mapping")
        timings = tuple(ClusterTiming(
            ops=r.strs(t, "ops", at + "clusters."), lines=r.get(t, "lines", str, at),
            kernel_us=r.nums(t, "kernel_us", at, None), eager_us=r.nums(t, "eager_us", at),
            gbps=t.get("gbps"), regime=t.get("regime"))
            for t in r.get(m, "clusters", list, at))
        measured[str(key)] = Measured(clusters=timings, model_us=r.nums(m, "model_us", at),
                                      model_eager_us=r.nums(m, "model_eager_us", at),
                                      date=str(m.get("date", "")))
    prov = data.get("provenance") or {}
    frontend = data.get("frontend", "")  # optional: baselines before it was recorded lack it
    if not isinstance(frontend, str):
        raise r.fail(f"`frontend` has the wrong type ({type(frontend).__name__})")
    return Snapshot(
        test=r.get(data, "test", str, ""), model=r.get(data, "model", str, ""),
        inputs=r.strs(data, "inputs", ""), clusters=tuple(clusters),
        rejections=tuple(rejections),
        provenance={str(k): str(v) for k, v in prov.items()} if isinstance(prov, dict) else {},
        measured=measured, frontend=frontend)


# ---------------------------------------------------------------- file names

def baseline_name(nodeid: str) -> str:
    """A safe, readable file name for a test's node id.

    The hash of the exact node id keeps names unique however the readable part
    was shortened or had characters replaced.
    """
    readable = nodeid.replace(".py::", "__").replace("::", "__").replace("/", "_")
    safe = re.sub(r"[^A-Za-z0-9_.\-\[\]]", "_", readable)[:MAX_NAME]
    return f"{safe}-{hashlib.sha1(nodeid.encode()).hexdigest()[:8]}.yaml"
