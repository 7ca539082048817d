"""Run the four gates for every cluster of an analysis.

Reads an ``Analysis``, its ``KernelSet`` (every kernel generated once; built here when the
caller has none) or a kernel provider (tests hand in their own launchers); writes a
``ValidationReport``.

- The kernels checked are the ones generated for the analysed shape, the ones ``--out-dir``
  and ``--apply`` write: launchers read sizes at run time. Identical kernels (same source up
  to names) are loaded and checked once; every cluster using one is reported.
- Without CUDA, kernels run under Triton's interpreter on smaller problems (``shrink.py``):
  gate 1 on a few rows of the cluster's real values, recorded at a reduced batch, with the
  row length kept (so the launcher picks the block, rows per program and column loop of the
  real shape); gate 2 with the whole model at the smallest input shape it runs at with the
  same graph (``model_shape.py``: every input dim it allows cut), retried at the reduced
  batch if it fails there. With CUDA, everything runs natively at the analysed shape.
- Gate 1 compares each kernel with its eager subgraph; gate 2 (``model_check.py``) patches
  every kernel that passed into a copy of the traced graph and judges the model output
  against eager and a float64 run of the graph (on failure it bisects the kernels to find
  the culprits, each with its own reason, and offers the others); gates 3 and 4
  (CUDA only, ``timed.py``) time the kernel, the eager subgraph and the model, about 2 s per
  cluster: ``timing=False`` leaves them out (the report says ``timed=False``).
- A failure is recorded in the cluster's result and never raises.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from ..analysis.types import Cluster
from ..ir.views import Unsqueeze
from ..pipeline import Analysis
from ..report.progress import NO_PROGRESS, StepProgress
from ..units import counted
from .floors import precision_floors
from .inputs import reduced_specs, result_shape
from .kernels import KernelSet, build_kernels
from .model_check import model_check
from .model_shape import smallest_matching
from .numerics import check_cluster, one_line
from .prepare import Matched, Recording, record_at, recording
from .shrink import TARGET_ROWS, cut_shape, row_shape, slice_rows
from .subgraph import eager_subgraph, launch_args
from .types import GateResult, ModelCheck, ValidationReport, ValidationResult

if TYPE_CHECKING:
    from ..codegen.plan import TensorArg


@dataclass(frozen=True)
class LoadedKernel:
    launcher: Callable[..., Any]  # clusterN(*inputs) -> output or tuple of outputs
    module: ModuleType | None  # the module the launcher lives in (its allocations get poisoned)
    path: Path | None = None


KernelProvider = Callable[[Analysis, Cluster, Path], LoadedKernel]


def load_generated(kernel: Any, workdir: Path) -> LoadedKernel:
    """Write a ``codegen.Kernel`` to `workdir` and import it from there (``@triton.jit``
    reads its function's source file)."""
    from .. import codegen

    (path,) = codegen.write_kernels([kernel], workdir)
    module = codegen.load_kernel(path)
    return LoadedKernel(getattr(module, kernel.name), module, path)


def codegen_provider(analysis: Analysis, cluster: Cluster, workdir: Path) -> LoadedKernel:
    """Generate the cluster's kernel with fusion_core.codegen, write it, import it from disk."""
    from .. import codegen

    return load_generated(codegen.generate(analysis, cluster), workdir)


def use_interpreter_without_cuda() -> None:
    """Triton reads TRITON_INTERPRET when a kernel is decorated: set it before any load."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def float32_switches() -> tuple[tuple[Any, str, Any], ...]:
    """(object, attribute, value for full float32) of the switches that allow TF32: torch's
    per-backend precision settings where it has them (mixing them with the older
    `allow_tf32` flags is an error there), else those flags."""
    backends = torch.backends
    conv = getattr(backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        return ((backends.cuda.matmul, "fp32_precision", "ieee"),
                (conv, "fp32_precision", "ieee"))
    return ((backends.cuda.matmul, "allow_tf32", False), (backends.cudnn, "allow_tf32", False))


@contextlib.contextmanager
def exact_float32() -> Iterator[None]:
    """float32 convolutions and matmuls without TF32 while checking numerics.

    cuDNN convolutions default to TF32 on CUDA: a one-ulp difference between a kernel's
    output and eager's then flips the 10-bit rounding of the next convolution's inputs, and
    a deep CNN turns that into errors far above the model tolerance although every kernel is
    right. Both the reference run and the patched one compute in full float32; timings keep
    the user's settings. No capture may run inside: torch.export reads the legacy
    `cudnn.allow_tf32`, which raises once a per-backend precision has been set (torch 2.13),
    and a failed capture silently left the numerics at the analysed shape."""
    switches = float32_switches()
    saved = [getattr(obj, name) for obj, name, _ in switches]
    try:
        for obj, name, exact in switches:
            setattr(obj, name, exact)
        yield
    finally:
        for (obj, name, _), value in zip(switches, saved, strict=True):
            setattr(obj, name, value)


def validate(analysis: Analysis, provider: KernelProvider | None = None, *,
             kernels: KernelSet | None = None, workdir: str | Path | None = None,
             peak_gbps: float | None = None, inductor: bool = False, seed: int = 0,
             target_rows: int = TARGET_ROWS, progress: StepProgress = NO_PROGRESS,
             timing: bool = True) -> ValidationReport:
    """Run every gate for every cluster; failures are recorded, never raised.

    `provider` replaces the generated kernels (each cluster loads its own); `workdir` is
    where generated kernels are imported from (a temporary folder by default); with
    `timing=False` a CUDA run checks numerics only (gates 1 and 2, no timings)."""
    use_interpreter_without_cuda()
    if provider is None and kernels is None:
        kernels = build_kernels(analysis)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="fusion-validate-"))
        Path(workdir).mkdir(parents=True, exist_ok=True)
        # Inference only: eager timings must not pay for autograd bookkeeping.
        stack.enter_context(torch.no_grad())
        return _Validation(analysis, provider, kernels, Path(workdir), peak_gbps, inductor,
                           seed, target_rows, progress, timing).run()


@dataclass
class _Validation:
    analysis: Analysis
    provider: KernelProvider | None
    kernels: KernelSet | None
    workdir: Path
    peak_gbps: float | None
    inductor: bool
    seed: int
    target_rows: int
    progress: StepProgress
    timing: bool

    @property
    def cuda(self) -> bool:
        return torch.cuda.is_available()

    def same_as(self, index: int) -> int | None:
        if self.provider is not None or self.kernels is None:
            return None  # a provider's launchers are the caller's: no two are assumed equal
        return self.kernels.same_as.get(index)

    def run(self) -> ValidationReport:
        cuda = self.cuda
        device = "cuda" if cuda else "cpu"
        checked = [c.index for c in self.analysis.clusters if self.same_as(c.index) is None]
        try:
            # Without CUDA the model is captured again at a smaller shape: that runs with
            # the user's TF32 flags (see `exact_float32`), which the CPU never reads anyway.
            with self.progress.step("recording activations" + (
                    "" if cuda else " at a reduced batch"), 1), (
                    exact_float32() if cuda else contextlib.nullcontext()):
                wide = recording(self.analysis, [] if cuda else
                                 [reduced_specs(self.analysis, self.target_rows)],
                                 keep_rows=True, device=device, seed=self.seed,
                                 clusters=[c.index for c in self.analysis.clusters] if cuda
                                 else checked)
        except Exception as e:  # noqa: BLE001 - the model itself fails on random inputs
            return self._unrunnable(f"the model did not run on random inputs: {one_line(e)}")
        gates: dict[int, list[GateResult]] = {}
        shapes: dict[int, tuple[int, ...]] = {}
        launchers: dict[int, Callable] = {}
        label = (f"cluster numerics: {counted(len(checked), 'distinct kernel')} for "
                 f"{counted(len(self.analysis.clusters), 'cluster')}"
                 + ("" if cuda else " under the Triton interpreter"))
        with self.progress.step(label, len(checked)) as advance:
            for i in checked:
                gate, shape, launcher = self._check(wide, i)
                gates[i], shapes[i] = [gate], shape
                if gate.passed:
                    launchers[i] = launcher
                advance()
        for c in self.analysis.clusters:  # the same kernel: the same verdict
            rep = self.same_as(c.index)
            if rep is not None:
                gates[c.index], shapes[c.index] = list(gates[rep]), shapes[rep]
                if rep in launchers:
                    launchers[c.index] = launchers[rep]
        model = self._model(wide, launchers)  # the timings below keep the user's TF32 settings
        for i in launchers:
            why = dict(model.details).get(i)
            # An offered kernel's error is the one it has beside the other offered kernels.
            err = model.max_abs_err if model.passed or why is not None \
                else model.offered_max_abs_err
            gates[i].append(GateResult("model numerics", why is None, why or "", err))
        if cuda and self.timing:
            from .timed import measure_all

            usable = {i: k for i, k in launchers.items() if i not in model.blamed}
            report = measure_all(self.analysis, wide, usable, gates, model, self.peak_gbps,
                                 self.inductor)
            return replace(report, results=tuple(self._annotate(r) for r in report.results))
        # Untimed; on CUDA every cluster is "cuda", as in a timed run (timed.measure_all).
        mode = "cuda" if cuda else "interpreter"
        results = tuple(self._annotate(ValidationResult(
            c.index, mode if cuda or c.index in launchers else "skipped", shapes[c.index],
            tuple(gates[c.index]), fused_bytes=c.traffic.fused_bytes))
            for c in self.analysis.clusters)
        return ValidationReport(results, model, mode,
                                torch.cuda.get_device_name() if cuda else "cpu")

    def _annotate(self, r: ValidationResult) -> ValidationResult:
        return replace(r, analysed_shape=result_shape(self.analysis, r.cluster),
                       same_as=self.same_as(r.cluster))

    def _load(self, index: int) -> LoadedKernel:
        if self.provider is not None:
            return self.provider(self.analysis, self.analysis.clusters[index], self.workdir)
        assert self.kernels is not None
        if index in self.kernels.failed:
            raise _NoKernel(f"it cannot be lowered: {self.kernels.failed[index]}")
        return load_generated(self.kernels.kernels[index], self.workdir)

    def _check(self, rec: Recording, index: int
               ) -> tuple[GateResult, tuple[int, ...], Callable | None]:
        """Gate 1 for one kernel: (result, the result shape it ran at, its launcher)."""
        c = rec.clusters[index]
        shape = result_shape(rec.analysis, c.index)
        try:
            kernel = self._load(index)
            sub = eager_subgraph(rec.gm, c)
        except _NoKernel as e:
            return GateResult("cluster numerics", False, f"no kernel: {e}"), shape, None
        except Exception as e:  # noqa: BLE001 - a codegen failure fails gate 1 for this cluster
            return GateResult("cluster numerics", False, f"no kernel: {one_line(e)}"), shape, None
        args = [rec.values[n] for n in sub.inputs]
        extras = [rec.values[n] for n in sub.extras]
        floors = precision_floors(rec.analysis.graph, c)
        if not self.cuda and not any(isinstance(v, torch.Tensor) for v in extras):
            cut = _cut_rows(rec, c, args, self.target_rows)
            if cut is not None:
                cut_args, cut_result = cut
                gate = check_cluster(kernel.launcher, kernel.module, sub.module, cut_args,
                                     cut_args + extras, floors)
                # An eager subgraph with sizes baked in cannot run on fewer rows.
                if not gate.detail.startswith("eager subgraph failed"):
                    return gate, cut_result, kernel.launcher
        args = [v.clone() if isinstance(v, torch.Tensor) else v for v in args]
        gate = check_cluster(kernel.launcher, kernel.module, sub.module,
                             launch_args(args, "cuda" if self.cuda else "cpu"), args + extras,
                             floors)
        return gate, shape, kernel.launcher

    def _model(self, wide: Recording, launchers: dict[int, Callable]) -> ModelCheck:
        if not launchers:
            return ModelCheck(None, None, ())
        with self.progress.step(f"model numerics: {counted(len(launchers), 'kernel')} patched in",
                                len(launchers)):
            analysed = tuple(tuple(s.shape) for s in self.analysis.inputs)
            if self.cuda:
                with exact_float32():
                    return model_check(wide, launchers, analysed)
            try:  # captures the model again: outside `exact_float32`
                found: Matched | None = smallest_matching(self.analysis, self.seed)
            except Exception:  # noqa: BLE001 - fall back to the reduced batch
                found = None
            with exact_float32():
                try:
                    small = wide if found is None or found[0] is self.analysis else record_at(
                        found, device="cpu", seed=self.seed)
                except Exception:  # noqa: BLE001 - fall back to the reduced batch
                    small = wide
                model = model_check(small, launchers, analysed)
                if model.passed is False and small.specs != wide.specs:
                    # A failure at the small shape is confirmed where the rows are the real ones.
                    model = model_check(wide, launchers, analysed)
            return model

    def _unrunnable(self, why: str) -> ValidationReport:
        mode = "cuda" if self.cuda else "interpreter"
        results = tuple(ValidationResult(c.index, "skipped", result_shape(self.analysis, c.index),
                                         (GateResult("cluster numerics", False, why),),
                                         fused_bytes=c.traffic.fused_bytes)
                        for c in self.analysis.clusters)
        return ValidationReport(results, ModelCheck(None, None, (), detail=why), mode,
                                torch.cuda.get_device_name() if mode == "cuda" else "cpu")


class _NoKernel(Exception):
    pass


def _cut_rows(rec: Recording, c: Cluster, args: list[Any], target_rows: int
              ) -> tuple[list[Any], tuple[int, ...]] | None:
    """The kernel's inputs cut to a few rows of its iteration shape, and the result shape
    there; None when the iteration shape is small already or cannot be worked out."""
    from .. import codegen

    try:
        plan = codegen.plan(rec.analysis.graph, c)
    except Exception:  # noqa: BLE001 - check at the recorded shape instead
        return None
    if plan.skeleton == "reduction" and plan.reduced > 1:
        return None  # the columns span several dims: a cut one would shorten the rows
    per_row = [_per_row(t) for t in (*plan.inputs, *plan.outputs)]
    if None in per_row:
        return None  # kernel dims (an index map) are not the user's leading dims
    if plan.generated:
        return None  # a generated value's shape is fixed in the kernel, rows and all
    small = row_shape(plan.domain, target_rows)
    if small == tuple(plan.domain) or len(plan.inputs) != len(args) or not plan.outputs:
        return None
    cut = [slice_rows(v, plan.domain, small, bool(row)) if isinstance(v, torch.Tensor) else v
           for v, row in zip(args, per_row, strict=False)]
    return cut, cut_shape(result_shape(rec.analysis, c.index), plan.domain, small,
                          bool(per_row[-1]))


def _per_row(t: TensorArg) -> bool | None:
    """Whether the kernel reads or writes `t` with one value per row (a result reduced
    without keepdim: its index map only adds the last dim); None when its map does more."""
    if not t.view:
        return False
    return t.view == (Unsqueeze((-1,)),) or None

