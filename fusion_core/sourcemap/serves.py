"""Whether one kernel runs every call of the lines it replaces.

Lines a model runs several times (a block's ``forward`` in each stage) form one cluster per
call, often at other sizes (64 channels in one stage, 512 in the last). ``--apply`` writes one
call there, to the kernel of the group's first cluster (``SourceMapping.call``), so that
kernel must run the others' inputs too. A generated launcher says itself whether it can:
its ``traceable`` entry point plans the launch (iteration shape, index groups, output shapes)
and raises when a layout does not fit how the kernel indexes it. Here it runs on ``meta``
tensors with each cluster's analysed shapes and strides, launching nothing.

Reads an ``Analysis``, the clusters' ``SourceMapping``s and the generated ``Kernel``s; writes
nothing (the kernel files it imports live in a temporary folder).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import torch

from ..analysis.types import Cluster
from ..codegen import Kernel, load_kernel
from ..codegen.operators import _shapes_only
from ..ir.run_scalars import analysed, run_scalar
from ..names import cluster_of
from ..pipeline import Analysis
from .source_mapping import SourceMapping


def _meta_inputs(analysis: Analysis, c: Cluster) -> list[torch.Tensor | int | float]:
    """The cluster's inputs as meta tensors; a Python number of sizes alone as its value."""
    g = analysis.graph
    return [torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device="meta")
            if (m := g[n].meta) is not None else analysed(g, run_scalar(g, n))
            for n in c.inputs]


def _shape_text(shape: tuple[int, ...]) -> str:
    return "×".join(map(str, shape)) or "a scalar"


class KernelFit:
    """Answers, once per (kernel, cluster), whether the kernel runs that cluster's call."""

    def __init__(self, analysis: Analysis, kernels: Mapping[int, Kernel]) -> None:
        self.analysis = analysis
        self.kernels = kernels
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._modules: dict[int, ModuleType] = {}
        self._answers: dict[tuple[int, tuple[str, ...]], str | None] = {}

    def close(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()

    def _module(self, index: int) -> ModuleType:
        if index not in self._modules:
            if self._folder is None:
                self._folder = tempfile.TemporaryDirectory(prefix="fusion-fit-")
            kernel = self.kernels[index]
            path = Path(self._folder.name) / kernel.filename
            path.write_text(kernel.source, encoding="utf-8")  # triton reads jit source from it
            self._modules[index] = load_kernel(path)
        return self._modules[index]

    def why_not(self, m: SourceMapping, by_cluster: Mapping[int, SourceMapping]) -> str | None:
        """Why the edit `m` belongs to cannot serve one of the calls of its lines, or None."""
        clusters = self.analysis.clusters
        todo: list[tuple[int, Cluster, str, str]] = []
        for i in sorted((m.cluster_index, *m.shared_with)):
            mi = by_cluster.get(i)
            served = cluster_of(mi.call) if mi is not None and mi.call else None
            if served is not None and served != i:
                todo.append((served, clusters[i], mi.call, f"as cluster {i}"))
        # Another cluster's ops another call runs on the lines (served.py): this kernel
        # computes them there.
        todo += [(cluster_of(s.call), s.part, s.call,
                  f"as {' → '.join(s.part.ops)} of cluster {s.part.index} in another call")
                 for s in m.serves]
        for served, c, call, there in todo:
            if served not in self.kernels:
                continue
            key = (served, c.nodes)
            if key not in self._answers:
                self._answers[key] = self._runs(served, c, call, there)
            if self._answers[key] is not None:
                return self._answers[key]
        return None

    def _runs(self, served: int, c: Cluster, call: str, there: str) -> str | None:
        graph, clusters = self.analysis.graph, self.analysis.clusters

        def shapes(names: tuple[str, ...]) -> list[tuple[int, ...] | int | float]:
            return [tuple(graph[n].meta.shape) if graph[n].meta is not None
                    else analysed(graph, run_scalar(graph, n)) for n in names]

        made_for = clusters[served]
        if shapes(c.inputs) == shapes(made_for.inputs):
            return None  # the very shapes the kernel was made for
        own = shapes(c.outputs)
        both = f"the same lines run as cluster {served} and {there}"
        try:
            results = self._module(served).traceable(*_meta_inputs(self.analysis, c),
                                                     wrap=_shapes_only)
        except Exception as e:  # the launcher's own refusal names the input and the layout
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            at = _shape_text(own[0]) if own else "its shapes"
            return f"{both} (at {at}), which `{call}`'s kernel cannot run: {first}"
        got = [tuple(r.shape) for r in (results if isinstance(results, tuple) else (results,))]
        # A call whose result the lines keep for later may take a kernel storing one more
        # (mapping.py's `as_stored`): each of the cluster's results must be among them.
        if any(got.count(s) < own.count(s) for s in own):
            return (f"{both}, whose results are {', '.join(map(_shape_text, own))}; "
                    f"`{call}`'s kernel would give {', '.join(map(_shape_text, got))}")
        return None
