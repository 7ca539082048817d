"""benchmarks/ncu_rows.py without a GPU: each case is generated at its tiny shape and named
with the configuration its file's heuristic picks (what Nsight Compute would read on a GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ncu_rows  # noqa: E402


def test_a_case_is_generated_and_named_with_its_default_configuration(tmp_path):
    line = ncu_rows.launched(9, "cpu", tmp_path, launches=0)
    label, config = line.split(", default ")
    assert label == "case 9: layer_norm->gelu 1024x16384 bfloat16"
    assert [int(n) for n in config.strip("[]").split(", ")][0] > 0  # (block, rows, warps...)
    assert any(tmp_path.glob("*.py"))  # the kernel file it launched
