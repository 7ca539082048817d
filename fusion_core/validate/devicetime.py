"""Device time on CUDA: CUDA-graph replays over input copies that together exceed the L2.

Reads a callable and the arguments of one call; returns repeated per-call device times in
microseconds (CUDA events around graph replays), with the resolution of one sample. The
callable is captured once per copy of its arguments, so each replayed call reads inputs
no earlier call left in the L2, and replays launch nothing from the host: the figure is
the kernels' own time, however small. ``CaptureError`` when the callable cannot be
captured (a host sync, a CPU tensor): the caller keeps its host-timed figure then.
``device_times`` times several callables with interleaved samples, so that the i-th
samples of a kernel and of the eager ops it replaces were taken back to back.
Nothing here runs without CUDA.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

ROTATE_FACTOR = 3  # the copies of a call's inputs together hold at least 3x the L2
WARMUP_US = 20_000.0  # device time spent replaying before the samples are taken
FLOOR_FACTOR = 2.0  # device time under this many per-kernel floors is not judged
MAX_COPIES = 32  # tiny inputs: enough calls per replay without a huge graph
# cudaEventElapsedTime's resolution, as the CUDA runtime documents it (around 0.5 µs).
EVENT_RESOLUTION_US = 0.5
SAMPLE_US = 200.0  # each sample spans at least this much device time (0.25% resolution)
MAX_REPLAYS = 1000
SAMPLES = 10  # replays are cheap: more samples give the significance test more to go on


class CaptureError(Exception):
    """The callable could not be captured in a CUDA graph (or replayed)."""


@dataclass(frozen=True)
class DeviceTime:
    samples_us: tuple[float, ...]  # device time per call, one figure per sample
    resolution_us: float  # the smallest per-call difference one sample can show
    copies: int  # input copies the replays cycle through


@functools.cache
def floor_us(device_index: int = 0) -> float:
    """Device time of a kernel that does nothing worth timing (a one-element fill), replayed
    as the timed kernels are: the GPU's fixed cost per kernel in a graph (about 1.5 µs on an
    H200). Measured once per process and device."""
    with torch.cuda.device(device_index):
        one = torch.empty(1, device="cuda")
        t = device_time(lambda a: a.fill_(0.0), [[one.clone()] for _ in range(MAX_COPIES)])
    return sorted(t.samples_us)[len(t.samples_us) // 2]


def judged_resolution(t: DeviceTime) -> float:
    """Below this a kernel's device time is not judged: what one sample resolves, or
    FLOOR_FACTOR x the per-kernel floor, whichever is larger. A kernel under twice the floor
    is mostly that fixed cost, and it moved by 20-30 % from one process to the next
    (1.5-2 µs kernels of the examples, H200), past any tolerance a gate could use."""
    return max(t.resolution_us, FLOOR_FACTOR * floor_us(torch.cuda.current_device()))


def nbytes(values: Sequence[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def copy_count(input_bytes: int, l2_bytes: int | None, max_copies: int = MAX_COPIES) -> int:
    """How many copies of a call's inputs make ROTATE_FACTOR x the L2 (at least 2)."""
    if not l2_bytes:
        return 2
    return min(max_copies, max(2, math.ceil(ROTATE_FACTOR * l2_bytes / max(input_bytes, 1))))


def rotating(
    args: Sequence[Any], l2_bytes: int | None, max_copies: int = MAX_COPIES
) -> list[list[Any]]:
    """Copies of `args` (every CUDA tensor cloned; other values shared) that together
    exceed the L2, so a call never finds its inputs left there by the previous one."""
    count = copy_count(nbytes(args), l2_bytes, max_copies)
    return [
        [a.clone() if isinstance(a, torch.Tensor) and a.is_cuda else a for a in args]
        for _ in range(count)
    ]


def _elapsed_us(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def capture(fn: Callable[..., object], arg_sets: Sequence[Sequence[Any]]) -> torch.cuda.CUDAGraph:
    """One graph calling `fn` once per argument set, after a warm-up on a side stream
    (first calls compile kernels and grow the allocator: neither may be captured)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for args in arg_sets:
                fn(*args)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for args in arg_sets:
                fn(*args)
        graph.replay()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - whatever broke the capture, the host clock remains
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CaptureError(f"{type(e).__name__}: {first}") from e
    return graph


def device_time(
    fn: Callable[..., object], arg_sets: Sequence[Sequence[Any]], samples: int = SAMPLES
) -> DeviceTime:
    """Per-call device time of `fn` over `arg_sets` (see ``rotating``), `samples` times."""
    return device_times([(fn, arg_sets)], samples)[0]


def device_times(
    calls: Sequence[tuple[Callable[..., object], Sequence[Sequence[Any]]]],
    samples: int = SAMPLES,
) -> tuple[DeviceTime, ...]:
    """``device_time`` of each `(fn, arg_sets)`, one per call, with interleaved samples:
    sample i of every callable is taken before sample i + 1 of any. Whatever slows the GPU
    for a while (another process's kernels, a clock change) then lands on sample i of each
    alike, so a ratio of two callables' i-th samples keeps the same window. Every graph is
    captured (all or none: ``CaptureError`` for the first that fails) and warmed up first."""
    graphs = [capture(fn, arg_sets) for fn, arg_sets in calls]
    sizes = [len(arg_sets) for _, arg_sets in calls]
    replays = []
    for graph in graphs:
        once = _elapsed_us(graph, 1)
        n = max(1, min(MAX_REPLAYS, math.ceil(SAMPLE_US / max(once, 1e-3))))
        # Busy the GPU first: an idle GPU clocks down, and a microsecond kernel timed right
        # after idling read 30 % slower in one run than in the next (GPT-2's GELU, H200).
        for _ in range(math.ceil(WARMUP_US / (SAMPLE_US + once))):
            _elapsed_us(graph, n)
        replays.append(n)
    per_call: list[list[float]] = [[] for _ in graphs]
    for _ in range(samples):
        for k, graph in enumerate(graphs):
            per_call[k].append(_elapsed_us(graph, replays[k]) / (replays[k] * sizes[k]))
    return tuple(DeviceTime(tuple(us), EVENT_RESOLUTION_US / (n * size), size)
                 for us, n, size in zip(per_call, replays, sizes, strict=True))
