"""An example input's memory layout reaches the analysis: a channels-last tensor is analysed
(and its kernels generated) for channels-last strides, so the launcher takes the real input
as it is instead of copying it into NCHW at every call; validation's smaller shapes and
random inputs keep the layout, and the report says it."""

from __future__ import annotations

import pytest
import torch
from codegen_harness import ConvBnRelu, Lambda, run_kernel, to_device

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.codegen.lower import plan
from fusion_core.codegen.reference import capture_values
from fusion_core.errors import InputSpecError
from fusion_core.ir.shapes import InputSpec, fake_inputs
from fusion_core.ir.views import Reorder
from fusion_core.pipeline import analyze
from fusion_core.report.json_report import inputs_json
from fusion_core.validate.inputs import random_inputs, reduced_specs
from fusion_core.validate.shrink import resized

CL = torch.channels_last
NHWC = (0, 2, 3, 1)


def cl(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(memory_format=CL)


def test_a_spec_is_contiguous_unless_given_an_order():
    spec = InputSpec((2, 3, 4, 5))
    assert spec.memory_order is None and spec.stride == (60, 20, 5, 1)
    # the contiguous order given is the default (equal, same hash); a list is kept hashable
    assert InputSpec((2, 3, 4, 5), torch.float32, [0, 1, 2, 3]) == spec
    given = InputSpec((2, 3, 4, 5), torch.float32, [0, 2, 3, 1])
    assert given.memory_order == NHWC and hash(given) != hash(spec) and given != spec
    assert given.stride == torch.empty(2, 3, 4, 5, memory_format=CL).stride()
    with pytest.raises(InputSpecError, match="no permutation"):
        InputSpec((2, 3), torch.float32, (0, 0))


def test_a_spec_names_its_layout_only_when_not_contiguous():
    assert str(InputSpec((2, 3, 4, 5))) == "2×3×4×5 float32"
    assert str(InputSpec((2, 3, 4, 5), memory_order=NHWC)) == "2×3×4×5 float32 channels-last"
    assert str(InputSpec((3, 5), torch.float16, (1, 0))) == "3×5 float16 memory order (1, 0)"


@pytest.mark.parametrize(("tensor", "order"), [
    (torch.randn(2, 3, 4, 5), None),
    (cl(2, 3, 4, 5), NHWC),
    # decided by the dims longer than 1: where those lie as contiguous ones do (one channel,
    # one pixel), the memory is a contiguous tensor's, whatever the size-1 dims' strides
    (cl(2, 1, 4, 5), None),
    (cl(2, 3, 1, 1), None),
    # and one order whatever they are: torch's format where it fits (H's stride is 12 in
    # channels-last), else each size-1 dim just outside the next longer dim by index
    (torch.empty_strided((2, 3, 1, 4), (12, 1, 1, 3)), NHWC),
    (torch.empty_strided((5, 1, 4), (1, 1, 5)), (1, 2, 0)),
    (torch.randn(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d), (0, 2, 3, 4, 1)),
    (torch.randn(5, 3).t(), (1, 0)),
    (torch.randn(4, 5, 3).permute(0, 2, 1), (0, 2, 1)),
    (torch.randn(4, 10)[:, ::2], None),  # gaps: not dense, analysed contiguous
    (torch.randn(4, 1).expand(4, 5), None),  # expanded: not dense
    (torch.randn(10, 4)[::2].t(), None),  # transposed, with gaps: not dense either
])
def test_an_example_tensor_gives_its_memory_order(tensor, order):
    spec = InputSpec.of(tensor)
    assert spec.memory_order == order and spec.shape == tuple(tensor.shape)
    # a dense example's spec lays its shape out as it is (size-1 dims index nothing)
    if order is not None or tensor.is_contiguous():
        lie = zip(tensor.shape, spec.stride, tensor.stride(), strict=True)
        assert all(n == 1 or a == b for n, a, b in lie)


def test_fake_inputs_take_the_spec_strides():
    mode = torch._subclasses.fake_tensor.FakeTensorMode()
    (x, y) = fake_inputs(mode, [InputSpec((2, 3, 4, 5), memory_order=NHWC), InputSpec((3, 5))])
    assert x.is_contiguous(memory_format=CL) and not x.is_contiguous()
    assert y.stride() == (5, 1)


def test_smaller_shapes_keep_the_order():
    spec = InputSpec((8, 3, 4, 5), memory_order=NHWC)
    assert spec.resized((1, 3, 2, 5)) == InputSpec((1, 3, 2, 5), memory_order=NHWC)
    (shrunk,) = resized((spec,), ((0, 2),), 2)
    assert shrunk.memory_order == NHWC and shrunk.shape == (8, 3, 2, 5)


def test_validation_batch_keeps_the_order():
    """The numerics run's smaller batch is analysed channels-last, as the real one is."""
    analysis = analyze(Lambda(lambda m, x: torch.relu(x * 2.0) + 1.0, 1), cl(4096, 3, 4, 4))
    (small,) = reduced_specs(analysis)
    assert small.shape[0] < 4096 and small.memory_order == NHWC


def test_random_inputs_are_drawn_in_the_spec_layout_with_the_same_values():
    spec = InputSpec((2, 3, 4, 5), memory_order=NHWC)
    (x,) = random_inputs((spec,), torch.nn.Identity(), "cpu", seed=3)
    (plain,) = random_inputs((InputSpec((2, 3, 4, 5)),), torch.nn.Identity(), "cpu", seed=3)
    assert x.is_contiguous(memory_format=CL) and not x.is_contiguous()
    assert torch.equal(x, plain)  # the seed draws the same values, only laid out otherwise


def test_the_json_report_says_the_order_of_a_non_contiguous_input():
    assert inputs_json([InputSpec((2, 3, 4, 5), memory_order=NHWC), InputSpec((4, 8))]) == [
        {"shape": [2, 3, 4, 5], "dtype": "float32", "memory_order": [0, 2, 3, 1]},
        {"shape": [4, 8], "dtype": "float32"}]


def test_a_channels_last_example_of_one_pixel_is_analysed_as_a_contiguous_one(tmp_path):
    """(N, C, 1, 1) channels-last has strides (C, 1, C, C), contiguous (C, 1, 1, 1): one
    memory, both `is_contiguous()`. The spec, the report and the kernel are a contiguous
    example's, so both callers share them; the kernel reads the channels-last tensor as it
    is, and its result has the contiguous strides (eager keeps (C, 1, C, C) on `x * 2.0`:
    the same memory, the size-1 dims' strides indexing nothing)."""
    fn = lambda m, x: torch.relu(x * 2.0) + 1.0  # noqa: E731
    x = cl(2, 3, 1, 1)
    assert x.stride() != torch.randn(2, 3, 1, 1).stride() and x.is_contiguous()
    analysis, plain = analyze(Lambda(fn, 1), x), analyze(Lambda(fn, 1), torch.randn(2, 3, 1, 1))
    assert analysis.inputs == plain.inputs == (InputSpec((2, 3, 1, 1)),)
    assert str(analysis.inputs[0]) == "2×3×1×1 float32"
    assert inputs_json(analysis.inputs) == [{"shape": [2, 3, 1, 1], "dtype": "float32"}]
    (cluster,), (same,) = analysis.clusters, plain.clusters
    assert generate(analysis, cluster).source == generate(plain, same).source
    _, module, _, out = _launched(analysis, (x,), tmp_path)
    ((copies, *_),) = module.LAUNCH_CACHE.values()  # no views, so no seats
    assert copies == () and out.is_contiguous()
    torch.testing.assert_close(out, fn(None, x))


def test_the_json_schema_takes_the_order_and_rejects_a_malformed_one():
    jsonschema = pytest.importorskip("jsonschema")
    from fusion_core.report.json_report import schema, to_document

    doc = to_document(analyze(Lambda(lambda m, x: torch.relu(x * 2.0) + 1.0, 1), cl(2, 3, 4, 5)))
    assert doc["inputs"] == [{"shape": [2, 3, 4, 5], "dtype": "float32",
                              "memory_order": [0, 2, 3, 1]}]
    jsonschema.validate(doc, schema())
    doc["inputs"][0]["memory_order"] = ["channels_last"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema())


def _launched(analysis, inputs, tmp_path):
    """The cluster's generated launcher run on the cluster's real inputs (recorded from the
    model on `inputs`): its plan, its loaded module and its result."""
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster)
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    values = capture_values(analysis, *inputs)
    args = [values[n] for n in cluster.inputs]
    # on the GPU where there is one (its kernels need its memory), strides kept
    out = getattr(module, kernel.name)(*(to_device(a) for a in args))
    return plan(analysis.graph, cluster), module, args, out.cpu()


def test_an_elementwise_chain_over_a_channels_last_input_reads_it_without_a_copy(tmp_path):
    fn = lambda m, x: torch.relu(x * 2.0) + 1.0  # noqa: E731
    x = cl(2, 3, 5, 6)
    analysis = analyze(Lambda(fn, 1), x)
    assert analysis.inputs == (InputSpec((2, 3, 5, 6), memory_order=NHWC),)
    p, module, _, out = _launched(analysis, (x,), tmp_path)
    (arg,) = p.inputs
    # analysed for the input's channels-last strides: read in its memory order, (N, H, W, C)
    assert arg.view == (Reorder(NHWC),) and arg.stride == x.permute(NHWC).stride()
    # the launcher reads the input where it lies: its permuted view (seated in it) copied
    # nothing, and nothing is copied into the analysed layout
    ((seats, (copies, *_)),) = module.LAUNCH_CACHE.values()
    assert seats is not None and copies == ()
    expected = fn(None, x)
    assert out.stride() == expected.stride()
    torch.testing.assert_close(out, expected)


def test_the_tail_of_a_convolution_of_a_channels_last_input_reads_it_without_a_copy(tmp_path):
    """The convolution's output is channels-last in eager (it follows its input): the
    fused BatchNorm → ReLU after it is analysed so and takes it without a copy."""
    model = ConvBnRelu().eval()
    x = cl(2, 3, 5, 6)
    analysis = analyze(model, x)
    p, module, args, out = _launched(analysis, (x,), tmp_path)
    conv_out = next(t for t in p.inputs if t.value == "conv")
    assert args[0].is_contiguous(memory_format=CL) and not args[0].is_contiguous()
    assert conv_out.view == (Reorder(NHWC),)  # read in its memory order, as it lies
    assert conv_out.stride == args[0].permute(NHWC).stride()
    # (where its permuted view lies in it, the launch plan): the view copied nothing either
    ((seats, (copies, *_)),) = module.LAUNCH_CACHE.values()
    assert seats is not None and copies == ()
    with torch.no_grad():
        expected = model(x)
    assert out.stride() == expected.stride()
    torch.testing.assert_close(out, expected)


def test_a_channels_last_softmax_over_one_row_refuses_more_rows_naming_the_input(tmp_path):
    """Analysed for (N, C, 1, W) channels-last, a softmax over H writes its result in an
    order that holds while H is 1 long: other N and W run, a longer H is refused naming the
    input the caller passes and its dim (once the result, which the caller never spelled)."""
    fn = lambda m, x: torch.softmax(x * 2.0, 2)  # noqa: E731
    analysis = analyze(Lambda(fn, 1), cl(2, 3, 1, 4))
    kernel = generate(analysis, analysis.clusters[0])
    for k, shape in enumerate([(2, 3, 1, 4), (3, 3, 1, 5)]):
        x = cl(*shape)
        (got,) = run_kernel(kernel, tmp_path / str(k), (x,))
        torch.testing.assert_close(got, fn(None, x))
    with pytest.raises(ValueError) as e:
        run_kernel(kernel, tmp_path / "rows", (cl(2, 3, 2, 4),))
    assert str(e.value) == ("cluster0: `a`'s dim 2, 1 long in the analysed (2, 3, 1, 4), is 2 "
                            "long here; this kernel writes the result `softmax` in an order "
                            "that holds only while it is 1 long; regenerate it at these sizes "
                            "or keep the original ops")


def test_the_plugin_passes_a_tensor_layout_through_to_its_baseline(tmp_path):
    """The fixture hands tensors to the analysis as they are: the baseline records the
    input as channels-last (a shape tuple, having no layout, stays contiguous)."""
    from pytest_fusion.fixture import build_inputs
    from pytest_fusion.snapshot_build import from_analysis

    model = Lambda(lambda m, x: torch.relu(x * 2.0) + 1.0, 1)
    for given, said in [(cl(2, 3, 4, 5), "2×3×4×5 float32 channels-last"),
                        ((2, 3, 4, 5), "2×3×4×5 float32")]:
        analysis = analyze(model, *build_inputs([given], "float32"))
        assert from_analysis(analysis, "t.py::t", tmp_path).inputs == (said,)


def test_validation_records_the_cluster_inputs_channels_last_at_its_smaller_batch():
    """The numerics run's model inputs and what its kernels then read (the convolution's
    output) are laid out as at the analysed shape, so it checks the kernels on that layout."""
    from fusion_core.validate.prepare import recording

    model = ConvBnRelu().eval()
    analysis = analyze(model, cl(64, 3, 8, 8))
    rec = recording(analysis, [reduced_specs(analysis, 32)], keep_rows=True, device="cpu",
                    seed=0, clusters=[0])
    (x,) = rec.inputs
    assert x.shape[0] < 64 and x.is_contiguous(memory_format=CL) and not x.is_contiguous()
    read = rec.values["conv"]
    assert read.is_contiguous(memory_format=CL) and not read.is_contiguous()
