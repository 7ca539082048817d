"""Whether one kernel can serve several clusters: the same lines run in other calls.

Reads an ``Analysis`` and the clusters ``mapping.py`` groups by the lines they replace, with
each one's ``Found`` (what ``match.py`` matched there); raises ``PointerOnly`` naming the
first difference one kernel cannot absorb (what it reads or computes, ranks and dtypes, the
constants it bakes in). Sizes may differ: ``served.py`` runs the launcher at each call's.
"""

from __future__ import annotations

from collections.abc import Collection

from ..analysis.types import Cluster
from ..ir.graph import Ref
from ..ir.spelling import said
from ..pipeline import Analysis
from .match import Found
from .span import PointerOnly


def _metas(analysis: Analysis, c: Cluster) -> list:
    return [analysis.graph[n].meta for n in (*c.inputs, *c.outputs)]


def _ranks(analysis: Analysis, c: Cluster) -> tuple:
    """Each value's rank and dtype. Sizes may differ between the calls one kernel serves
    (the channels of each stage): `--apply` checks that the kernel's launcher runs them."""
    return tuple((len(m.shape), m.dtype) if m else None for m in _metas(analysis, c))


def size_ones(analysis: Analysis, c: Cluster) -> int:
    """Size-1 dims of a cluster's values: a kernel generated where a dim has size 1 may
    index it as a broadcast, so the call with the fewest serves the others best."""
    return sum(d == 1 for m in _metas(analysis, c) if m for d in m.shape)


def _constants(analysis: Analysis, c: Cluster) -> tuple:
    """What the kernel bakes in, node by node: params and non-tensor operands."""
    nodes = [analysis.graph[n] for n in c.nodes]
    return tuple((n.op, n.params, tuple(repr(x) for x in n.inputs if not isinstance(x, Ref)))
                 for n in nodes)


def _setting(analysis: Analysis, rep: Cluster, c: Cluster) -> str:
    """The first module setting (`eps`) whose value differs between two clusters' ops."""
    g = analysis.graph
    for a, b in zip(rep.nodes, c.nodes, strict=False):
        pa, pb = dict(g[a].params), dict(g[b].params)
        key = next((k for k in {**pa, **pb} if pa.get(k) != pb.get(k)), None)
        if key is not None:
            return (f": `{key}` of {said(g, b)} is {pb.get(key)!r} there and "
                    f"{pa.get(key)!r} in cluster {rep.index}")
    return " (module settings)"


def consistent(analysis: Analysis, group: list[Cluster], found: list[Found],
                parts: Collection[int] = frozenset()) -> None:
    """Clusters one kernel serves (the same lines in other calls; the ids of `parts`, those
    of clusters it computes a part of) read, compute and bake the same."""
    rep = group[0]
    for c, f in zip(group[1:], found[1:], strict=True):
        other = f"{'part of ' if id(c) in parts else ''}cluster {c.index}"
        both = f"the same lines run as cluster {rep.index} and as {other}"
        if (f.args, f.targets) != (found[0].args, found[0].targets) or c.ops != rep.ops:
            raise PointerOnly(f"{both}, which reads or computes something else")
        if _ranks(analysis, c) != _ranks(analysis, rep):
            raise PointerOnly(f"{both}, with other ranks or dtypes; one kernel cannot serve "
                              "both")
        if _constants(analysis, c) != _constants(analysis, rep):
            raise PointerOnly(f"{both}, with other constants{_setting(analysis, rep, c)}; one "
                              "kernel cannot serve both")
