"""The narrowest floating dtype each cluster result went through, inside the cluster.

A float64 result computed from float32 values (`softmax(s, dtype=torch.float32).type_as(x)`
of a float64 `x`, a float32 sum `.double()`) is only as exact as float32: judged at float64's
tolerance (1e-9), a kernel one float32 ulp away from eager failed. ``numerics.compare`` takes
the tolerance of this dtype where it is the looser one.
"""

from __future__ import annotations

import torch

from ..analysis.types import Cluster
from ..ir.graph import FusionGraph


def precision_floors(g: FusionGraph, cluster: Cluster) -> tuple[torch.dtype | None, ...]:
    """Per output of `cluster`, the narrowest floating dtype among the values the cluster
    computes it from along float values (inputs are exact as loaded, whatever their dtype;
    a comparison or an integer cast ends the path: a bfloat16 `h > 0` selecting between
    float32 values leaves them float32-exact); None where none."""
    members = set(cluster.nodes)
    out = []
    for name in cluster.outputs:
        seen, todo, found = {name}, [name], []
        while todo:
            n = g[todo.pop()]
            if n.name not in members:
                continue
            if n.meta is None or not n.meta.dtype.is_floating_point:
                continue  # a mask or an index: its operands' rounding moves no float result
            found.append(n.meta.dtype)
            for r in n.refs:
                if r not in seen:
                    seen.add(r)
                    todo.append(r)
        out.append(max(found, key=lambda d: torch.finfo(d).eps, default=None))
    return tuple(out)
