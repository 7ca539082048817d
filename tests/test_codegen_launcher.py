"""The generated launcher's plan cache: a repeated call with the same input layout skips the
checks and launch choices (`_plan`), a different layout recomputes them, bad inputs still raise
on every call, and the cache stays bounded."""

import re

import pytest
import torch
import torch.nn as nn
from codegen_harness import DEVICE, Lambda, to_device

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.codegen.reference import capture_values
from fusion_core.pipeline import analyze


def _load(model, inputs, tmp_path, **gen_kwargs):
    """The cluster's loaded module, with `_plan` wrapped to count its calls."""
    analysis = analyze(model, *inputs)
    assert len(analysis.clusters) == 1, [c.chain for c in analysis.clusters]
    kernel = generate(analysis, analysis.clusters[0], **gen_kwargs)
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    real, module.plans = module._plan, []

    def counting(*args):
        module.plans.append(args)
        return real(*args)

    module._plan = counting
    return module, getattr(module, kernel.name)


def _transposed_add(m, x, y):
    return torch.relu(x + y.transpose(1, 2))  # the cluster reads y.transpose through strides


def _add(m, x, yt):
    """The cluster of `_transposed_add`: its launcher takes (x, y.transpose(1, 2))."""
    return torch.relu(x + yt)


def _transposed_module(tmp_path):
    return _load(Lambda(_transposed_add), (torch.randn(2, 4, 8), torch.randn(2, 8, 4)),
                 tmp_path)


def _yt():
    return torch.randn(2, 8, 4).transpose(1, 2)


def _check(launch, fn, *inputs):
    """The launcher's result on `inputs` against `fn(None, *inputs)` in eager."""
    got = launch(*(to_device(t) for t in inputs))
    torch.testing.assert_close(got.cpu(), fn(None, *inputs))


def test_same_layout_reuses_the_plan(tmp_path):
    module, launch = _transposed_module(tmp_path)
    for _ in range(3):
        _check(launch, _add, torch.randn(2, 4, 8), _yt())  # fresh data, same layout
    assert len(module.plans) == 1 and len(module.LAUNCH_CACHE) == 1


def test_other_strides_recompute_the_plan(tmp_path):
    """Same shapes, other strides: the kernel's stride arguments must change with them."""
    module, launch = _transposed_module(tmp_path)
    x, yt = torch.randn(2, 4, 8), _yt()
    _check(launch, _add, x, yt)
    wider = torch.randn(2, 8, 7)[:, :, :4].transpose(1, 2)  # yt's shape, strides (56, 1, 7)
    _check(launch, _add, x, wider)
    _check(launch, _add, x, yt)  # and back: the first plan is still right
    assert len(module.plans) == 2 and len(module.LAUNCH_CACHE) == 2
    assert module.plans[1][1].stride() == (56, 1, 7)


def test_strides_the_kernel_cannot_index_copy_the_input(tmp_path):
    module, launch = _transposed_module(tmp_path)
    yt = _yt()
    _check(launch, _add, torch.randn(2, 4, 8), yt)
    x_t = torch.randn(2, 8, 4).transpose(1, 2)  # x's shape, not contiguous: copied
    for _ in range(2):
        _check(launch, _add, x_t, yt)
    assert len(module.plans) == 2
    copies = [plan[0] for plan in module.LAUNCH_CACHE.values()]
    assert sorted(copies) == [(), (True, False)]  # only the new layout copies, only x


def test_another_batch_size_recomputes_the_plan(tmp_path):
    fn = lambda m, x: torch.softmax(x * 2.0, dim=-1)  # noqa: E731
    module, launch = _load(Lambda(fn, 1), (torch.randn(4, 16),), tmp_path)
    for rows in (4, 3, 4, 1):
        _check(launch, fn, torch.randn(rows, 16))
    assert len(module.plans) == 3 and len(module.LAUNCH_CACHE) == 3


def test_empty_inputs_skip_the_launch_from_the_cache_too(tmp_path):
    fn = lambda m, x: torch.relu(x * 2.0)  # noqa: E731
    module, launch = _load(Lambda(fn, 1), (torch.randn(4, 16),), tmp_path)
    for _ in range(2):
        assert launch(to_device(torch.randn(0, 16))).shape == (0, 16)
    assert len(module.plans) == 1


def test_the_cache_is_bounded(tmp_path):
    fn = lambda m, x: torch.relu(x * 2.0)  # noqa: E731
    module, launch = _load(Lambda(fn, 1), (torch.randn(4, 16),), tmp_path)
    module.LAUNCH_CACHE_SIZE = 2
    for rows in range(1, 6):
        _check(launch, fn, torch.randn(rows, 16))
        assert 1 <= len(module.LAUNCH_CACHE) <= 2
    assert [key[0][0] for key in module.LAUNCH_CACHE] == [4, 5]  # the oldest made room
    _check(launch, fn, torch.randn(5, 16))  # the newest plan survived
    assert len(module.plans) == 5


def _raises_every_time(module, launch, inputs, error, match):
    before = dict(module.LAUNCH_CACHE)
    for _ in range(2):  # a failed plan is never cached: the second call checks again
        with pytest.raises(error, match=match):
            launch(*(to_device(t) for t in inputs))
    assert module.LAUNCH_CACHE == before


def test_bad_inputs_raise_after_a_good_call(tmp_path):
    module, launch = _transposed_module(tmp_path)
    x, yt = torch.randn(2, 4, 8), _yt()
    _check(launch, _add, x, yt)
    _raises_every_time(module, launch, (torch.randn(3, 2, 4, 8), yt), ValueError,
                       "this kernel iterates over 3-d shapes")
    _raises_every_time(module, launch, (torch.randn(2, 4, 9), yt), ValueError,
                       "is 8 long in dim 2 as this kernel views its inputs, another is 9 long")
    _check(launch, _add, x, yt)
    assert len(module.plans) == 1 + 4  # the good layout was planned once


def test_a_layout_no_copy_fixes_raises(tmp_path):
    """A row-vector operand given as a full matrix varies along a dim the kernel broadcasts
    it over: no copy makes that indexable."""
    fn = lambda m, x, b: torch.relu(x + b)  # noqa: E731
    module, launch = _load(Lambda(fn), (torch.randn(4, 8), torch.randn(8)), tmp_path)
    _raises_every_time(module, launch, (torch.randn(4, 8), torch.randn(4, 8)), ValueError,
                       r"^cluster0: `b` of shape \(4, 8\) is 4 long in dim 0, which this "
                       r"kernel reads it broadcast over \(it was 1 long there, or absent, "
                       r"when analysed\); regenerate it at these sizes or keep the original "
                       r"ops$")


def test_a_channels_last_input_longer_in_a_dim_analysed_1_long_is_refused_naming_the_dim(
        tmp_path):
    """A mean over W of a channels-last (N, C, 1, W) input: the kernel reads it broadcast
    over H; called with H = 5 the refusal names the input and the dim, not index groups."""
    fn = lambda m, x: (x * 2.0).mean(-1)  # noqa: E731
    x = torch.randn(2, 3, 1, 4).to(memory_format=torch.channels_last)
    module, launch = _load(Lambda(fn), (x,), tmp_path)
    longer = torch.randn(2, 3, 5, 4).to(memory_format=torch.channels_last)
    _raises_every_time(module, launch, (longer,), ValueError,
                       r"^cluster0: `a` of shape \(2, 3, 5, 4\) is 5 long in dim 2, which "
                       r"this kernel reads it broadcast over")


def test_a_contiguous_input_where_a_transposed_one_was_analysed_is_relaid(tmp_path):
    """The kernel reads yt's middle dim with stride 1; a contiguous yt is copied into that
    layout (dims in the analysed memory order), not refused and not copied contiguous."""
    module, launch = _transposed_module(tmp_path)
    x, yt = torch.randn(2, 4, 8), _yt()
    assert module.IN_ORDERS[1] == (0, 2, 1)
    _check(launch, _add, x, yt.contiguous())
    ((copies, *_),) = module.LAUNCH_CACHE.values()
    assert copies == (False, True)
    assert module._relaid(yt.contiguous(), (0, 2, 1), yt.device).stride() == yt.stride()


def test_fewer_dims_and_a_copy_keep_the_analysed_order_of_the_dims_left(tmp_path):
    """A kernel analysed on (2, 4, 8) inputs, the second a transposed view, called on 2-d
    ones with a contiguous second input: copied as the 2-d transposed layout, result 2-d."""
    module, launch = _transposed_module(tmp_path)
    x, y = torch.randn(4, 8), torch.randn(4, 8)  # y contiguous where a transpose was analysed
    _check(launch, _add, x, y)
    ((copies, *_),) = module.LAUNCH_CACHE.values()
    assert copies == (False, True)
    assert module._dense_strides((4, 8), (0, 2, 1)) == (1, 4)


def test_rows_too_wide_raise_on_every_call(tmp_path):
    fn = lambda m, x: torch.softmax(x * 2.0, dim=-1)  # noqa: E731
    module, launch = _load(Lambda(fn, 1), (torch.randn(4, 16),), tmp_path, looped=False)
    _check(launch, fn, torch.randn(4, 16))
    wide = torch.randn(2, module.MAX_BLOCK + 1)
    _raises_every_time(module, launch, (wide,), ValueError, re.escape(
        f"cluster0: rows of {module.MAX_BLOCK + 1} columns are wider than this kernel keeps "
        f"in one block ({module.MAX_BLOCK}): analyse the model again at an input shape with "
        "rows at least this wide, which generates a kernel for them"))


def test_rows_too_wide_for_several_reductions_say_the_row_must_stay_whole(tmp_path):
    """Two reductions over one row cannot loop over column blocks: a wider analysis would
    not help, so the refusal does not send the user there."""
    fn = lambda m, x: (lambda p: p * p.amax(-1, keepdim=True))(  # noqa: E731
        torch.softmax(x * 3.0, -1))
    module, launch = _load(Lambda(fn, 1), (torch.randn(4, 16),), tmp_path, looped=False)
    _check(launch, fn, torch.randn(4, 16))
    wide = torch.randn(2, module.MAX_BLOCK + 1)
    _raises_every_time(module, launch, (wide,), ValueError,
                       r"\(16384\): its reductions need the whole row in one block: keep the "
                       r"original ops for rows this wide$")


def test_dtype_and_device_are_part_of_the_key(tmp_path):
    fn = lambda m, x: torch.relu(x * 2.0)  # noqa: E731
    module, launch = _load(Lambda(fn, 1), (torch.randn(4, 16),), tmp_path)
    x = to_device(torch.randn(4, 16))
    launch(x)
    ((key, _),) = module.LAUNCH_CACHE.items()
    assert key == (x.shape, x.stride(), x.dtype, x.device)
    assert x.device.type == DEVICE


@pytest.mark.parametrize("fn,want_error", [
    (lambda m, x: torch.softmax(x * 2, dim=-1), False),  # results as empty as the rows
    (lambda m, x: (x * 2).sum(-1) + 1, True),  # one result per empty row: not computed
], ids=["softmax", "sum"])
def test_rows_of_width_zero(fn, want_error, tmp_path):
    """An empty last axis: no layout complaint about the empty tensor; a reduction whose
    results would not be empty says so instead of returning uninitialized memory."""
    _, launch = _load(Lambda(fn), (torch.randn(4, 8),), tmp_path)
    x = to_device(torch.randn(4, 0))
    if want_error:
        with pytest.raises(ValueError, match="rows to reduce are empty"):
            launch(x)
    else:
        assert launch(x).shape == (4, 0)
    assert launch(to_device(torch.randn(0, 8))).shape == fn(None, torch.randn(0, 8)).shape


@pytest.mark.parametrize("fn,analysed,width,called", [
    (lambda m, x: torch.sigmoid(x * m.w) + 1, (2, 3, 8), 8, [(3, 8), (8,)]),
    # iterated in the transposed memory order, a view the launcher right-aligns as well
    (lambda m, x: torch.relu(x.transpose(-1, -2) * m.w), (2, 8, 3), 8, [(8, 3)]),
    (lambda m, x: torch.softmax(x * m.w, dim=-1), (2, 3, 8), 8, [(3, 8), (8,)]),
    (lambda m, x: (x * m.w).sum(-1), (2, 3, 8), 8, [(3, 8), (8,)]),
], ids=["elementwise", "transposed", "softmax", "sum"])
def test_fewer_dims_than_analysed_give_results_of_eager_rank(fn, analysed, width, called,
                                                             tmp_path):
    """A kernel analysed on 3-d inputs, called on 2-d or 1-d ones: results have the dims
    eager's have, not the analysed rank's leading 1s."""
    torch.manual_seed(2)
    model = Lambda(fn, w=torch.randn(width))
    analysis = analyze(model, analysed)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster)
    launch = getattr(load_kernel(write_kernels([kernel], tmp_path)[0]), kernel.name)
    for shape in called:
        x = torch.randn(shape)
        # The cluster's inputs: the parameter, and `x` or (transposed case) its transposed view.
        args = [to_device(model.w.detach() if name == "w" else
                          x.transpose(-1, -2) if name.startswith("transpose") else x)
                for name in cluster.inputs]
        assert len(cluster.inputs) == 2 and "w" in cluster.inputs
        want = fn(model, x)
        got = launch(*args)
        assert got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)


def _relu2(m, v):
    return torch.relu(v * 2.0)


def _transposed_plus(m, x, y):
    """Reads `x.t()` beside a contiguous `y`: two memory orders, so the kernel tiles (with
    `x.t()` alone eager writes the result transposed too, and the kernel is flat)."""
    return _relu2(m, x.t()) + y


@pytest.mark.parametrize("fn,make,constant", [
    (_relu2, lambda: (torch.randn(4, 16),), "BLOCK"),
    # The cluster reads `x.t()`: its launcher takes the transposed view.
    (_transposed_plus, lambda: (torch.randn(16, 4).t(), torch.randn(4, 16)), "TILE_COLS"),
    (lambda m, x: torch.softmax(x * 2.0, dim=-1), lambda: (torch.randn(4, 16),), "MAX_ROWS"),
], ids=["flat", "tiled", "reduction"])
def test_an_edited_tuning_size_that_is_not_a_power_of_two_is_named(fn, make, constant,
                                                                   tmp_path):
    tiled = constant == "TILE_COLS"  # analysed on `x`, launched on `x.t()`
    analysed = (make()[0].t(), *make()[1:]) if tiled else make()
    module, launch = _load(Lambda(fn, len(analysed)), analysed, tmp_path)
    ref = (lambda m, xt, y: _relu2(m, xt) + y) if tiled else fn
    setattr(module, constant, 48)
    with pytest.raises(ValueError, match=f"{constant} = 48: tuning sizes must be powers of two"):
        launch(*map(to_device, make()))
    setattr(module, constant, 32)
    _check(launch, ref, *make())



def _permuted(m, x, y):
    return torch.relu(x * 2.0).permute(0, 2, 1) + y  # the kernel reads x through a permute


def test_a_viewed_input_is_keyed_raw_and_read_at_this_calls_data(tmp_path):
    """The plan keeps where the view lies in the raw input, not the view: a later call with
    the same layout but another buffer and storage offset still reads its own data."""
    module, launch = _load(Lambda(_permuted), (torch.randn(2, 5, 6), torch.randn(2, 6, 5)),
                           tmp_path)
    _check(launch, _permuted, torch.randn(2, 5, 6), torch.randn(2, 6, 5))
    big = torch.randn(3, 5, 6)
    _check(launch, _permuted, big[1:], torch.randn(2, 6, 5))  # same strides, offset 30
    _check(launch, _permuted, torch.randn(2, 5, 6), torch.randn(2, 6, 5))
    assert len(module.plans) == 1 and len(module.LAUNCH_CACHE) == 1
    (seats, _), = module.LAUNCH_CACHE.values()
    assert seats == (((2, 6, 5), (30, 1, 6), 0),)  # x permuted: no offset of its own


def _reshaped(m, x, y):
    return torch.exp(x).reshape(8, 4) * y  # the kernel reads x through a reshape to (8, 4)


def test_a_reshape_that_copies_is_taken_again_on_every_call(tmp_path):
    """Strides the reshape cannot view: it copies, so the plan keeps no seats and each call
    views (copies) that call's input again."""
    module, launch = _load(Lambda(_reshaped), (torch.randn(4, 8), torch.randn(8, 4)),
                           tmp_path)
    for _ in range(2):
        _check(launch, _reshaped, torch.randn(8, 4).t(), torch.randn(8, 4))
    assert len(module.plans) == 1
    assert [seats for seats, _ in module.LAUNCH_CACHE.values()] == [None]


def _scale_shift_relu(m, x):
    return torch.relu(x * m.w + m.b)


def _squeeze_excite(m, x, s):
    return x * torch.sigmoid(s)


def _channel_softmax(m, x):
    return torch.softmax(x * 2.0, dim=1)


def _flattened(m, x):
    return torch.relu(x * 2.0).flatten(1) + 1.0


def _row_softmax(m, x):
    return torch.softmax(x, dim=-1) * 2.0


def _norm_gelu(m, x):
    return nn.functional.gelu(nn.functional.layer_norm(x, (8,), m.w, m.b))


def _norm_scaled(m, x):
    return nn.functional.layer_norm(x, (8,)) * m.g


@pytest.mark.parametrize("model,make_inputs", [
    # per-channel parameters shaped (C, 1, 1), as a BatchNorm's folded into the graph
    (Lambda(_scale_shift_relu, w=torch.randn(4, 1, 1), b=torch.randn(4, 1, 1)),
     lambda n: (torch.randn(n, 4, 3, 5),)),
    (nn.Sequential(nn.BatchNorm2d(4), nn.ReLU()).eval(), lambda n: (torch.randn(n, 4, 3, 5),)),
    # parameters that have the batch dim, of size 1 (a scale, a positional embedding)
    (Lambda(_scale_shift_relu, w=torch.randn(1, 4, 1, 1), b=torch.randn(1, 4, 3, 5)),
     lambda n: (torch.randn(n, 4, 3, 5),)),
    # a per-sample (N, C, 1, 1) input (squeeze-excite's scale) grows with the batch
    (Lambda(_squeeze_excite), lambda n: (torch.randn(n, 4, 3, 5), torch.randn(n, 4, 1, 1))),
    # NCHW read as NHWC rows of channels: the batch stride does not continue H and W's
    (Lambda(_channel_softmax), lambda n: (torch.randn(n, 4, 3, 5),)),
    # a view that merges the dims after the batch (`flatten(1)`), not a fixed (1, 60) target
    (Lambda(_flattened), lambda n: (torch.randn(n, 4, 3, 5),)),
    # rows over the last dim of (B, T, C): the batch of 1 grows with the input
    (Lambda(_row_softmax), lambda n: (torch.randn(n, 6, 8),)),
    (Lambda(_norm_gelu, w=torch.randn(8), b=torch.randn(8)), lambda n: (torch.randn(n, 6, 8),)),
    # a (1, C) parameter as long as the (1, C) input at analysis stays broadcast
    (Lambda(_norm_scaled, g=torch.randn(1, 8)), lambda n: (torch.randn(n, 8),)),
], ids=["params-c11", "batch_norm", "params-1c11", "per-sample-scale", "channel-softmax",
        "flatten", "row-softmax", "layer-norm-gelu", "layer-norm-1c-param"])
def test_a_kernel_analysed_at_batch_1_runs_at_batch_2(model, make_inputs, tmp_path):
    """Parameters keep their shape at any batch: analysed at batch 1, their index must not
    merge the batch dim with the channels, or batch 2 reads past the channels (or is
    refused); an input with that dim grows with it."""
    torch.manual_seed(3)
    if isinstance(model, nn.Sequential):
        with torch.no_grad():
            model[0].running_mean.normal_()
            model[0].running_var.uniform_(0.5, 2.0)
    analysis = analyze(model, *make_inputs(1))
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster)
    launch = getattr(load_kernel(write_kernels([kernel], tmp_path)[0]), kernel.name)
    for n in (2, 1, 3):  # batch 1 after 2: the plan cache keys the batch
        inputs = make_inputs(n)
        values = capture_values(analysis, *inputs)
        got = launch(*(to_device(values[name]) for name in cluster.inputs))
        torch.testing.assert_close(got.cpu(), model(*inputs), msg=f"batch {n}")
