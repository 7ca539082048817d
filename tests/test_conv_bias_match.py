"""Matching a split-off convolution bias against Inductor's kernels for a GPU.

On a GPU, Inductor's convolution lowering adds the bias inside the next pointwise kernel,
on behalf of the `convolution` node: the kernel's origins are the convolution, the
BatchNorm and the ReLU (seen by forcing that lowering on the CPU backend). The captures
below are written out by hand in that form, so no GPU is needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fusion_core.inductor.capture import InductorCapture, InductorKernel, InductorNode
from fusion_core.inductor.explain import EPILOGUE, miss_reason
from fusion_core.inductor.match import match
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file

MODEL = """\
import torch.nn as nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()

    def forward(self, x):
        y = self.conv(x)
        y = self.bn(y)
        return self.act(y)
"""
CONV, BN, ACT = 12, 13, 14  # the forward's lines above


@pytest.fixture
def model_file(tmp_path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    return path


def _kernel(path: Path, *nodes: tuple[str, str, int]) -> InductorKernel:
    return InductorKernel("triton_poi_fused_k_0", tuple(
        InductorNode(f"{op}_{i}", op, module, str(path), line)
        for i, (op, module, line) in enumerate(nodes)))


def _capture(*kernels: InductorKernel) -> InductorCapture:
    return InductorCapture(tuple(kernels), "define_kernel", (), torch.__version__)


def test_split_bias_is_computed_by_the_kernel_holding_its_convolution(model_file):
    a = analyze_file(model_file, [InputSpec((1, 4, 4, 4))], device="cuda")
    assert [c.ops for c in a.clusters] == [("add", "batch_norm", "relu")]
    k = _kernel(model_file, ("convolution", "conv", CONV), ("batch_norm", "bn", BN),
                ("relu", "act", ACT))
    agreement = match(a, _capture(k))
    assert [km.status for km in agreement.kernels] == ["exact"]
    assert agreement.clusters[0].verdict == "same group"


def test_split_bias_is_not_claimed_by_a_kernel_without_its_convolution(model_file):
    # Inductor computes BN + ReLU but adds the bias elsewhere: our add is in no kernel.
    a = analyze_file(model_file, [InputSpec((1, 4, 4, 4))], device="cuda")
    k = _kernel(model_file, ("batch_norm", "bn", BN), ("relu", "act", ACT))
    agreement = match(a, _capture(k))
    assert agreement.clusters[0].verdict == "different grouping"
    assert "not in any Inductor kernel" in agreement.clusters[0].detail


def test_miss_across_a_split_convolution_is_not_called_an_epilogue(model_file):
    # A kernel of conv bias + ReLU alone (no cluster of ours is that): with the bias kept
    # inside the convolution (CPU analysis) Inductor fused into its epilogue; with the bias
    # split off, the add is ours and the reason comes from our own grouping.
    k = _kernel(model_file, ("convolution", "conv", CONV), ("relu", "act", ACT),
                ("mul", "act", ACT))
    whole = analyze_file(model_file, [InputSpec((1, 4, 4, 4))])
    assert miss_reason(whole, k) == EPILOGUE
    split = analyze_file(model_file, [InputSpec((1, 4, 4, 4))], device="cuda")
    reason = miss_reason(split, k)
    assert reason != EPILOGUE and reason
    assert "self.conv" not in reason and "reshape" not in reason  # neither is between ops
