"""benchmarks/gelu_probe.py at tiny sizes on any machine: each variant's kernel file holds its
own helper, and the exact forms (the one generated and the two it replaced)
match eager (compiled where there is a GPU, interpreted elsewhere). The timed run needs
CUDA."""

import sys
from pathlib import Path

import pytest
import torch
from codegen_harness import DEVICE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import gelu_probe as probe  # noqa: E402
from gpu_clusters import as_tuple, close  # noqa: E402
from panel_cases import CASES  # noqa: E402

from fusion_core.codegen import load_kernel  # noqa: E402


@pytest.mark.parametrize("number", [9, 6])
def test_probe_variants_hold_their_helpers_and_the_exact_ones_match_eager(number, tmp_path):
    case = CASES[number]
    found, inputs, eager, _ = probe.files(case, DEVICE, tmp_path, tiny=True)
    assert [label for label, _, _ in found] == list(probe.VARIANTS)
    want = as_tuple(eager(*inputs))
    texts = {}
    for label, path, name in found:
        texts[label] = Path(path).read_text()
        if label in probe.TIMING_ONLY:
            continue
        got = as_tuple(getattr(load_kernel(path), name)(*inputs))
        ok, err = close(got, want, case.dtype)
        assert ok, (label, err)
    assert "libdevice.exp2(g)" in texts["now"] and "fast_" not in texts["now"]
    assert "fast_expf" in texts["natural exp"] and "- z * z" in texts["natural exp"]
    assert "fast_dividef" in texts["reciprocal"]
    assert "tanh.approx.f32" in texts["tanh.approx"]
    assert "def _gelu_half(x):\n    return x\n" in texts["no gelu"]
    assert torch.finfo(case.dtype).bits == 16
