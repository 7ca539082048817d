"""benchmarks/ncu_rows.py without a GPU: each case is generated at its tiny shape and named
with the configuration its file's heuristic picks (what Nsight Compute would read on a GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ncu_rows  # noqa: E402


# The interpreter launches the CPU tensors of these two (a CUDA machine's Triton compiles).
@pytest.mark.cpu
def test_a_case_is_generated_and_named_with_its_default_configuration(tmp_path):
    line = ncu_rows.launched(9, "cpu", tmp_path, launches=1)
    label, config = line.split(", default ")
    assert label == "case 9: layer_norm->gelu 1024x16384 bfloat16"
    assert [int(n) for n in config.strip("[]").split(", ")][0] > 0  # (block, rows, warps...)
    assert any(tmp_path.glob("*.py"))  # the kernel file it launched


@pytest.mark.cpu
def test_a_kernel_reading_its_inputs_through_a_permute_is_named_too(tmp_path):
    """Case 21 at its panel shape (64x768x7x7 bf16: the channels-last `y` permuted): the
    configuration comes from the plan its first call kept. The raw inputs given to `_plan`
    were refused on an H100 ("`y` is 768 long in dim 1 as this kernel views its inputs")."""
    line = ncu_rows.launched(21, "cpu", tmp_path, launches=1, tiny=False)
    label, config = line.split(", default ")
    assert label == "case 21: (y*g).permute(0,3,1,2)+x 64x768x7x7 bfloat16"
    assert [int(n) for n in config.strip("[]").split(", ")][0] > 0


def test_list_without_the_interpreter_is_refused_in_one_line():
    """On a CUDA machine Triton compiles, and `--list`'s CPU tensors would meet a GPU kernel:
    it asks for the interpreter instead (as it would here with TRITON_INTERPRET=0)."""
    import os
    import subprocess

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "ncu_rows.py"
    run = subprocess.run([sys.executable, str(script), "--list", "--cases", "9"],
                         capture_output=True, text=True,
                         env={**os.environ, "TRITON_INTERPRET": "0"})
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "ncu_rows.py: --list launches each case once at its tiny shape under Triton's "
        "interpreter, which is off here: run TRITON_INTERPRET=1 python benchmarks/ncu_rows.py "
        "--list"]
