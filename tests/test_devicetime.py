"""``devicetime.device_times`` on the CPU: CUDA-graph capture and the event timer replaced by
a stand-in GPU whose replays cost a fixed time per call, so the order of the samples and the
figures made of them can be checked without CUDA."""

from __future__ import annotations

import pytest

from fusion_core.validate import devicetime

PER_CALL_US = {"kernel": 10.0, "eager": 40.0}  # what one call costs on the stand-in GPU


class StandInGpu:
    """`capture` returns (name, calls) for a callable named in PER_CALL_US; `elapsed`
    logs which graph replayed and returns its device time, doubled for the calls listed
    in `busy` (positions in the log: another process's kernels running meanwhile)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []  # (graph, replays) per timed stretch
        self.busy: set[int] = set()

    def capture(self, fn, arg_sets):
        return fn, len(arg_sets)

    def elapsed(self, graph, replays):
        (name, calls), load = graph, 2.0 if len(self.log) in self.busy else 1.0
        self.log.append((name, replays))
        return PER_CALL_US[name] * calls * replays * load


@pytest.fixture
def gpu(monkeypatch) -> StandInGpu:
    stand_in = StandInGpu()
    monkeypatch.setattr(devicetime, "capture", stand_in.capture)
    monkeypatch.setattr(devicetime, "_elapsed_us", stand_in.elapsed)
    return stand_in


CALLS = [("kernel", [[1]] * 2), ("eager", [[1]] * 4)]  # 2 and 4 copies of the inputs


def test_sample_i_of_every_callable_comes_before_sample_i_plus_1_of_any(gpu):
    kernel, eager = devicetime.device_times(CALLS, samples=5)
    names = [name for name, _ in gpu.log]
    # Each graph is timed once and warmed up before any sample is taken ...
    first_eager = names.index("eager")
    assert set(names[:first_eager]) == {"kernel"}
    warmed = len(names) - 2 * 5
    assert set(names[first_eager:warmed]) == {"eager"}
    # ... then the samples alternate, kernel then eager.
    assert names[warmed:] == ["kernel", "eager"] * 5
    # Per-call figures: each sample is one stretch over that graph's replays and copies.
    assert kernel.samples_us == (10.0,) * 5 and eager.samples_us == (40.0,) * 5
    assert (kernel.copies, eager.copies) == (2, 4)
    # Each stretch spans SAMPLE_US: the cheaper graph replays more often, and resolves more.
    k_replays, e_replays = gpu.log[-2][1], gpu.log[-1][1]
    assert (k_replays, e_replays) == (10, 2)  # 20 µs and 160 µs per replay
    assert kernel.resolution_us == devicetime.EVENT_RESOLUTION_US / (k_replays * 2)
    assert eager.resolution_us == devicetime.EVENT_RESOLUTION_US / (e_replays * 4)


def test_a_busy_spell_lands_on_the_same_sample_of_both(gpu):
    devicetime.device_times(CALLS, samples=5)
    warmed = len(gpu.log) - 2 * 5
    gpu.log.clear()
    gpu.busy = {warmed + 6, warmed + 7}  # the GPU is shared while sample 3 of each is taken
    kernel, eager = devicetime.device_times(CALLS, samples=5)
    assert kernel.samples_us == (10.0, 10.0, 10.0, 20.0, 10.0)
    assert eager.samples_us == (40.0, 40.0, 40.0, 80.0, 40.0)
    ratios = {k / e for k, e in zip(kernel.samples_us, eager.samples_us, strict=True)}
    assert ratios == {0.25}  # the i-th ratio is untouched by the busy spell


def test_one_callable_is_timed_as_device_time_always_did(gpu):
    alone = devicetime.device_time("kernel", [[1]] * 2, samples=4)
    assert alone == devicetime.device_times([("kernel", [[1]] * 2)], samples=4)[0]
    assert alone.samples_us == (10.0,) * 4 and alone.copies == 2
    assert gpu.log[0] == ("kernel", 1)  # the one replay that sizes the stretches comes first


def test_a_callable_that_cannot_be_captured_fails_them_all(gpu, monkeypatch):
    def capture(fn, arg_sets):
        if fn == "eager":
            raise devicetime.CaptureError("RuntimeError: operation not permitted")
        return fn, len(arg_sets)

    monkeypatch.setattr(devicetime, "capture", capture)
    with pytest.raises(devicetime.CaptureError):
        devicetime.device_times(CALLS)
    assert gpu.log == []  # nothing timed: the caller falls back to host time for both


def test_host_samples_taken_together_alternate_between_the_callables(monkeypatch):
    """Where a capture fails, the kernel and its eager ops fall back on host time: their
    samples alternate (a, b, a, b, ...) so that a ratio of i-th samples shares a window."""
    from fusion_core.validate import bench

    order: list[str] = []

    def fake_do_bench(fn, warmup, rep, return_mode):
        fn()
        return {"a": 0.001, "b": 0.002}[order[-1]]

    import triton.testing

    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    a_us, b_us = bench.times_us_together([lambda: order.append("a"),
                                          lambda: order.append("b")], samples=3)
    assert order == ["a", "b"] * 3
    assert a_us == pytest.approx((1.0,) * 3) and b_us == pytest.approx((2.0,) * 3)
