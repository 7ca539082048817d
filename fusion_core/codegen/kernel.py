"""Code generation entry points: cluster → ``Kernel`` (source text), files on disk, import.

Reads an ``Analysis`` (graph and clusters); writes one standalone Python file
per cluster: the ``@triton.jit`` kernel (``emit.py``), its launcher and
autograd wrapper (``launcher.py``). Files are written atomically and loaded
from disk, because ``@triton.jit`` reads its function's source file.

Layout choice: tensors are indexed through their own strides (broadcast dims
get no index term, see ``layout.py``), so sliced buffers and broadcast
operands are read in place. The launcher copies an input (dense, its dims in
the analysed memory order: contiguous for a contiguous one) only when its
runtime strides do not fit the pattern the kernel was generated for; at the
analyzed shapes that never happens, so the traffic estimate needs no copy term.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from ..analysis.types import Cluster
from ..fileio import write_atomic
from . import emit, launcher
from .launcher import Tuning
from .lower import KernelPlan, plan

if TYPE_CHECKING:
    from ..pipeline import Analysis


@dataclass(frozen=True)
class Kernel:
    cluster_index: int
    name: str  # "cluster0": file stem, launcher name
    source: str  # the whole standalone .py file
    skeleton: str  # "elementwise" | "reduction"
    inputs: tuple[str, ...]  # launcher argument order (= cluster.inputs)
    outputs: tuple[str, ...]  # returned in this order (= cluster.outputs)
    looped: bool  # reduction rows loop over column blocks
    int64_index: bool
    tiled: bool  # elementwise over 2-D tiles (a transposed or sliced input, see lower.py)
    tuning: Tuning

    @property
    def filename(self) -> str:
        return f"{self.name}.py"


def needs_loop(p: KernelPlan, tuning: Tuning) -> bool:
    return p.skeleton == "reduction" and bool(p.domain) and p.domain[-1] > tuning.max_block


def render(p: KernelPlan, model: str, cluster: Cluster, tuning: Tuning, looped: bool) -> str:
    body, params = emit.kernel(p, looped)
    where = None
    if cluster.lines is not None:  # a path relative to the working directory when inside it
        rel = os.path.relpath(cluster.lines.file)
        file = cluster.lines.file if rel.startswith("..") else rel
        where = replace(cluster.lines, file=file).where
    lines = (launcher.header(p, model, cluster.category, where)
             + launcher.constants(p, tuning, looped) + ["", *body, "", ""]
             + launcher.launcher(p, params, looped))
    return "\n".join(lines).rstrip() + "\n"


def generate(analysis: Analysis, cluster: Cluster, tuning: Tuning | None = None,
             looped: bool | None = None, tiled: bool | None = None) -> Kernel:
    """Lower and emit one cluster. `looped` forces (or forbids) the column loop of a
    reduction, `tiled` the 2-D tiles of an elementwise kernel (benchmarks compare both)."""
    tuning = tuning or Tuning()
    p = plan(analysis.graph, cluster)
    if tiled is not None and p.skeleton == "elementwise" and p.rank >= 2:
        p = replace(p, tiled=tiled)
    loop = needs_loop(p, tuning) if looped is None else looped and p.skeleton == "reduction"
    return Kernel(cluster_index=cluster.index, name=p.name,
                  source=render(p, analysis.model_name, cluster, tuning, loop),
                  skeleton=p.skeleton, inputs=tuple(cluster.inputs),
                  outputs=tuple(cluster.outputs), looped=loop, int64_index=p.int64,
                  tiled=p.tiled, tuning=tuning)


def generate_all(analysis: Analysis, tuning: Tuning | None = None) -> tuple[Kernel, ...]:
    return tuple(generate(analysis, c, tuning) for c in analysis.clusters)


def write_kernels(kernels: Iterable[Kernel], out_dir: str | Path) -> list[Path]:
    """Write `clusterN.py` for each kernel (temp file + rename); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in kernels:
        path = out / k.filename
        write_atomic(path, k.source)
        paths.append(path)
    return paths


def load_kernel(path: str | Path) -> ModuleType:
    """Import a generated kernel file from disk (a fresh module each call)."""
    path = Path(path).resolve()
    name = f"fusion_kernel_{path.stem}_{abs(hash(str(path))):x}_{len(sys.modules)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import a kernel from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton and inspect look modules up by name
    spec.loader.exec_module(module)
    return module
