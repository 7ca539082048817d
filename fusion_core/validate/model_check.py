"""Gate 2, model numerics: every verified kernel patched into the traced graph at once.

Reads a ``Recording`` (the traced graph, its inputs and eager output) and the launchers of
the kernels that passed gate 1; writes a ``ModelCheck``.

The rule, per model output (the idea of torch's own accuracy checker, ``fp64_ref`` in
``torch._dynamo.utils.same``): run the same graph in float64 (``float64.py``) and measure
both the eager graph (model dtype) and the patched graph against it. The patched output
passes when

    RMSE(patched - float64) <= M x RMSE(eager - float64) + eps(dtype) x RMS(float64)

with M = 3 for float16/bfloat16 outputs and 2 otherwise. A kernel that computes in float32
and rounds once is usually closer to float64 than eager, which rounds after every op, yet it
rounds differently: one bf16 step at a magnitude near 10 is 0.0625, beyond any elementwise
tolerance next to a near-zero value the model's residual adds make. M leaves room for such
steps amplified downstream (torch uses 3 for 16-bit results for the same reason); the last
term is one rounding step of the output dtype at the output's typical magnitude, so an output
eager computes exactly may still be rounded once. A real bug (a wrong constant) moves every
element it touches and its RMSE grows with it.

- float32/float64 outputs within the elementwise tolerance (``MODEL_TOL``) pass as before;
  beyond it the float64 rule may still pass them. For float16/bfloat16 outputs the float64
  rule is the judge whenever a float64 run exists: their elementwise tolerance (10 %) is
  wide enough to pass a constant off by a few percent. Without a float64 run (an op that
  has no float64 kernel) the elementwise tolerance decides. NaN passes only where eager has
  NaN too (``numerics.compare_one``); integer and bool outputs must be equal; a non-finite
  value anywhere leaves the elementwise verdict.
- A failure is bisected: kernels are patched in halves, keeping every group that passes
  together, until each kernel that breaks the check is found (about 2 log2(n) runs per
  culprit, and one run of it alone, which tells a kernel wrong by itself from one that fails
  only beside others). Those are blamed, each with its own reason; every other kernel is
  offered, and the offered set has been run and passed together. A failure the graph shows
  with no kernel patched in (an output eager makes NaN everywhere) is bisected for no culprit:
  every kernel fails with that reason, none blamed alone.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..units import counted, plural
from .capture_check import NOT_THE_CAPTURE, graph_matches_model
from .float64 import graph_in_float64, inputs_in_float64
from .numerics import MODEL_TOL, as_tuple, compare_one, one_line
from .prepare import Recording
from .subgraph import patch
from .types import ModelCheck

LOW_PRECISION = (torch.float16, torch.bfloat16)


def error_multiplier(dtype: torch.dtype) -> float:
    """How many times eager's own error against float64 a patched output may have."""
    return 3.0 if dtype in LOW_PRECISION else 2.0


@dataclass(frozen=True)
class Verdict:
    """One patched run judged: `patched_rmse`/`eager_rmse` are the worst output's errors
    against float64 (by their ratio), None when no output was judged that way."""

    passed: bool
    max_abs_err: float | None  # patched vs eager
    why: str = ""
    patched_rmse: float | None = None
    eager_rmse: float | None = None


@dataclass(frozen=True)
class Float64Reference:
    """The float64 run's outputs, or why there is none."""

    outputs: tuple[torch.Tensor, ...] | None
    missing: str = ""


def float64_reference(rec: Recording) -> Float64Reference:
    try:
        wide = graph_in_float64(rec.gm)
        with torch.no_grad():
            out = as_tuple(wide(*inputs_in_float64(rec.inputs)))
    except Exception as e:  # noqa: BLE001 - an op without float64 support: no reference
        return Float64Reference(None, f"no float64 run of the graph ({one_line(e)})")
    if len(out) != len(as_tuple(rec.model_out)):
        return Float64Reference(None, "the float64 run returned other outputs")
    return Float64Reference(out)


def rms(t: torch.Tensor) -> float:
    return float(t.double().square().mean().sqrt()) if t.numel() else 0.0


def judge(
    actual: Sequence[Any],
    expected: Sequence[torch.Tensor],
    reference: Callable[[], Float64Reference],
) -> Verdict:
    """The rule above over paired outputs; `reference` is called only when needed."""
    if len(actual) != len(expected):
        return Verdict(
            False, None,
            f"patched graph returned {counted(len(actual), 'output')}, eager {len(expected)}"
        )
    worst_err, worst_ratio, rmses = 0.0, -1.0, (None, None)
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        ok, err, why = compare_one(i, a, e, MODEL_TOL)
        if err is None or math.isnan(err):
            return Verdict(False, err, why)  # not comparable, or NaN: nothing excuses it
        worst_err = max(worst_err, err)
        if not e.is_floating_point() or (ok and e.dtype not in LOW_PRECISION):
            if not ok:
                return Verdict(False, worst_err, why)
            continue
        ref = reference()
        r = ref.outputs[i] if ref.outputs is not None else None
        if r is not None and r.shape != e.shape:
            r = None  # the float64 run took another path: no reference for this output
        if r is None or not all(bool(t.isfinite().all()) for t in (a, e, r)):
            if not ok:
                missing = f"; {ref.missing}" if ref.missing else ""
                return Verdict(False, worst_err, why + missing)
            continue
        patched_rmse, eager_rmse = rms(a.double() - r), rms(e.double() - r)
        bound = error_multiplier(e.dtype) * eager_rmse + torch.finfo(e.dtype).eps * rms(r)
        ratio = patched_rmse / eager_rmse if eager_rmse else math.inf if patched_rmse else 0.0
        if patched_rmse > bound:
            return Verdict(
                False,
                worst_err,
                (
                    f"output {i}: RMSE against float64 {patched_rmse:.3g}, eager's {eager_rmse:.3g}"
                    f": beyond {error_multiplier(e.dtype):g}x eager's + one {_name(e.dtype)} "
                    f"step ({bound:.3g})"
                ),
                patched_rmse,
                eager_rmse,
            )
        if ratio > worst_ratio:
            worst_ratio, rmses = ratio, (patched_rmse, eager_rmse)
    return Verdict(True, worst_err, "", *rmses)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def model_check(rec: Recording, launchers: dict[int, Callable],
                analysed: tuple[tuple[int, ...], ...] | None = None) -> ModelCheck:
    """Gate 2 at `rec`'s shape; on failure, the kernels that cause it, each with its reason.
    `analysed`: the analysis' input shapes, when `rec` ran at smaller ones."""
    inputs = tuple(tuple(s.shape) for s in rec.specs)
    analysed = inputs if analysed is None else analysed
    reference = functools.cache(lambda: float64_reference(rec))
    runs: dict[frozenset[int], Verdict] = {}

    def run(indices: Sequence[int]) -> Verdict:
        key = frozenset(indices)
        if key not in runs:
            runs[key] = _run_patched(rec, launchers, sorted(key), reference)
        return runs[key]

    indices = sorted(launchers)

    def failed(max_abs_err: float | None, blamed: tuple[int, ...], why: str,
               details: tuple[tuple[int, str], ...], offered: Verdict | None = None
               ) -> ModelCheck:
        """A failed check of every kernel; `offered`: the run of those not blamed."""
        return ModelCheck(
            False,
            max_abs_err,
            tuple(indices),
            blamed,
            why,
            inputs=inputs,
            analysed_inputs=analysed,
            details=details,
            patched_rmse=offered.patched_rmse if offered is not None else None,
            eager_rmse=offered.eager_rmse if offered is not None else None,
            offered_max_abs_err=offered.max_abs_err if offered is not None else None,
        )

    everything = run(indices)
    if not everything.passed and not run([]).passed:
        # The graph fails with no kernel in it (eager's output NaN everywhere): bisecting
        # would blame whichever kernel it reached first, so none is blamed alone and none
        # is vouched for either.
        why = (f"the traced graph fails this check with no kernel patched in "
               f"({run([]).why}): eager's own result, not a kernel's")
        return failed(everything.max_abs_err, tuple(indices), why,
                      tuple((i, why) for i in indices))
    culprits = () if everything.passed else _culprits(run, (), tuple(indices))
    blamed = tuple(i for i, _ in culprits)
    kept = tuple(i for i in indices if i not in blamed)
    if not kept:
        return failed(everything.max_abs_err, blamed, everything.why, culprits)
    same, graph_err, differs = graph_matches_model(rec)
    if same is False:
        # No kernel is at fault, but none can be vouched for against the model either:
        # none is offered as an edit.
        why = differs if differs.startswith(NOT_THE_CAPTURE) else (
            f"the traced graph differs from the model itself before any kernel is "
            f"patched in ({differs}): a capture problem, not a kernel's (try the other "
            "--capture)"
        )
        return failed(graph_err, tuple(indices), why, tuple((i, why) for i in indices))
    offered = run(kept)  # passed: the bisection kept only groups that pass together
    if everything.passed:
        # A model that cannot be compared with its graph says why, on the passing line.
        return ModelCheck(
            True,
            everything.max_abs_err,
            tuple(indices),
            inputs=inputs,
            analysed_inputs=analysed,
            detail="" if same else differs,
            patched_rmse=offered.patched_rmse,
            eager_rmse=offered.eager_rmse,
        )
    return failed(everything.max_abs_err, blamed, everything.why, culprits, offered)


def _run_patched(
    rec: Recording,
    launchers: dict[int, Callable],
    indices: list[int],
    reference: Callable[[], Float64Reference],
) -> Verdict:
    try:
        patched = patch(rec.gm, {i: (rec.clusters[i], launchers[i]) for i in indices},
                        rec.analysis.graph)
        with torch.no_grad():
            out = patched(*[t.clone() for t in rec.inputs])
    except Exception as e:  # noqa: BLE001 - PatchError or a failing launcher
        return Verdict(False, None, one_line(e))
    return judge(as_tuple(out), as_tuple(rec.model_out), reference)


def _culprits(
    run: Callable[[Sequence[int]], Verdict], base: tuple[int, ...], candidates: tuple[int, ...]
) -> tuple[tuple[int, str], ...]:
    """The candidates that fail the check when patched in beside `base` (which passes, or is
    empty), with their reasons; `base` plus the others passes together afterwards."""
    if run(base + candidates).passed:
        return ()
    if len(candidates) == 1:
        (index,) = candidates
        alone = run(candidates)
        if not alone.passed or not base:
            return ((index, alone.why or "fails the model output"),)
        beside = ", ".join(map(str, sorted(base)))
        return (
            (index, f"passes alone, not beside {plural(len(base), 'cluster')} {beside}: "
                    f"{run(base + candidates).why}"),
        )
    half = len(candidates) // 2
    left = _culprits(run, base, candidates[:half])
    blamed = {i for i, _ in left}
    kept = base + tuple(i for i in candidates[:half] if i not in blamed)
    return left + _culprits(run, kept, candidates[half:])
