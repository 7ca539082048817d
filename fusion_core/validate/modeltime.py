"""The whole model timed as a user runs it: eager, every usable kernel patched in,
torch.compile of the traced graph (default mode), and torch.compile of the patched graph
(our kernels as the fused package's operators, which Inductor traces into), each by wall
time and device time.

Reads the ``Recording`` (traced graph and inputs) and the usable kernels; writes a
``ModelTiming``. Wall time is the host clock around one Python call (what a user gets);
device time is CUDA-graph replays (``devicetime``): the kernels' own time, and what the
model costs captured as one CUDA graph; the eager and patched models take their device
samples interleaved. Kernels per forward are counted once per callable
with torch.profiler (None when it cannot count). Nothing here runs without CUDA.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..analysis.types import Cluster
from ..codegen import operators
from ..compile_quiet import quiet
from . import bench
from .prepare import Recording
from .subgraph import patch
from .types import ModelTiming

MODEL_COPIES = 4  # a model's weights cannot rotate: a few input copies keep capture short
# Copies and fills are not launches of a kernel the model computes with.
_NOT_KERNELS = ("memcpy", "memset")


def kernel_count(fn: Callable[..., object], args: Sequence[Any]) -> int | None:
    """GPU kernels one call of `fn` launches (torch.profiler), None when not countable."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*args)
            torch.cuda.synchronize()
        device_events = [
            e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
        ]
    except Exception:  # noqa: BLE001 - a count is a nicety: the timings stand without it
        return None
    return sum(not e.name.lower().startswith(_NOT_KERNELS) for e in device_events) or None


def as_operators(rec: Recording, usable: Mapping[int, Callable]
                 ) -> dict[int, tuple[Cluster, Callable]]:
    """Each usable kernel as `--apply`'s package calls it (``operators._register``): a
    torch operator under torch.compile, the launcher itself in eager calls. A cluster that
    cannot be an operator (a kernel without inputs, such as `arange → add`, or a file
    without `traceable`) is left out, its original ops kept, as `--apply` leaves it: its
    bare launcher would break torch.compile's graph (Dynamo traces into the launch cache
    and Triton's launch path, and stops there: six breaks on GPT-2)."""
    namespace = f"fusion_timing_{uuid.uuid4().hex[:8]}"
    out: dict[int, tuple[Cluster, Callable]] = {}
    for i, launcher in usable.items():
        cluster = rec.clusters[i]
        module = sys.modules.get(getattr(launcher, "__module__", None) or "")
        metas = [rec.analysis.graph[n].meta for n in cluster.inputs]
        if module is None or not hasattr(module, "traceable") or not metas or None in metas:
            continue
        dtypes = tuple(m.dtype for m in metas)
        out[i] = (cluster, operators._register(namespace, f"cluster{i}", module,
                                                   launcher.__name__, len(cluster.outputs),
                                                   dtypes))
    return out


def _compiled_clocked(fn: Callable, rec: Recording, l2_bytes: int | None) -> Any:
    """`torch.compile(fn)` compiled by a first call, then clocked; None when it fails."""
    from .timed import clocked

    with contextlib.suppress(Exception), quiet():  # Dynamo's chatter, not the user's
        compiled = torch.compile(fn)
        compiled(*rec.inputs)  # compile outside the clock
        return compiled, clocked(compiled, rec.inputs, l2_bytes, MODEL_COPIES)
    return None


def _by_clock(theirs: Any, clock: str) -> tuple[float, ...]:
    """A clocked callable's samples by `clock` (empty when the device time is missing)."""
    if theirs is None:
        return ()
    if clock == "host":
        return theirs.host_us
    return theirs.device.samples_us if theirs.device is not None else ()


def measure_model(
    rec: Recording, usable: Mapping[int, Callable], eager: Any, l2_bytes: int | None, compiled: bool
) -> ModelTiming | None:
    """`eager` is the traced graph already ``timed.clocked`` (its host figure is kept, its
    device time taken again interleaved with the patched model's); None when nothing is
    usable or the patched model could not run. `compiled`: also time torch.compile of the
    graph (compiling costs seconds; a failed compile leaves its figures empty)."""
    from .timed import Clocked, devices_together, pick

    if not usable:
        return None
    try:
        all_patched = patch(rec.gm, {i: (rec.clusters[i], k) for i, k in usable.items()})
        patched_host = bench.time_us(lambda: all_patched(*rec.inputs))
        # The eager model's device time again, interleaved with the patched model's: the
        # plugin judges their per-sample ratio. Its host figure stands as `eager` took it.
        eager_device, patched_device = devices_together(
            [(rec.gm, rec.inputs), (all_patched, rec.inputs)], l2_bytes, MODEL_COPIES)
    except Exception:  # noqa: BLE001 - the per-cluster figures stand without the model's
        return None
    eager, patched = Clocked(eager_device, eager.host_us), Clocked(patched_device, patched_host)
    clock, eager_us, patched_us = pick(eager, patched)
    # compiled: torch.compile of the traced graph; applied: of the patched graph, our
    # kernels as operators Inductor traces into (each `(compiled fn, clocked)` or None).
    compiled_graph = _compiled_clocked(rec.gm, rec, l2_bytes) if compiled else None
    applied = None
    operators_in = as_operators(rec, usable) if compiled else {}
    if operators_in:  # none: it would be the traced graph compiled again
        with contextlib.suppress(Exception):
            applied = _compiled_clocked(patch(rec.gm, operators_in), rec, l2_bytes)
    theirs = compiled_graph[1] if compiled_graph else None
    ours = applied[1] if applied else None
    return ModelTiming(
        eager_us,
        patched_us,
        clock,
        eager.host_us,
        patched.host_us,
        compiled_us=_by_clock(theirs, clock),
        compiled_host_us=theirs.host_us if theirs else (),
        eager_kernels=kernel_count(rec.gm, rec.inputs),
        patched_kernels=kernel_count(all_patched, rec.inputs),
        compiled_kernels=kernel_count(compiled_graph[0], rec.inputs) if compiled_graph else None,
        compiled_applied_us=_by_clock(ours, clock),
        compiled_applied_host_us=ours.host_us if ours else (),
    )
