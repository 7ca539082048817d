"""Numerics: compare a kernel's outputs with eager, with outputs poisoned before the run.

Reads a launcher, the eager subgraph and their inputs; writes a ``GateResult``. The
launcher allocates its outputs; while it runs, allocations made *from the launcher's own
module* are filled with a poison value (NaN for floats, the dtype's minimum for ints), so an
element the kernel never writes shows up as NaN or a huge error. NaN never passes where
eager has a number; where eager has NaN too (softmax over a fully masked row), it agrees,
unless the whole output is NaN, and once the kernel runs again on outputs poisoned with a
number it must still be NaN there (else the kernel never wrote it: the NaN was the poison).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.fx as fx

from ..units import counted
from .float64 import graph_in_float64
from .types import GateResult


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


# Kernels compute in float32 and round once; eager rounds after every op, hence the slack.
CLUSTER_TOL: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(1e-5, 1e-4),
    torch.float64: Tolerance(1e-9, 1e-7),
    torch.float16: Tolerance(1e-3, 1e-2),
    torch.bfloat16: Tolerance(1e-2, 5e-2),
}
# The whole model amplifies per-op rounding through matmuls and norms.
MODEL_TOL: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(1e-4, 1e-3),
    torch.float64: Tolerance(1e-8, 1e-6),
    torch.float16: Tolerance(1e-2, 2e-2),
    torch.bfloat16: Tolerance(5e-2, 1e-1),
}
EXACT = Tolerance(0.0, 0.0)  # ints and bools
# Why an output that is NaN in every element, in eager and the kernel alike, fails: the
# comparison saw no value (a phrase other modules and the fuzz recognise).
EAGER_NAN_EVERYWHERE = "is NaN everywhere, as eager's is: nothing to compare"
_ALLOCATORS = ("empty", "empty_like", "empty_strided")  # zeros/full are meant as values


def tolerance(dtype: torch.dtype, table: dict[torch.dtype, Tolerance]) -> Tolerance:
    return table.get(dtype, EXACT)


def judged_tolerance(dtype: torch.dtype, floor: torch.dtype | None,
                     table: dict[torch.dtype, Tolerance]) -> Tolerance:
    """`dtype`'s tolerance, loosened to `floor`'s for a float computed through that narrower
    dtype (``floors.py``)."""
    own = tolerance(dtype, table)
    if floor is None or not dtype.is_floating_point:
        return own
    low = tolerance(floor, table)
    return Tolerance(max(own.atol, low.atol), max(own.rtol, low.rtol))


def poison_(t: torch.Tensor, fill: float = math.nan) -> torch.Tensor:
    """Fill `t` with `fill` (floats; NaN by default), True (bools) or the dtype's minimum."""
    if t.dtype.is_floating_point:
        return t.fill_(fill)
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(torch.iinfo(t.dtype).min)


@contextlib.contextmanager
def poisoned_allocations(module: ModuleType | None, fill: float = math.nan) -> Iterator[None]:
    """Poison tensors allocated by code in `module` (the launcher) while the block runs;
    float tensors with `fill`."""
    if module is None:
        yield
        return
    owner = module.__dict__
    originals = {name: getattr(torch, name) for name in _ALLOCATORS if hasattr(torch, name)}

    def wrap(fn: Callable) -> Callable:
        def alloc(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if sys._getframe(1).f_globals is owner and isinstance(out, torch.Tensor):
                poison_(out, fill)
            return out
        return alloc

    try:
        for name, fn in originals.items():
            setattr(torch, name, wrap(fn))
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)


def as_tuple(x: Any) -> tuple[Any, ...]:
    """The tensors of an output (a tensor, a tuple, or a nested structure such as a model
    output dataclass), in pytree order."""
    if isinstance(x, torch.Tensor):
        return (x,)
    from torch.utils._pytree import tree_leaves

    return tuple(t for t in tree_leaves(x) if isinstance(t, torch.Tensor))


def compare(actual: Sequence[Any], expected: Sequence[Any],
            table: dict[torch.dtype, Tolerance], floors: Sequence[torch.dtype | None] = ()
            ) -> tuple[bool, float | None, str]:
    """(passed, max abs error, what went wrong) over paired outputs. `floors`: per output,
    a narrower dtype it was computed through, whose tolerance applies where it is looser
    (``floors.py``)."""
    if len(actual) != len(expected):
        return False, None, (f"kernel returned {counted(len(actual), 'output')}, "
                             f"eager {len(expected)}")
    worst = 0.0
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        floor = floors[i] if i < len(floors) else None
        passed, err, why = compare_one(i, a, e, table, floor)
        if err is not None:
            worst = max(worst, err) if err == err else err
        if not passed:
            return False, worst if err is not None else None, why
    return True, worst, ""


def compare_one(i: int, a: Any, e: torch.Tensor, table: dict[torch.dtype, Tolerance],
                floor: torch.dtype | None = None) -> tuple[bool, float | None, str]:
    """(passed, max abs error, what went wrong) for output `i`; the error is None when the
    output is not comparable at all (not a tensor, another shape) and NaN when it has NaN."""
    if not isinstance(a, torch.Tensor):
        return False, None, f"output {i} is {type(a).__name__}, not a tensor"
    if tuple(a.shape) != tuple(e.shape):
        return False, None, f"output {i} has shape {tuple(a.shape)}, eager {tuple(e.shape)}"
    a64, e64 = a.detach().cpu().double(), e.detach().cpu().double()
    # Eager's own NaN kept is agreement (softmax over a row a random bool mask hides whole),
    # unless eager has nothing else: then nothing was compared
    nan = torch.isnan(a64)
    both_nan = nan & torch.isnan(e64)
    if both_nan.numel() and bool(both_nan.all()):
        # Not the kernel's NaN: a layer_norm over `finfo.min` fills overflows in eager too.
        # Said as such, so neither a reader nor the fuzz takes eager's NaN for the kernel's.
        return False, float("nan"), f"output {i} {EAGER_NAN_EVERYWHERE}"
    nan = nan & ~both_nan
    if nan.any():
        return False, float("nan"), (f"output {i} has {counted(int(nan.sum()), 'NaN element')} "
                                     "where eager has none")
    both_inf = torch.isinf(a64) & torch.isinf(e64) & (torch.sign(a64) == torch.sign(e64))
    diff = torch.where(both_inf | both_nan, torch.zeros_like(a64), (a64 - e64).abs())
    diff = torch.nan_to_num(diff, nan=float("inf"))
    err = float(diff.max()) if diff.numel() else 0.0
    tol = judged_tolerance(e.dtype, floor, table)
    bad = diff > tol.atol + tol.rtol * e64.abs().nan_to_num(posinf=0.0, neginf=0.0)
    if bad.any():
        return False, err, (f"output {i}: {int(bad.sum())} of {counted(bad.numel(), 'element')} "
                            f"beyond atol {tol.atol:g} + rtol {tol.rtol:g}")
    return True, err, ""


def _interpreter_hint(e: Exception) -> str:
    """Why a kernel met triton's functions decorated the other way: TRITON_INTERPRET changed
    after triton loaded. Without CUDA it must be set first; with CUDA it must not be set."""
    if "outside of the scope of a kernel" not in str(e):
        return ""
    if torch.cuda.is_available():
        return (" (TRITON_INTERPRET=1 was set after triton loaded, on a machine with CUDA: the "
                "kernel was decorated for the interpreter, triton's own functions were not; "
                "set it before triton is imported, or not at all on a GPU)")
    return " (triton was imported before TRITON_INTERPRET=1 was set: set it in the environment)"


def check_cluster(launcher: Callable, module: ModuleType | None, eager: Callable,
                  kernel_args: Sequence[Any], eager_args: Sequence[Any],
                  floors: Sequence[torch.dtype | None] = ()) -> GateResult:
    """Gate 1: the kernel against the eager subgraph on the same inputs; never raises.
    `floors`: see ``compare``."""
    gate = "cluster numerics"
    try:
        with torch.no_grad():
            expected = as_tuple(eager(*eager_args))
    except Exception as e:  # noqa: BLE001 - report, do not crash the run
        return GateResult(gate, False, f"eager subgraph failed: {one_line(e)}")
    try:
        with torch.no_grad(), poisoned_allocations(module):
            actual = as_tuple(launcher(*kernel_args))
        _sync(actual)
    except Exception as e:  # noqa: BLE001
        return GateResult(gate, False, f"kernel failed: {one_line(e)}{_interpreter_hint(e)}")
    passed, err, why = compare(actual, expected, CLUSTER_TOL, floors)
    if passed:
        unwritten = unwritten_nan(launcher, module, kernel_args, actual, expected)
        if unwritten:
            return GateResult(gate, False, unwritten, float("nan"))
    if not passed and err is not None and math.isfinite(err):  # maybe only a rounding order
        closer = no_worse_than_eager(actual, expected, eager, eager_args, floors)
        if closer is not None:
            return GateResult(gate, True, closer, err)
    return GateResult(gate, passed, why, err)


# Any number works: an element the kernel writes is NaN whatever the poison was.
_NUMBER_POISON = 0.0


def unwritten_nan(launcher: Callable, module: ModuleType | None, kernel_args: Sequence[Any],
                  actual: Sequence[Any], expected: Sequence[Any]) -> str:
    """What went wrong, or "": where kernel and eager agree on NaN, the NaN may be the poison
    of an element the kernel never wrote. Runs the kernel again with outputs poisoned with a
    number; each such element must be NaN again. Only when there is such an element."""
    agreed = [torch.isnan(a.detach().cpu()) & torch.isnan(e.detach().cpu())
              if isinstance(a, torch.Tensor) and a.is_floating_point() else None
              for a, e in zip(actual, expected, strict=True)]
    if module is None or not any(m is not None and bool(m.any()) for m in agreed):
        return ""
    try:
        with torch.no_grad(), poisoned_allocations(module, _NUMBER_POISON):
            again = as_tuple(launcher(*kernel_args))
        _sync(again)
    except Exception as e:  # noqa: BLE001 - the first run passed; report, do not crash
        return f"kernel failed when run again: {one_line(e)}"
    for i, (mask, a) in enumerate(zip(agreed, again, strict=True)):
        if mask is not None and mask.any():
            missed = int((mask & ~torch.isnan(a.detach().cpu())).sum())
            if missed:
                return (f"output {i}: {counted(missed, 'element')} never written by the kernel "
                        "(NaN where eager has NaN was the poison, not a result)")
    return ""


# A kernel may round differently from eager (a sum over 8192 floats in another order); it
# passes if, against the same subgraph computed in float64, each element errs at most this
# much more than eager's.
EAGER_ERROR_FACTOR = 2.0


def no_worse_than_eager(actual: Sequence[Any], expected: Sequence[Any], eager: Callable,
                        eager_args: Sequence[Any], floors: Sequence[torch.dtype | None] = ()
                        ) -> str | None:
    """Why the kernel passes after all (a line for the report), or None. Each float32
    output, and each other float output beyond its own tolerance (at least its floor's,
    ``compare``), is judged against a float64 run of the eager subgraph: element by
    element, its distance is at most EAGER_ERROR_FACTOR x eager's own plus that tolerance.
    Every other output passes its own dtype's tolerance (a bf16 softmax returned beside its
    `float()`: the kernel keeps the float32 value eager rounded to bf16 first). Any
    non-finite value (an overflow eager made and float64 did not) is no excuse."""
    if len(actual) != len(expected):
        return None
    tols: dict[int, Tolerance] = {}
    wide_outputs, low_outputs = [], []  # float32; other floats beyond their own tolerance
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        floor = floors[i] if i < len(floors) else None
        if isinstance(e, torch.Tensor) and e.dtype == torch.float32:
            wide_outputs.append(i)
        elif not compare_one(i, a, e, CLUSTER_TOL, floor)[0]:
            # eager's CPU float16 layer_norm of a constant row is -0.71, not 0: the
            # kernel's float32 statistics are exact, and float64 says which is right
            if not (isinstance(e, torch.Tensor) and e.is_floating_point()):
                return None
            low_outputs.append(i)
        else:
            continue
        tols[i] = judged_tolerance(e.dtype, floor, CLUSTER_TOL)
    if not wide_outputs and not low_outputs:
        return None
    wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point()
            and a.dtype != torch.float64 else a.clone() if isinstance(a, torch.Tensor) else a
            for a in eager_args]
    # A traced subgraph's own casts (`w.to(h.dtype)` traced as float16) widen too: else the
    # reference repeats eager's 16-bit op and shares its error
    if isinstance(eager, fx.GraphModule):
        eager = graph_in_float64(eager)
    try:
        with torch.no_grad():
            reference = as_tuple(eager(*wide))
    except Exception:  # noqa: BLE001 - an op without float64 support: no excuse
        return None
    if len(reference) != len(expected):
        return None
    worst = 0.0
    for i in wide_outputs + low_outputs:
        a, e, r = actual[i], expected[i], reference[i]
        if not isinstance(a, torch.Tensor):
            return None
        tol = tols[i]
        a64, e64, r64 = (t.detach().cpu().double() for t in (a, e, r))
        if a64.shape != r64.shape or not all(bool(t.isfinite().all()) for t in (a64, e64, r64)):
            return None
        kernel_err, eager_err = (a64 - r64).abs(), (e64 - r64).abs()
        bound = EAGER_ERROR_FACTOR * eager_err + tol.atol + tol.rtol * r64.abs()
        if not bool((kernel_err <= bound).all()):
            return None
        if kernel_err.numel() and float(eager_err.max()) > 0:
            worst = max(worst, float(kernel_err.max()) / float(eager_err.max()))
    # Eager rounds in another order, or (beside a bf16 output) first to the narrower
    # dtype, or its 16-bit op errs where the kernel's float32 does not.
    why = ("eager's narrower result errs" if low_outputs else "rounding order"
           if len(wide_outputs) == len(expected) else "eager rounds to the narrower dtype first")
    return (f"within {worst:.2g}x eager's largest error against float64 ({why}; "
            "beyond the plain tolerance)")


def _sync(outs: Sequence[Any]) -> None:
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in outs):
        torch.cuda.synchronize()


def one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
