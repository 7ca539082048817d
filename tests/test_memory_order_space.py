"""An elementwise group whose full-size tensors all lie in one memory order iterates in it
(codegen/memory_order_space.py): a channels-last chain, or the BatchNorm → ReLU after a
convolution of a channels-last input, is a flat kernel over (N, H, W, C) with per-channel
weights read at `i % C`, as Inductor iterates it, where it tiled (rows down the channels,
columns over H×W). ConvNeXt's tail, a channels-last result beside an NCHW input, still tiles.
Numerics run under Triton's interpreter on poisoned outputs (tests/codegen_harness.py); the
loads Triton makes of the flat kernel are read from an sm_90 compile (slow)."""

from __future__ import annotations

import pytest
import torch
from codegen_harness import ConvBnRelu, Lambda, run_kernel, ttgir_load_layouts_of

from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels
from fusion_core.codegen.layout import Group
from fusion_core.codegen.lower import plan
from fusion_core.codegen.reference import capture_values
from fusion_core.ir.views import Reorder
from fusion_core.pipeline import analyze

CL = torch.channels_last
NHWC = (0, 2, 3, 1)


def cl(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype).to(memory_format=CL)


def chain(m, x):
    return torch.relu(x * 2.0 + 1.0).sigmoid()


def convnext_tail(m, y, g, x):
    return (y * g).permute(0, 3, 1, 2) + x


def _conv_bn_relu(dtype=torch.float32):
    torch.manual_seed(0)
    return ConvBnRelu().eval().to(dtype)


CASES = {  # model, inputs, the kernel's KIND
    "channels-last chain": (lambda: Lambda(chain, 1), lambda: (cl(2, 8, 4, 4),), "flat"),
    "conv → BatchNorm → ReLU": (_conv_bn_relu, lambda: (cl(2, 3, 5, 6),), "flat"),
    # one row: H lies where the result's memory order has it (once where NCHW has it: tiled)
    "channels-last chain, one row": (lambda: Lambda(chain, 1), lambda: (cl(2, 8, 1, 4),), "flat"),
    # the result is channels-last (eager's), x is NCHW: two directions, still tiled
    "ConvNeXt's tail": (lambda: Lambda(convnext_tail, 3),
                        lambda: (torch.randn(2, 4, 5, 3), torch.randn(3), torch.randn(2, 3, 4, 5)),
                        "tiled"),
}


def _analysed(name):
    model, inputs, _ = CASES[name]
    model, inputs = model(), inputs()
    analysis = analyze(model, *inputs)
    (cluster,) = analysis.clusters
    return model, inputs, analysis, cluster


@pytest.mark.parametrize("name", CASES)
def test_the_kernel_kind_follows_the_memory_order_its_tensors_share(name, tmp_path):
    _, _, analysis, cluster = _analysed(name)
    kernel = generate(analysis, cluster)
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    assert module.KIND == CASES[name][2]
    assert kernel.tiled == (CASES[name][2] == "tiled")


def test_a_channels_last_chain_iterates_over_nhwc_reading_everything_as_one_group():
    _, (x,), analysis, cluster = _analysed("channels-last chain")
    p = plan(analysis.graph, cluster)
    assert p.domain == (2, 4, 4, 8)
    (arg,), (out,) = p.inputs, p.outputs
    assert arg.view == out.view == (Reorder(NHWC),)
    assert arg.access.groups == out.access.groups == (Group(0, 4, True),)
    assert out.memory_order == NHWC  # written as eager lays it out


def test_batchnorms_per_channel_weights_are_read_through_the_permuted_domain():
    """Over (N, H, W, C) a (C, 1, 1) weight varies along the innermost dim only: one unit
    group, `i % C`, as Inductor's `xindex % C`."""
    _, _, analysis, cluster = _analysed("conv → BatchNorm → ReLU")
    p = plan(analysis.graph, cluster)
    assert p.domain == (2, 5, 6, 6)
    conv = next(t for t in p.inputs if t.value == "conv")
    weights = [t for t in p.inputs if t.value != "conv"]
    assert conv.access.groups == (Group(0, 4, True),)
    assert len(weights) == 4 and all(t.access.groups == (Group(3, 4, True),) for t in weights)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_a_channels_last_chain_matches_eager_with_its_strides(dtype, tmp_path):
    """At the analysed shape and others (odd sizes: the flat blocks end part-way; a batch
    and channels of 1); an NCHW input in the channels-last slot is copied into the analysed
    layout first. Each result is laid out as eager lays out the channels-last one."""
    x = cl(2, 8, 4, 4, dtype=dtype)
    analysis = analyze(Lambda(chain, 1), x)
    kernel = generate(analysis, analysis.clusters[0], Tuning(block=16))
    assert not kernel.tiled
    runs = [cl(2, 8, 4, 4, dtype=dtype), cl(3, 5, 7, 3, dtype=dtype), cl(1, 3, 5, 1, dtype=dtype),
            torch.randn(2, 8, 4, 4).to(dtype)]
    for k, x in enumerate(runs):
        (got,) = run_kernel(kernel, tmp_path / str(k), (x,))
        expected = chain(None, x.to(memory_format=CL))
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(("shape", "domain", "calls"), [
    ((2, 3, 1, 4), (2, 1, 4, 3), [(2, 3, 5, 4), (3, 3, 1, 7), (2, 3, 2, 1)]),
    ((2, 3, 4, 1), (2, 4, 1, 3), [(2, 3, 4, 5), (2, 3, 1, 6), (1, 3, 3, 2)]),
], ids=["one row", "one column"])
def test_a_channels_last_chain_with_a_size_1_dim_iterates_in_its_memory_order_at_any_size(
        shape, domain, calls, tmp_path):
    """Channels-last with H (or W) 1 long lies as (N, H, W, C): the iteration order is that
    one, the size-1 dim placed as the result's memory order has it, not where it stands in
    NCHW (then (N, W, H, C), H's stride split the result's one group: tiled, and a longer H
    refused). Calls with it longer, or other sizes, are one group still and match eager,
    strides included."""
    analysis = analyze(Lambda(chain, 1), cl(*shape))
    (cluster,) = analysis.clusters
    p = plan(analysis.graph, cluster)
    (arg,), (out,) = p.inputs, p.outputs
    assert p.domain == domain and arg.view == out.view == (Reorder(NHWC),)
    assert arg.access.groups == out.access.groups == (Group(0, 4, True),)
    kernel = generate(analysis, cluster, Tuning(block=16))
    assert not kernel.tiled
    for k, size in enumerate([shape, *calls]):
        x = cl(*size)
        (got,) = run_kernel(kernel, tmp_path / str(k), (x,))
        expected = chain(None, x)
        assert got.stride() == expected.stride(), size
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_a_channels_last_conv_bn_relu_matches_eager_with_its_strides(dtype, tmp_path):
    model = _conv_bn_relu(dtype)
    x = cl(2, 3, 5, 6, dtype=dtype)
    analysis = analyze(model, x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, Tuning(block=16))
    assert not kernel.tiled
    values = capture_values(analysis, x)
    (got,) = run_kernel(kernel, tmp_path, tuple(values[n] for n in cluster.inputs))
    with torch.no_grad():
        expected = model(x)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got, expected)


def test_a_conv_bn_relu_analysed_on_one_image_runs_flat_on_more(tmp_path):
    """The batch of 1 stays outermost in the reordered space and grows with the input, while
    the per-channel weights stay broadcast along it."""
    model = _conv_bn_relu()
    analysis = analyze(model, cl(1, 3, 5, 6))
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, Tuning(block=16))
    assert not kernel.tiled
    for k, shape in enumerate([(3, 3, 5, 6), (2, 3, 7, 2)]):
        x = cl(*shape)
        values = capture_values(analysis, x)
        (got,) = run_kernel(kernel, tmp_path / str(k), tuple(values[n] for n in cluster.inputs))
        with torch.no_grad():
            expected = model(x)
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got, expected)


def test_a_call_without_the_dims_the_kernel_reorders_is_refused_by_name(tmp_path):
    """Fewer leading dims pass (the reorder is written from the end, `movedim`); an input
    without all the dims it moves would need them made up, and is refused naming it."""
    analysis = analyze(Lambda(chain, 1), cl(2, 8, 4, 4))
    kernel = generate(analysis, analysis.clusters[0])
    with pytest.raises(ValueError, match=r"`a` has 2 dims; this kernel reads its last 3 in "
                                         r"their memory order"):
        run_kernel(kernel, tmp_path, (torch.randn(4, 4),))


@pytest.mark.slow
def test_the_flat_channels_last_kernel_loads_and_stores_four_floats_at_a_time():
    """Compiled for sm_90: one flat layout, four elements a thread, `ld.global.v4.b32` and
    `st.global.v4.b32`, at 64 channels and at 6. Tiled, the chain was loaded down the rows
    (`rows // rspan1` terms): four at a time at 64 channels, one at a time at 6, which no
    vector width divides (`ld.global.b32`)."""
    flat = {"order": [0], "sizePerThread": [4]}
    for found in ttgir_load_layouts_of([("8,64,56,56", "channels-last chain"),
                                        ("8,6,56,56", "channels-last chain")]):
        assert found["loads"] == [flat] and found["stores"] == [flat], found
        assert {"ld.global.v4.b32", "st.global.v4.b32"} <= set(found["ptx_memory"]), found
