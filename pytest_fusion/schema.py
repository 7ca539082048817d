"""Baseline YAML data: a ``Snapshot`` to a plain mapping and back, with migration.

Reads and writes parsed YAML (dicts and lists; ``session.py`` does the text).
``to_data`` writes schema 2: each cluster and rejection names its identity
(``in``: module path, ``function``, ``nth`` when not 0) next to its lines, and
entries identical but for the item of a repeated container are stored once, with
``in: h.{0..11}`` and one ``nodes`` list per instance (``grouping.py``). Timings
name their cluster by identity; ``target`` names the device the analysis was made for
(``cpu`` when absent, as in baselines written before it was recorded). Schema 3 adds to
each hardware's timings the ``clock`` they were taken by (``device``: CUDA-graph replays;
``host``) and the ``inputs`` they were taken at, and keeps host-timed figures
(``kernel_host_us``…) beside device-timed ones. Schema 4 adds ``compiled``: per backend
(``cpu-inductor``…), what torch.compile made of the model (graph breaks, graphs, Inductor's
kernels, recompiles, versions); older baselines have none and read as {}. ``model_kwargs``
(and ``factory`` when not the model's class) say how the model was built (``construction``);
baselines written before they were recorded have neither and read as None. ``from_data``
reads schemas 1 to 4 (schema 2
timings: host clock, at the baseline's inputs; schema 1 has no identity: clusters match by
ops, timings by ops and lines) and raises ``BaselineError`` with one line naming the file
and field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .construction import Construction
from .grouping import compact, expand
from .snapshot import (
    CLOCKS,
    TARGETS,
    BaselineError,
    ClusterId,
    ClusterRec,
    ClusterTiming,
    Measured,
    RejectionRec,
    Snapshot,
    Totals,
    numbered,
)

SCHEMA_VERSION = 4
READS = (1, 2, 3, 4)
PER_INSTANCE = ("nodes", "sites", "culprits")  # differ between the items of a repeated container


def _samples(xs: tuple[float, ...]) -> list[float]:
    return [round(float(x), 3) for x in xs]


def _scope_data(module: str | None, function: str | None, nth: int) -> dict[str, Any]:
    """`in`/`function`/`nth` keys; none for an identity schema 1 did not record."""
    d: dict[str, Any] = {}
    if module is not None:
        d["in"] = module
    if function is not None:
        d["function"] = function
    if nth:
        d["nth"] = nth
    return d


def _sites_data(sites: tuple[str, ...]) -> dict[str, Any]:
    return {"sites": list(sites)} if sites else {}


def _timing_data(t: ClusterTiming) -> dict[str, Any]:
    c = t.cluster
    d: dict[str, Any] = {"ops": list(c.ops), **_scope_data(c.module, c.function, c.nth),
                         "kernel_us": _samples(t.kernel_us)}
    if t.eager_us:
        d["eager_us"] = _samples(t.eager_us)
    if t.gbps is not None:
        d["gbps"] = round(float(t.gbps), 1)
    if t.regime is not None:
        d["regime"] = t.regime
    for key, xs in (("kernel_host_us", t.kernel_host_us), ("eager_host_us", t.eager_host_us)):
        if xs:
            d[key] = _samples(xs)
    return d


def _measured_data(m: Measured, inputs: tuple[str, ...]) -> dict[str, Any]:
    """One hardware's timings; `inputs`: the snapshot's, where `m` does not name its own."""
    d: dict[str, Any] = {"date": m.date, "clock": m.clock, "inputs": list(m.inputs or inputs),
                         "model_us": _samples(m.model_us),
                         "model_eager_us": _samples(m.model_eager_us)}
    for key, xs in (("model_host_us", m.model_host_us),
                    ("model_eager_host_us", m.model_eager_host_us)):
        if xs:
            d[key] = _samples(xs)
    d["clusters"] = [_timing_data(t) for t in m.clusters]
    return d


def _cluster_data(c: ClusterRec) -> dict[str, Any]:
    d: dict[str, Any] = {
        "ops": list(c.ops), **_scope_data(c.module, c.function, c.nth), "lines": c.lines,
        "category": c.category, "nodes": list(c.nodes), **_sites_data(c.sites),
        "traffic": {"unfused_bytes": c.unfused_bytes, "fused_bytes": c.fused_bytes,
                    "saved_bytes": c.saved_bytes},
        "kernel": c.kernel}
    if c.kernel_error:
        d["kernel_error"] = c.kernel_error
    return d


def _rejection_data(r: RejectionRec) -> dict[str, Any]:
    return {"check": r.check, "ops": list(r.ops), **_scope_data(r.module, r.function, r.nth),
            "lines": r.lines, "nodes": list(r.nodes), **_sites_data(r.sites),
            "culprits": list(r.culprits),
            "reason": r.reason}


def to_data(s: Snapshot) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "test": s.test,
        "model": s.model,
        **(s.built.data() if s.built is not None else {}),  # absent: not recorded
        "inputs": list(s.inputs),
        "target": s.target,
    }
    if s.frontend:  # absent from old baselines: rewriting one must not invent it
        data["frontend"] = s.frontend
    if s.totals is not None:
        data["totals"] = {"kernels": s.totals.kernels,
                          "traffic_bytes": s.totals.traffic_bytes}
    data.update({
        "provenance": dict(s.provenance),
        "kernels": s.kernels,
        "clusters": compact([_cluster_data(c) for c in s.clusters], PER_INSTANCE),
        "rejections": compact([_rejection_data(r) for r in s.rejections], PER_INSTANCE),
    })
    if s.measured:
        data["measured"] = {key: _measured_data(m, s.inputs)
                            for key, m in sorted(s.measured.items())}
    if s.compiled:
        data["compiled"] = {key: s.compiled[key] for key in sorted(s.compiled)}
    return data


def _compiled(r: _Reader, data: dict) -> dict[str, dict[str, Any]]:
    """Each backend's compiled record, checked for shape only (the gate reads the fields)."""
    found = data.get("compiled") or {}
    if not isinstance(found, dict):
        raise r.fail(f"`compiled` has the wrong type ({type(found).__name__})")
    out = {}
    for key, rec in found.items():
        if not isinstance(rec, dict):
            raise r.fail(f"`compiled[{key}]` is not a mapping")
        for field, typ in (("graphs", int), ("recompiles", int), ("kernels", list),
                           ("graph_breaks", list)):
            r.get(rec, field, typ, f"compiled[{key}].")
        out[str(key)] = rec
    return out


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

    def optional(self, d: dict, key: str, typ: type, where: str, default: Any = None) -> Any:
        return self.get(d, key, typ, where) if key in d else default

    def strs(self, d: Any, key: str, where: str) -> tuple[str, ...]:
        v = self.get(d, key, list, where)
        if not all(isinstance(x, str) for x in v):
            raise self.fail(f"`{where}{key}` must be a list of strings")
        return tuple(v)

    def nums(self, d: Any, key: str, where: str, default: tuple | None = ()
             ) -> tuple[float, ...]:
        if key not in d and default is not None:
            return default
        v = self.get(d, key, list, where)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            raise self.fail(f"`{where}{key}` must be a list of numbers")
        return tuple(float(x) for x in v)

    def sites(self, d: dict, where: str) -> tuple[str, ...]:
        """A record's sites: () when not recorded, else one per node."""
        if "sites" not in d:
            return ()
        sites = self.strs(d, "sites", where)
        if len(sites) != len(self.strs(d, "nodes", where)):
            raise self.fail(f"`{where}sites` must name one site per node")
        return sites

    def built(self, data: dict) -> Construction | None:
        """The factory and keyword arguments; None in baselines written before them."""
        if "model_kwargs" not in data:
            return None
        kwargs = self.get(data, "model_kwargs", dict, "")
        if not all(isinstance(k, str) for k in kwargs):
            raise self.fail("`model_kwargs` must be keyed by argument names")
        return Construction(self.optional(data, "factory", str, "", ""),
                            tuple(sorted(kwargs.items())))

    def totals(self, data: dict) -> Totals | None:
        if "totals" not in data:
            return None
        t = self.get(data, "totals", dict, "")
        return Totals(self.get(t, "kernels", int, "totals."),
                      self.get(t, "traffic_bytes", int, "totals."))

    def scope(self, d: dict, where: str) -> dict[str, Any]:
        return {"module": self.optional(d, "in", str, where),
                "function": self.optional(d, "function", str, where),
                "nth": self.optional(d, "nth", int, where, 0)}

    def entries(self, data: dict, key: str) -> list[tuple[str, dict]]:
        """(where, entry) of a list of clusters or rejections, groups expanded."""
        out = []
        for i, entry in enumerate(self.get(data, key, list, "")):
            at = f"{key}[{i}]."
            if not isinstance(entry, dict):
                raise self.fail(f"`{at[:-1]}` is not a mapping")
            try:
                out += [(at, e) for e in expand(entry, PER_INSTANCE)]
            except ValueError as e:
                raise self.fail(f"`{at[:-1]}`: {e}") from None
        return out


def _cluster(r: _Reader, c: dict, at: str) -> ClusterRec:
    t = r.get(c, "traffic", dict, at)
    return ClusterRec(
        ops=r.strs(c, "ops", at), lines=r.get(c, "lines", str, at),
        category=r.get(c, "category", str, at), nodes=r.strs(c, "nodes", at),
        unfused_bytes=r.get(t, "unfused_bytes", int, at + "traffic."),
        fused_bytes=r.get(t, "fused_bytes", int, at + "traffic."),
        kernel=r.get(c, "kernel", (str, type(None)), at),
        kernel_error=str(c.get("kernel_error", "")), **r.scope(c, at),
        sites=r.sites(c, at))


def _rejection(r: _Reader, x: dict, at: str) -> RejectionRec:
    return RejectionRec(
        check=r.get(x, "check", str, at), ops=r.strs(x, "ops", at),
        lines=r.get(x, "lines", str, at), nodes=r.strs(x, "nodes", at),
        culprits=r.strs(x, "culprits", at), reason=r.get(x, "reason", str, at),
        **r.scope(x, at), sites=r.sites(x, at))


def _v1_timing_owner(clusters: tuple[ClusterRec, ...]) -> Callable[[dict, str], ClusterId | None]:
    """Schema 1 keyed timings by (ops, lines): the k-th such entry is the k-th such cluster."""
    used: dict[tuple, int] = {}

    def owner(t: dict, lines: str) -> ClusterId | None:
        key = (tuple(t["ops"]), lines)
        k = used.get(key, 0)
        used[key] = k + 1
        same = [c for c in clusters if (c.ops, c.lines) == key]
        return same[k].ident if k < len(same) else None  # schema 1 never compared the rest

    return owner


def _measured(r: _Reader, data: dict, clusters: tuple[ClusterRec, ...], version: int,
              inputs: tuple[str, ...]) -> dict[str, Measured]:
    """Every hardware's timings; before schema 3: host-timed at the baseline's `inputs`."""
    idents = {c.ident for c in clusters}
    measured: dict[str, Measured] = {}
    found = data.get("measured") or {}
    if not isinstance(found, dict):
        raise r.fail(f"`measured` has the wrong type ({type(found).__name__})")
    for key, m in found.items():
        at = f"measured[{key}]."
        if not isinstance(m, dict):
            raise r.fail(f"`{at[:-1]}` is not a mapping")
        owner = _v1_timing_owner(clusters)
        timings = []
        for i, t in enumerate(r.get(m, "clusters", list, at)):
            tat = f"{at}clusters[{i}]."
            ops = r.strs(t, "ops", tat)
            if version == 1:
                ident = owner(t, r.get(t, "lines", str, tat))
                if ident is None:
                    continue
            else:
                ident = ClusterId(ops=ops, **r.scope(t, tat))
                if ident not in idents:
                    raise r.fail(f"`{tat[:-1]}` names no cluster of this baseline")
            timings.append(ClusterTiming(
                cluster=ident, kernel_us=r.nums(t, "kernel_us", tat, None),
                eager_us=r.nums(t, "eager_us", tat), gbps=t.get("gbps"),
                regime=t.get("regime"), kernel_host_us=r.nums(t, "kernel_host_us", tat),
                eager_host_us=r.nums(t, "eager_host_us", tat)))
        taken = r.strs(m, "inputs", at) if "inputs" in m else ()
        clock = m.get("clock", "host")
        if clock not in CLOCKS:
            raise r.fail(f"`{at}clock` must be {' or '.join(CLOCKS)}, got {clock!r}")
        measured[str(key)] = Measured(
            clusters=tuple(timings), model_us=r.nums(m, "model_us", at),
            model_eager_us=r.nums(m, "model_eager_us", at), date=str(m.get("date", "")),
            clock=clock, inputs=() if taken == inputs else taken,  # (): the analysis inputs
            model_host_us=r.nums(m, "model_host_us", at),
            model_eager_host_us=r.nums(m, "model_eager_host_us", at))
    return measured


def from_data(data: Any, file: str) -> Snapshot:
    r = _Reader(file)
    if not isinstance(data, dict):
        raise r.fail("not a YAML mapping")
    version = data.get("schema_version")
    if version not in READS:
        raise BaselineError(
            f"fusion baseline {file} has schema_version {version!r}, this plugin reads "
            f"{', '.join(map(str, READS))} (regenerate it with "
            "--fusion-update-baselines=failing)")
    clusters = [_cluster(r, c, at) for at, c in r.entries(data, "clusters")]
    rejections = [_rejection(r, x, at) for at, x in r.entries(data, "rejections")]
    if version == 1:  # no identity recorded: number clusters among those with the same ops
        clusters = numbered(clusters, lambda c: c.ops)
        rejections = numbered(rejections, lambda x: (x.check, x.ops))
    clusters_t = tuple(clusters)
    if len({c.ident for c in clusters_t}) < len(clusters_t):
        raise r.fail("two clusters have the same ops, `in`, `function` and `nth`")
    prov = data.get("provenance") or {}
    frontend = data.get("frontend", "")  # optional: baselines before it was recorded lack it
    if not isinstance(frontend, str):
        raise r.fail(f"`frontend` has the wrong type ({type(frontend).__name__})")
    target = data.get("target", "cpu")  # baselines before targets were recorded: the CPU
    if target not in TARGETS:
        raise r.fail(f"`target` must be {' or '.join(TARGETS)}, got {target!r}")
    inputs = r.strs(data, "inputs", "")
    return Snapshot(
        test=r.get(data, "test", str, ""), model=r.get(data, "model", str, ""),
        inputs=inputs, clusters=clusters_t,
        rejections=tuple(rejections),
        provenance={str(k): str(v) for k, v in prov.items()} if isinstance(prov, dict) else {},
        measured=_measured(r, data, clusters_t, version, inputs), frontend=frontend,
        target=target, totals=r.totals(data), compiled=_compiled(r, data), built=r.built(data))
