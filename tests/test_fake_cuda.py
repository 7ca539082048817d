"""Inductor's CUDA kernels taken without a GPU (fusion_core.inductor.fake_cuda): on this CPU
machine they must be Triton kernels of CUDA's scheduling; on a GPU (the `gpu` test) they must
be the kernels a real CUDA compile of the same model makes."""

import sys
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.inductor.fake_cuda import fake_cuda_capture

pytestmark = pytest.mark.slow  # an Inductor compile (~10 s, no kernel is built)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class MatmulSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(8, 8))

    def forward(self, x):
        y = F.relu(x * 2.0) @ self.w
        return torch.softmax(torch.sigmoid(y) + 1, dim=-1)


class ConvSilu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return F.silu(self.conv(x))


def test_cuda_scheduling_without_a_gpu_makes_triton_kernels():
    had_cuda = torch.cuda.is_available()
    cap = fake_cuda_capture(MatmulSoftmax(), [torch.randn(4, 8)])
    assert torch.cuda.is_available() == had_cuda  # the fake GPU is gone after the compile
    assert cap.method == "define_kernel"
    assert [k.name.split("_fused_")[0] for k in cap.kernels] == ["triton_poi", "triton_per"]
    assert [k.ops for k in cap.kernels][0] == ("mul", "relu")
    assert {"sigmoid", "add", "softmax"} <= set(cap.kernels[1].ops)
    assert [c.op for c in cap.calls] == ["mm"]  # the matmul stays a library call


def test_a_convolution_adds_its_bias_in_the_next_kernel_as_on_a_gpu():
    # Off the CPU Inductor's convolution leaves its bias to a pointwise kernel; the CPU's
    # C++ backend keeps it in the library call. The fake GPU shows the GPU's choice.
    cap = fake_cuda_capture(ConvSilu(), [torch.randn(1, 4, 8, 8)])
    assert any(set(k.ops) == {"convolution", "silu"} for k in cap.kernels), cap.kernels
    assert [c.op for c in cap.calls] == ["convolution"]


class _WarmPool:
    """A compile pool whose workers are up: every job is done at once (and counted)."""

    submitted: list = []

    def submit(self, fn, *args, **kwargs):
        self.submitted.append(fn)
        done: Future = Future()
        done.set_result(None)
        return done


def test_a_warm_compile_pool_makes_no_kernel_load_in_this_process(monkeypatch):
    # Once Inductor's pool (started by an earlier compile of this process) is up, each kernel
    # was loaded here too; under the interpreter that loads Triton's CUDA driver, and the
    # capture failed ("libcuda.so cannot found") in long test runs.
    from torch._inductor import config
    from torch._inductor.async_compile import AsyncCompile

    monkeypatch.setattr(AsyncCompile, "process_pool", classmethod(lambda cls: _WarmPool()))
    # config.patch, not monkeypatch: its undo deletes a config entry (hidden from then on)
    with config.patch(compile_threads=2):
        cap = fake_cuda_capture(MatmulSoftmax(), [torch.randn(4, 8)])
        assert config.compile_threads == 2
    assert [k.name.split("_fused_")[0] for k in cap.kernels] == ["triton_poi", "triton_per"]
    assert _WarmPool.submitted == []  # on a GPU too, where loading a kernel would not fail


def _example(module: str, cls: str):
    sys.path.insert(0, str(EXAMPLES))
    try:
        return getattr(__import__(module), cls)()
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.mark.gpu
@pytest.mark.parametrize(("module", "cls", "shape"), [
    ("example_net", "ExampleNet", (64, 1024)),
    ("convnext_block", "ConvNeXtBlock", (2, 32, 8, 8)),
    ("groupnorm_silu", "ResBlock", (2, 32, 8, 8)),
    ("mbconv_se", "MBConv", (2, 16, 8, 8)),
])
def test_fake_gpu_kernels_are_the_real_gpus(module, cls, shape):
    from fusion_core.inductor import capture

    model, x = _example(module, cls).eval(), torch.randn(shape)
    props = torch.cuda.get_device_properties(0)
    from fusion_core.inductor.fake_cuda import GpuProps

    fake = fake_cuda_capture(model, [x], GpuProps(
        name=props.name, major=props.major, minor=props.minor,
        multi_processor_count=props.multi_processor_count, total_memory=props.total_memory))
    real = capture(model.cuda(), [x.cuda()])
    assert [(k.name, k.ops) for k in fake.kernels] == [(k.name, k.ops) for k in real.kernels]
    assert [c.op for c in fake.calls] == [c.op for c in real.calls]
