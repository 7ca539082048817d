"""The analysis pipeline: load → capture → shapes → normalize → detect.

``analyze`` is the one entry point the CLI and the pytest plugin share. Detection runs
``CHECKS``: legality's checks of the graph, then a dry run of the code generator's lowering
(the way Inductor's scheduler asks its backend whether it can fuse), so every cluster
found is one ``codegen.generate`` lowers. Later passes (validate, sourcemap, report) read
an ``Analysis`` and return their own results; nothing here depends on them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn

from . import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
from .analysis import legality
from .analysis.detect import absorbable_lone_values, detect
from .analysis.group import ordered
from .analysis.recompute import recompute_plan
from .analysis.slice_recompute import slice_recompute_plan
from .analysis.types import Cluster, Failure, Rejection
from .codegen.lower import dry_run
from .errors import InputSpecError
from .ir.capture import captured, leaf_list
from .ir.cat_repeats import distinct_cat_operands
from .ir.channels import explicit_channels
from .ir.conv_bias import split_conv_bias
from .ir.duplicate import copy_cone, duplicate_values, undo
from .ir.export import label_modules
from .ir.functionalize import functionalize
from .ir.generators import copy_index_values, stray_copies
from .ir.graph import FusionGraph
from .ir.index_views import arange_indices_as_views
from .ir.linear_bias import split_linear_bias
from .ir.max_values import values_as_amax
from .ir.normalize import to_fusion_graph
from .ir.run_devices import mark_run_devices
from .ir.sdpa_mask import additive_attention_masks
from .ir.shape_checks import drop_shape_checks
from .ir.shapes import InputSpec
from .load import ModelSource, load_model_source
from .units import counted


@dataclass(frozen=True)
class Analysis:
    model_name: str
    inputs: tuple[InputSpec, ...]
    graph: FusionGraph
    clusters: tuple[Cluster, ...]
    rejections: tuple[Rejection, ...]
    # Kept for the passes that run code (validation, patching); not part of equality.
    module: nn.Module = field(compare=False, repr=False)
    graph_module: fx.GraphModule = field(compare=False, repr=False)
    # `capture="auto"` fell back to torch.export: why FX failed, one line ("" otherwise).
    capture_fallback: str = ""
    # `capture="auto"` met torch.fx.wrap-ed functions: which frontend it kept, and why.
    capture_choice: str = ""
    # The model file's bytes as imported (`analyze_file` only): the source map reads its
    # lines from them and `--apply` refuses to write a file that no longer holds them.
    source: ModelSource | None = field(default=None, compare=False, repr=False)

    @property
    def n_nodes(self) -> int:
        return len(self.graph.nodes)

    def cluster(self, index: int) -> Cluster:
        return self.clusters[index]


def as_spec(x: InputSpec | torch.Tensor | Sequence[int]) -> InputSpec:
    if isinstance(x, InputSpec):
        return x
    if isinstance(x, torch.Tensor):
        return InputSpec.of(x)  # its memory order too: a channels-last example stays so
    if isinstance(x, (tuple, list)) and all(isinstance(d, int) and d > 0 for d in x):
        return InputSpec(tuple(x))
    raise InputSpecError(f"cannot use {x!r} as an example input: pass a tensor, a shape "
                         "tuple of positive ints, or an InputSpec")


@contextlib.contextmanager
def gc_paused():
    """No cyclic garbage collection while analyzing: each full collection walks every
    live graph node and fake tensor, so a 10k-node model paid about a quarter of its
    time in them. What the passes leave behind is collected afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def analyze(model: nn.Module, *inputs: InputSpec | torch.Tensor | Sequence[int],
            capture: str = "auto", device: str | torch.device | None = None) -> Analysis:
    """Analyze `model` (put in eval mode) for the given example inputs or shapes.

    `capture`: "fx", "export", or "auto" (FX symbolic tracing, export if FX fails).
    `device`: where the model will run (and Inductor compile it), when that is not where
    its parameters are now (a model loaded on the CPU to be run on CUDA); it decides the
    lowerings that differ by device (a convolution's bias, see `ir/conv_bias.py`) and which
    values stay on the CPU there (`ir/run_devices.py`).
    """
    if not inputs:
        raise InputSpecError("no example input given: pass at least one tensor or shape")
    specs = tuple(as_spec(x) for x in inputs)
    model = model.eval()
    name = type(model).__name__
    with gc_paused():
        cap = captured(model, specs, capture)
        gm, frontend, choice = cap.gm, cap.frontend, cap.choice
        target = torch.device(device) if device is not None else None
        graph, clusters, rejections = _analyze_graph(gm, name, frontend, target, specs)
        if cap.alternative is not None:
            alt = _analyze_graph(cap.alternative, name, "export", target, specs)
            fx_merge, export_merge = _merged(clusters), _merged(alt[1])
            hidden = f"FX left {leaf_list(list(cap.leaves))} opaque (torch.fx.wrap)"
            if export_merge[0] - export_merge[1] > fx_merge[0] - fx_merge[1]:
                gm, frontend = cap.alternative, "export"
                graph, clusters, rejections = alt
                choice = (f"chose torch.export over FX: {hidden}; export fuses "
                          f"{_ops_in(export_merge)}, FX {_ops_in(fx_merge)}")
            else:
                choice = (f"kept FX: {hidden}, but torch.export fuses no more "
                          f"({_ops_in(export_merge)}, FX {_ops_in(fx_merge)})")
    return Analysis(model_name=name, inputs=specs, graph=graph,
                    clusters=clusters, rejections=rejections, module=model, graph_module=gm,
                    capture_fallback=cap.fallback, capture_choice=choice)


def _merged(clusters: Sequence[Cluster]) -> tuple[int, int]:
    """(ops in clusters, clusters): ops minus kernels is the launches fusion removes."""
    return sum(len(c.ops) for c in clusters), len(clusters)


def _ops_in(merged: tuple[int, int]) -> str:
    return f"{merged[0]} ops into {counted(merged[1], 'kernel')}"


def _analyze_graph(gm: fx.GraphModule, name: str, frontend: str, device: torch.device | None,
                   specs: Sequence[InputSpec]
                   ) -> tuple[FusionGraph, tuple[Cluster, ...], tuple[Rejection, ...]]:
    """The graph passes, then detection (again after recomputing shared values)."""
    values_as_amax(gm)
    functionalize(gm)
    drop_shape_checks(gm)
    explicit_channels(gm)
    split_linear_bias(gm)
    split_conv_bias(gm, device)
    additive_attention_masks(gm)
    arange_indices_as_views(gm)
    distinct_cat_operands(gm)
    mark_run_devices(gm, specs, frontend, device)  # before any copy: copies keep its marks
    index_copies = copy_index_values(gm)
    # Values left alone join no group before the plans below had them (detect.py)
    graph, clusters, rejections = _detect(gm, name, frontend, lone_values=False)
    if stray := stray_copies(graph, [c.nodes for c in clusters], index_copies):
        undo(gm, stray)
        graph, clusters, rejections = _detect(gm, name, frontend, lone_values=False)
    plan = recompute_plan(graph, clusters)
    # A value another consumer already copies stays out of the slices' cones.
    copied = {p.value for p in plan} | {p.consumer for p in plan}
    per_slice = [p for p in slice_recompute_plan(graph, clusters) if not copied & set(p.cone)]
    if plan or per_slice:
        copies = duplicate_values(gm, ((p.value, p.consumer) for p in plan))
        copies += [c for p in per_slice for c in copy_cone(gm, p.cone, p.slice)]
        gm.recompile()
        graph, clusters, rejections = _detect(gm, name, frontend, lone_values=False)
        while lone := _unused_copies(graph, clusters, copies):
            undo(gm, lone)
            alive = {n.name for n in gm.graph.nodes}  # a cone's inner copies go with it
            copies = [c for c in copies if c not in lone and c in alive]
            graph, clusters, rejections = _detect(gm, name, frontend, lone_values=False)
    if absorbable_lone_values(graph, {n: c.index for c in clusters for n in c.nodes}):
        graph, clusters, rejections = _detect(gm, name, frontend)
    return graph, clusters, rejections


def _unused_copies(graph: FusionGraph, clusters: Sequence[Cluster], copies: Sequence[str]
                   ) -> list[str]:
    """Every copy of a value one of whose copies no kernel took, or its kernel stores (it
    joined another kernel than its consumer's): that value stays stored, so its other
    consumers would re-read its operands for nothing."""
    owner = {n: c for c in clusters for n in c.nodes}
    stored = {graph[c].copy_of for c in copies if c not in owner or c in owner[c].outputs}
    return [c for c in copies if graph[c].copy_of in stored]


def lowers(g: FusionGraph, group: Collection[str]) -> Failure | None:
    """The code generator plans the group (a dry run of lowering), or the nodes its error
    blames, else the group's last node."""
    error = dry_run(g, group)
    if error is None:
        return None
    culprits = tuple(n for n in error.nodes if n in group) or tuple(ordered(g, group))[-1:]
    return Failure("lowering", culprits, f"the code generator cannot lower it: {error}")


# Legality's checks of the graph, then the code generator's answer (module docstring).
CHECKS: tuple[tuple[str, legality.Check], ...] = (*legality.CHECKS, ("lowering", lowers))


def _detect(gm: fx.GraphModule, name: str, frontend: str, lone_values: bool = True
            ) -> tuple[FusionGraph, tuple[Cluster, ...], tuple[Rejection, ...]]:
    graph = to_fusion_graph(gm, name, frontend=frontend)
    if frontend == "export":
        graph = label_modules(graph, gm)
    return graph, *detect(graph, CHECKS, lone_values)


def analyze_file(path: str | Path, specs: Sequence[InputSpec],
                 class_name: str | None = None, capture: str = "auto",
                 device: str | torch.device | None = None,
                 model_kwargs: Mapping[str, Any] | None = None) -> Analysis:
    """Load the model from `path` (see `load.load_model`: a file, `file.py:NAME` or
    `package.module:NAME`, built with `model_kwargs`) and analyze it.

    A floating `--dtype` other than the parameters' (bfloat16 inputs, float32
    weights) runs the model in that dtype: its floating parameters and buffers
    are cast, as `model.to(dtype)` would, so the analysis matches a real bf16 run.
    """
    model, source = load_model_source(path, class_name, model_kwargs)
    floating = {s.dtype for s in specs if s.dtype.is_floating_point}
    if len(floating) == 1 and len(floating) == len({s.dtype for s in specs}):
        model = model.to(floating.pop())
    return dataclasses.replace(analyze(model, *specs, capture=capture, device=device),
                               source=source)
