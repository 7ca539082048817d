"""Results of the four validation gates, as frozen dataclasses.

Written by ``validate.run``; read by the console/JSON report, by diff/apply (which offer a
cluster only when ``ValidationResult.usable``) and by ``measure`` for the pytest plugin.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

GATES = ("cluster numerics", "model numerics", "benchmark", "bandwidth")


@dataclass(frozen=True)
class GateResult:
    gate: str  # one of GATES
    passed: bool
    detail: str = ""
    max_abs_err: float | None = None

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ValueError(f"unknown gate {self.gate!r}")


@dataclass(frozen=True)
class Timing:
    """Repeated timings in microseconds, by `clock`: "device" (CUDA-graph replays, the
    kernels' own time) or "host" (do_bench medians, launch included: where the kernel or
    its eager subgraph could not be captured). The host figures are kept either way."""

    kernel_us: tuple[float, ...]
    eager_us: tuple[float, ...]
    inductor_us: tuple[float, ...] = ()
    model_patched_us: tuple[float, ...] = ()  # the model with only this cluster patched
    clock: str = "host"
    kernel_host_us: tuple[float, ...] = ()  # do_bench medians: what a Python caller waits
    eager_host_us: tuple[float, ...] = ()
    resolution_us: float | None = None  # device clock: the smallest difference a sample shows

    @staticmethod
    def median(xs: tuple[float, ...]) -> float | None:
        return statistics.median(xs) if xs else None

    @property
    def kernel(self) -> float | None:
        return self.median(self.kernel_us)

    @property
    def eager(self) -> float | None:
        return self.median(self.eager_us)

    @property
    def inductor(self) -> float | None:
        return self.median(self.inductor_us)


LAUNCH_BOUND = "launch-bound"  # the regime of a kernel its launch cost dominates


@dataclass(frozen=True)
class ValidationResult:
    cluster: int
    mode: str  # "cuda", "interpreter", or "skipped" (no kernel to run)
    shape: tuple[int, ...]  # the cluster result's shape the numerics ran at
    gates: tuple[GateResult, ...]
    timing: Timing | None = None
    regime: str | None = None  # "launch-bound", "l2-resident", "dram-bound"
    fused_bytes: int = 0
    gbps: float | None = None
    peak_gbps: float | None = None
    model_speedup: float | None = None
    analysed_shape: tuple[int, ...] = ()  # the cluster result's shape in the analysis
    same_as: int | None = None  # an earlier cluster with the same kernel (checked there)

    def gate(self, name: str) -> GateResult | None:
        return next((g for g in self.gates if g.gate == name), None)

    @property
    def failed(self) -> GateResult | None:
        return next((g for g in self.gates if not g.passed), None)

    @property
    def usable(self) -> bool:
        """Offered for diff/apply: cluster numerics ran and passed, and no gate failed."""
        numerics = self.gate("cluster numerics")
        return numerics is not None and numerics.passed and self.failed is None

    @property
    def max_abs_err(self) -> float | None:
        numerics = self.gate("cluster numerics")
        return numerics.max_abs_err if numerics else None

    @property
    def cluster_speedup(self) -> float | None:
        if self.timing is None or not self.timing.kernel or self.timing.eager is None:
            return None
        return self.timing.eager / self.timing.kernel

    @property
    def status(self) -> str:
        """`verified (interpreter, 64×1024)`, `verified (interpreter, 2×16×512 of
        8×512×512)` when checked on fewer rows, `verified (same kernel as cluster 1)`,
        `verified (cuda)` or `FAILED <gate>: ...`."""
        bad = self.failed
        if bad is not None:
            err = f" (max abs err {bad.max_abs_err:.2e})" if bad.max_abs_err is not None else ""
            same = (f" (same kernel as cluster {self.same_as})"
                    if self.same_as is not None and bad.gate == "cluster numerics" else "")
            return f"FAILED {bad.gate}{same}{err}: {bad.detail}" if bad.detail else \
                f"FAILED {bad.gate}{same}{err}"
        if self.mode in ("interpreter", "cuda") and self.same_as is not None:
            return f"verified (same kernel as cluster {self.same_as})"
        if self.mode == "interpreter":
            shape = "×".join(map(str, self.shape))
            if self.analysed_shape and tuple(self.analysed_shape) != tuple(self.shape):
                shape += f" of {'×'.join(map(str, self.analysed_shape))}"
            return f"verified (interpreter, {shape})"
        if self.mode == "cuda":
            return "verified (cuda)"
        return "not verified"


@dataclass(frozen=True)
class ModelCheck:
    """Gate 2 for the whole model: every verified kernel patched in, judged against eager
    and a float64 run of the graph (``model_check.py``)."""

    passed: bool | None  # None: nothing to patch
    max_abs_err: float | None
    patched: tuple[int, ...]
    blamed: tuple[int, ...] = ()  # clusters whose kernel breaks the model output
    detail: str = ""  # what went wrong with every kernel patched in
    inputs: tuple[tuple[int, ...], ...] = ()  # the model input shapes the check ran at
    analysed_inputs: tuple[tuple[int, ...], ...] = ()  # the input shapes of the analysis
    details: tuple[tuple[int, str], ...] = ()  # per blamed cluster: what its kernel did
    # With the offered kernels (all, or all but the blamed) patched in: the worst output's
    # RMSE against a float64 run of the graph, and eager's own (None: not judged that way).
    patched_rmse: float | None = None
    eager_rmse: float | None = None
    offered_max_abs_err: float | None = None  # after a failure: the offered kernels' error

    @property
    def offered(self) -> tuple[int, ...]:
        """The patched kernels that pass together: all of them, or all but the blamed."""
        return tuple(i for i in self.patched if i not in self.blamed)

    @property
    def shrunk(self) -> bool:
        """The check ran at a smaller input shape than the analysed one (the interpreter)."""
        return bool(self.inputs) and self.inputs != self.analysed_inputs


@dataclass(frozen=True)
class ModelTiming:
    eager_us: tuple[float, ...]
    patched_us: tuple[float, ...]  # every usable kernel patched in
    clock: str = "host"  # as in Timing
    eager_host_us: tuple[float, ...] = ()
    patched_host_us: tuple[float, ...] = ()
    # torch.compile (default mode) of the traced graph, by `clock` and by wall time; empty
    # when not asked for (--vs-compile) or it failed to compile.
    compiled_us: tuple[float, ...] = ()
    compiled_host_us: tuple[float, ...] = ()
    # GPU kernels per forward (torch.profiler), None when not counted
    eager_kernels: int | None = None
    patched_kernels: int | None = None
    compiled_kernels: int | None = None
    # torch.compile of the patched graph (our kernels as operators it traces into), by
    # `clock` and by wall time; empty when not asked for or it failed
    compiled_applied_us: tuple[float, ...] = ()
    compiled_applied_host_us: tuple[float, ...] = ()

    @property
    def speedup(self) -> float | None:
        e, p = Timing.median(self.eager_us), Timing.median(self.patched_us)
        return e / p if e and p else None

    @property
    def wall_speedup(self) -> float | None:
        """Eager wall time / patched wall time: what a user calling the model gets."""
        e, p = Timing.median(self.eager_host_us), Timing.median(self.patched_host_us)
        return e / p if e and p else None


@dataclass(frozen=True)
class ValidationReport:
    results: tuple[ValidationResult, ...]
    model: ModelCheck
    mode: str  # "cuda" or "interpreter"
    device: str  # "cpu" or the GPU name
    model_timing: ModelTiming | None = None
    peak_gbps: float | None = None
    peak_source: str = ""  # "detected", "--peak-gbps", or ""
    timed: bool = False  # gates 3 and 4 ran (CUDA, and timing was not turned off)

    def result(self, index: int) -> ValidationResult | None:
        return next((r for r in self.results if r.cluster == index), None)

    @property
    def usable(self) -> tuple[int, ...]:
        return tuple(r.cluster for r in self.results if r.usable)
