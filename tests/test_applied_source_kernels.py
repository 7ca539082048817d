"""benchmarks/applied_source.py's per-kernel lines: where each row's device time goes (the
GPU run fills `kernel_us` from the profiler; here the rows are written by hand)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import applied_source  # noqa: E402


def test_each_row_lists_its_costliest_kernels_then_sums_the_rest():
    long_name = "void at::native::vectorized_elementwise_kernel<4, " + "x" * 200
    result = {"model": "gpt12", "rows": [
        {"row": "applied", "census": {"cluster1_kernel": 12, long_name: 36, "gemm": 12},
         "kernel_us": {"cluster1_kernel": 253.9, long_name: 120.0, "gemm": 50.5}},
        {"row": "failed", "error": "RuntimeError: no CUDA"},
    ]}
    lines = applied_source.kernel_lines(result, top=2).splitlines()
    assert lines[1] == "gpt12, applied: 424 µs in 3 kernel names (profiler)"
    assert lines[2] == "     253.9 µs   12×  cluster1_kernel"
    assert lines[3].startswith("     120.0 µs   36×  void at::native::")
    assert lines[3].endswith("…") and len(lines[3]) == 21 + 70  # the name cut to 70
    assert lines[4] == "      50.5 µs  in 1 more kernel names"
    assert len(lines) == 5  # the failed row has no kernel times and no lines


def test_a_model_cut_off_leaves_the_rows_of_those_before_it(monkeypatch, tmp_path, capsys):
    """The second model fails mid-run (as a call's time limit cuts it): the first one's table
    is already printed and its result already in --out."""
    import json

    import pytest
    import torch

    def measure(case, folder):
        if case.name != "gpt12":
            raise TimeoutError("cut off")
        return {"model": "gpt12", "input": [8, 512], "cli": "Applied 3 edits",
                "rows": [{"row": "eager", "wall_us": 4300.0, "device_us": 3700.0, "kernels": 120}]}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    monkeypatch.setattr(applied_source, "measure", measure)
    out = tmp_path / "applied.json"
    monkeypatch.setattr(sys, "argv", ["applied_source.py", "--models", "gpt12,llama_block",
                                      "--out", str(out)])
    with pytest.raises(TimeoutError):
        applied_source.main()
    printed = capsys.readouterr().out
    assert "gpt12: Applied 3 edits" in printed
    assert "| gpt12 | 8×512 | eager |" in printed
    assert [r["model"] for r in json.loads(out.read_text())] == ["gpt12"]
    assert not out.with_name("applied.json.part").exists()
