"""A kernel's results are laid out as eager lays them out: a channels-last result stays
channels-last (the next convolution reads it without a copy), a transposed one keeps its
transposed memory, a group_norm over channels-last values returns channels-last."""

from __future__ import annotations

import pytest
import torch
from codegen_harness import Lambda, run_kernel

from fusion_core.codegen import Tuning, generate
from fusion_core.codegen.layout import dense_permuted
from fusion_core.pipeline import analyze

CL = torch.channels_last


def rand(*shape):
    return torch.randn(*shape)


def _kernel(fn, *inputs, tuning=None):
    analysis = analyze(Lambda(fn, arity=len(inputs)), *inputs)
    (cluster,) = analysis.clusters
    return generate(analysis, cluster, tuning or Tuning())


@pytest.mark.parametrize(("shape", "stride", "expected"), [
    ((2, 3, 4, 5), (60, 20, 5, 1), None),  # contiguous
    ((2, 3, 4, 5), (60, 1, 15, 3), (60, 1, 15, 3)),  # channels-last
    ((3, 5), (1, 3), (1, 3)),  # a transpose
    ((2, 1, 4), (4, 7, 1), None),  # a size-1 dim's stride says nothing
    ((3, 5), (0, 1), None),  # expanded: not dense
    ((3, 5), (10, 1), None),  # rows with gaps (a slice)
    ((3, 5), (1, 2), None),  # overlapping
])
def test_dense_permuted_takes_only_dense_other_orders(shape, stride, expected):
    assert dense_permuted(shape, stride) == expected


CASES = {  # fn, inputs: each result is permuted in memory in eager; the permute is in the
    # cluster (a view before the first op is not: the kernel would take the view as input)
    "channels-last values": (lambda m, x: torch.relu((x * 2.0).permute(0, 3, 1, 2)) + 1.0,
                             (rand(2, 3, 5, 6),)),
    "ConvNeXt's tail": (lambda m, y, x: (y * 2.0).permute(0, 3, 1, 2) + x,
                        (rand(2, 3, 5, 6), rand(2, 6, 3, 5))),
    "a transposed result": (lambda m, x: torch.sigmoid(x * 2.0).t() * 3.0, (rand(7, 5),)),
    # its size-1 dim's stride ties with the 6's: it lies just inside it, as eager has it
    "a transposed result with a size-1 dim": (lambda m, x: (x * 2.0).transpose(0, 2) + 1.0,
                                               (rand(6, 1, 3),)),
}


@pytest.mark.parametrize("name", CASES)
def test_a_result_has_the_strides_eager_gives_it(name, tmp_path):
    fn, inputs = CASES[name]
    expected = fn(None, *inputs)
    assert not expected.is_contiguous()  # the case is what it says
    (got,) = run_kernel(_kernel(fn, *inputs, tuning=Tuning(block=16, tile_cols=4)), tmp_path,
                        inputs)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got, expected)


class ConvBlock(torch.nn.Module):
    """A convolution run channels-last (`model.to(memory_format=torch.channels_last)`, as
    vision inference often is): its output, and eager's BN-free tail after it, channels-last."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 1, bias=False)

    def forward(self, x):
        return torch.relu(self.conv(x) * 2.0) + 1.0


def test_the_tail_of_a_channels_last_convolution_stays_channels_last(tmp_path):
    """At the analysed size and others: the next convolution reads the result without a
    copy, as it reads eager's."""
    model = ConvBlock().to(memory_format=CL)
    analysis = analyze(model, rand(2, 3, 5, 6))
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster)
    for k, shape in enumerate([(2, 3, 5, 6), (1, 3, 7, 2), (3, 3, 2, 2)]):
        h = model.conv(rand(*shape)).detach()
        assert h.is_contiguous(memory_format=CL)
        (got,) = run_kernel(kernel, tmp_path / str(k), (h,))
        expected = torch.relu(h * 2.0) + 1.0
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("fn", [
    # group_norm over channels-last values returns channels-last; softmax returns contiguous
    lambda m, x: torch.nn.functional.group_norm((x * 2.0).permute(0, 3, 1, 2), 2),
    lambda m, x: torch.softmax((x * 2.0).permute(0, 3, 1, 2), 1),
], ids=["group_norm", "softmax"])
def test_a_reduction_result_has_the_strides_eager_gives_it(fn, tmp_path):
    x = rand(2, 3, 5, 6)
    (got,) = run_kernel(_kernel(fn, x), tmp_path, (x,))
    expected = fn(None, x)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got, expected)
