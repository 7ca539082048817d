"""benchmarks/end_to_end.py's wall times in interleaved rounds (the GPU run is the first to
see real times; here the clock is faked)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import end_to_end  # noqa: E402


def test_each_row_keeps_its_lowest_round_and_the_rounds_go_row_after_row():
    order = []
    samples = {"eager": iter([9.0, 7.0]), "applied": iter([4.0, 6.0])}

    def timer(fn):
        order.append(fn())
        return next(samples[fn()])

    rows = [{"row": "eager", "wall_us": 8.0}, {"row": "applied", "wall_us": 5.0},
            {"row": "failed", "error": "RuntimeError"}]
    fns = {"eager": lambda: "eager", "applied": lambda: "applied"}
    end_to_end.more_rounds(rows, fns, 3, timer)
    assert order == ["eager", "applied", "eager", "applied"]  # interleaved, not row by row
    assert rows[0]["wall_us_rounds"] == [8.0, 9.0, 7.0] and rows[0]["wall_us"] == 7.0
    assert rows[1]["wall_us_rounds"] == [5.0, 4.0, 6.0] and rows[1]["wall_us"] == 4.0
    assert "wall_us" not in rows[2]  # a row that failed is not timed again


def test_a_round_that_fails_keeps_the_rounds_before_it():
    def timer(fn):
        raise RuntimeError("CUDA error")

    rows = [{"row": "compiled", "wall_us": 3.0}]
    end_to_end.more_rounds(rows, {"compiled": lambda: None}, 3, timer)
    assert rows[0]["wall_us"] == 3.0 and rows[0]["wall_us_rounds"] == [3.0]
    assert rows[0]["wall_error"] == "round 2: RuntimeError: CUDA error"


def test_issue_26_targets_are_judged_from_the_rows_with_their_numbers():
    rows = [
        {"row": "traced graph, eager", "wall_us": 6000.0, "device_us": 3900.0, "kernels": 240},
        {"row": "traced graph, our kernels applied", "wall_us": 4000.0, "device_us": 2100.0,
         "kernels": 120},
        {"row": "applied, as one CUDA graph", "wall_us": 2200.0},
        {"row": "torch.compile of the HF module", "wall_us": 2500.0, "device_us": 2120.0},
        {"row": "torch.compile of the traced graph", "error": "BackendCompilerFailed"},
        {"row": "torch.compile of the applied graph (39 of 43 kernels as operators)",
         "wall_us": 2400.0, "device_us": 2060.0},
    ]
    lines = end_to_end.targets({"model": "GPT-2", "rows": rows})
    assert lines == [
        "GPT-2: eager wall in proportion to the kernels removed (120 of 240): missed "
        "(4.000 ms against 3.000)",
        "GPT-2: as one CUDA graph, wall <= 1.1x the applied device time: met "
        "(2.200 ms against 2.310)",
        "GPT-2: device time <= torch.compile of the HF module's: met (2.100 ms against 2.120)",
        "GPT-2: torch.compile of the applied graph, wall <= torch.compile of the HF "
        "module's: met (2.400 ms against 2.500)",
        "GPT-2: device time <= torch.compile of the traced graph's: not judged (a row failed)",
        "GPT-2: torch.compile of the applied graph, wall <= torch.compile of the traced "
        "graph's: not judged (a row failed)",
    ]
