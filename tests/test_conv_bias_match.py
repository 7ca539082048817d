"""Matching a split-off convolution bias against Inductor's kernels for a GPU.

On a GPU, Inductor's convolution lowering adds the bias inside the next pointwise kernel,
on behalf of the `convolution` node: the kernel's origins are the convolution, the
BatchNorm and the ReLU (seen by forcing that lowering on the CPU backend). The captures
below are written out by hand in that form, so no GPU is needed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.inductor.capture import (
    InductorCapture,
    InductorKernel,
    InductorNode,
    LibraryCall,
)
from fusion_core.inductor.explain import EPILOGUE, miss_reason
from fusion_core.inductor.match import match
from fusion_core.ir.shapes import InputSpec
from fusion_core.ir.spelling import said
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


def test_split_bias_a_library_convolution_adds_is_named(model_file):
    # Inductor calls the convolution with its bias (a library call) and fuses BN + ReLU.
    a = analyze_file(model_file, [InputSpec((1, 4, 4, 4))], device="cuda")
    k = _kernel(model_file, ("batch_norm", "bn", BN), ("relu", "act", ACT))
    conv = LibraryCall("convolution", (
        InductorNode("convolution", "convolution", "conv", str(model_file), CONV),))
    v = match(a, dataclasses.replace(_capture(k), calls=(conv,))).clusters[0]
    add, bn, relu = (said(a.graph, n) for n in a.clusters[0].nodes)
    assert v.verdict == "different grouping"
    assert v.detail == (f"triton_poi_fused_k_0 computes {bn}, {relu}; "
                        f"Inductor's `convolution` computes {add} (library call)")


def test_miss_across_a_split_convolution_is_not_called_an_epilogue(model_file):
    # Inductor's kernel of conv bias + BatchNorm + ReLU, as the GPU lowering makes it (no
    # cluster of ours is exactly that once the kernel also holds a `mul` on the ReLU's line):
    # with the bias kept inside the convolution (CPU analysis) Inductor fused into its
    # epilogue; with the bias split off, the add is ours and the reason comes from our own
    # grouping.
    k = _kernel(model_file, ("convolution", "conv", CONV), ("batch_norm", "bn", BN),
                ("relu", "act", ACT), ("mul", "act", ACT))
    whole = analyze_file(model_file, [InputSpec((1, 4, 4, 4))])
    assert miss_reason(whole, k) == EPILOGUE
    split = analyze_file(model_file, [InputSpec((1, 4, 4, 4))], device="cuda")
    reason = miss_reason(split, k)
    assert reason != EPILOGUE and reason
    assert "self.conv" not in reason and "reshape" not in reason  # neither is between ops


class _LayerNorm2d(nn.LayerNorm):
    """timm's LayerNorm2d: channels last, normalize, channels first."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class _ConvMlpBlock(nn.Module):
    """timm's ConvNeXt block with conv_mlp=True (convnext_atto): every layer a biased conv."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv_dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = _LayerNorm2d(c)
        self.fc1 = nn.Conv2d(c, 4 * c, 1)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(4 * c, c, 1)
        self.gamma = nn.Parameter(torch.rand(c) + 0.5)

    def forward(self, x):
        shortcut = x
        x = self.norm(self.conv_dw(x))
        x = self.fc2(self.act(self.fc1(x)))
        return x.mul(self.gamma.reshape(1, -1, 1, 1)) + shortcut


@pytest.fixture
def gpu_lowering(monkeypatch):
    """Inductor's CPU backend lowering biased convolutions as it does for a GPU: its
    `convolution` lowering asks `ir.get_device_type`; only that module's view is changed."""
    import types

    import torch._inductor.kernel.conv as conv_lowering

    real = getattr(conv_lowering, "ir", None)
    if real is None or not hasattr(real, "get_device_type"):
        pytest.skip("this torch's convolution lowering does not ask ir.get_device_type")

    class GpuIr(types.ModuleType):
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def get_device_type(x):
            return "cuda"

    monkeypatch.setattr(conv_lowering, "ir", GpuIr("ir"))


@pytest.mark.slow  # an Inductor compile on the CPU (~20 s)
def test_convnext_conv_mlp_kernels_are_matched_once_the_bias_is_split(gpu_lowering):
    from fusion_core.inductor.capture import capture
    from fusion_core.pipeline import analyze

    torch.manual_seed(0)
    model = _ConvMlpBlock().eval()
    shape = (1, 8, 4, 4)
    cap = capture(model, [torch.randn(shape)])
    # The kernel after fc1 adds its bias and applies the GELU, on fc1's behalf.
    assert any({"convolution", "gelu"} <= set(k.ops) for k in cap.compute_kernels)
    whole = match(analyze(model, shape), cap)
    assert any(k.reason == EPILOGUE for k in whole.kernels if k.status == "missed")
    split = match(analyze(model, shape, device="cuda"), cap)
    assert split.kernels and all(k.status != "missed" for k in split.kernels)
