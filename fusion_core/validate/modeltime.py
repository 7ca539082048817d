"""The whole model timed as a user runs it: eager, every usable kernel patched in, and
torch.compile of the traced graph (default mode), each by wall time and device time.

Reads the ``Recording`` (traced graph and inputs) and the usable kernels; writes a
``ModelTiming``. Wall time is the host clock around one Python call (what a user gets);
device time is CUDA-graph replays (``devicetime``), the kernels' own time. Kernels per
forward are counted once per callable with torch.profiler (None when it cannot count).
Nothing here runs without CUDA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

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


def measure_model(
    rec: Recording, usable: Mapping[int, Callable], eager: Any, l2_bytes: int | None, compiled: bool
) -> ModelTiming | None:
    """`eager` is the traced graph already ``timed.clocked``; None when nothing is usable or
    the patched model could not run. `compiled`: also time torch.compile of the graph
    (compiling costs seconds; a failed compile leaves its figures empty)."""
    from .timed import clocked, pick

    if not usable:
        return None
    try:
        all_patched = patch(rec.gm, {i: (rec.clusters[i], k) for i, k in usable.items()})
        patched = clocked(all_patched, rec.inputs, l2_bytes, MODEL_COPIES)
    except Exception:  # noqa: BLE001 - the per-cluster figures stand without the model's
        return None
    clock, eager_us, patched_us = pick(eager, patched)
    theirs = None
    if compiled:
        with contextlib.suppress(Exception):
            fn = torch.compile(rec.gm)
            fn(*rec.inputs)  # compile outside the clock
            theirs = clocked(fn, rec.inputs, l2_bytes, MODEL_COPIES)
    compiled_us: tuple[float, ...] = ()  # by `clock`: empty when it could not be captured
    if theirs is not None and clock == "host":
        compiled_us = theirs.host_us
    elif theirs is not None and theirs.device is not None:
        compiled_us = theirs.device.samples_us
    return ModelTiming(
        eager_us,
        patched_us,
        clock,
        eager.host_us,
        patched.host_us,
        compiled_us=compiled_us,
        compiled_host_us=theirs.host_us if theirs else (),
        eager_kernels=kernel_count(rec.gm, rec.inputs),
        patched_kernels=kernel_count(all_patched, rec.inputs),
        compiled_kernels=kernel_count(fn, rec.inputs) if theirs else None,
    )
