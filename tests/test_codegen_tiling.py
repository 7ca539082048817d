"""Which dims a tiled elementwise kernel's columns cover (codegen/tiling.py), and the kernels
that rule makes: a permuted tensor's contiguous dim ends the rows, so its loads run down the
rows while the other tensors' run along the columns. Numerics run under Triton's interpreter
against eager PyTorch (tests/codegen_harness.py); the layouts Triton picks are read from an
sm_90 compile (slow)."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from codegen_harness import (
    Lambda,
    check_model,
    run_kernel,
    ttgir_load_layouts,
    ttgir_load_layouts_of,
)

from fusion_core.codegen import Tuning, generate
from fusion_core.codegen.layout import access
from fusion_core.codegen.lower import plan
from fusion_core.codegen.plan import TensorArg
from fusion_core.codegen.tiling import column_dims, unit_dim_against
from fusion_core.pipeline import analyze

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


def rand(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


def _plan_of(fn, *inputs):
    analysis = analyze(Lambda(fn), *inputs)
    (cluster,) = analysis.clusters
    return plan(analysis.graph, cluster)


def _arg(role, index, shape, stride, domain, dtype=torch.float32) -> TensorArg:
    return TensorArg(f"{role}{index}", role, index, f"v{index}", shape, stride, dtype,
                     access(shape, stride, domain), False)


def _dense(shape, order):
    """Strides of `shape` laid out with its dims in memory in `order` (outermost first)."""
    return torch.empty([shape[k] for k in order]).permute(
        [order.index(k) for k in range(len(shape))]).stride()


# -- the rule ------------------------------------------------------------------------------
def test_a_group_reading_everything_in_its_own_order_is_flat():
    p = _plan_of(lambda m, x, y: torch.sigmoid(x) * y + 1, rand(2, 3, 4, 5), rand(3, 4, 5))
    assert not p.tiled and p.reduced == 1


def test_a_transposed_matrix_keeps_the_last_axis_as_the_columns():
    p = _plan_of(lambda m, x, y: x.t() * y + 1, rand(6, 4), rand(4, 6))
    assert p.tiled and p.reduced == 1


def test_a_channels_last_read_makes_the_image_dims_the_columns():
    """ConvNeXt's tail: (N, H, W, C) * gamma, permuted to NCHW, plus an NCHW x. Rows are
    (N, C): the permuted input steps by 1 down them; columns (H, W): x steps by 1 along."""
    p = _plan_of(lambda m, y, g, x: (y * g).permute(0, 3, 1, 2) + x,
                 rand(2, 4, 5, 3), rand(3), rand(2, 3, 4, 5))
    assert p.tiled and p.domain == (2, 3, 4, 5) and p.reduced == 2 and p.n_cols == 20
    permuted = next(t for t in p.inputs if t.value == "a")  # the model's first input
    assert unit_dim_against(permuted, p.rank) == 1


def _nchw_and_nhwc(m, x):
    a = torch.sigmoid(x)
    return a, a.permute(0, 2, 3, 1) * 3


def test_a_permuted_result_keeps_its_inputs_memory_order_and_the_kernel_is_flat():
    """Two results, NCHW and through a permute NHWC: eager lays the second out in `a`'s NCHW
    memory order (a dense permuted tensor), and so does the kernel, so nothing is written
    against the iteration order and the kernel needs no tiles (tiled, with the NHWC result
    stored down the rows, while results were always allocated contiguous)."""
    p = _plan_of(_nchw_and_nhwc, rand(2, 3, 4, 5))
    assert not p.tiled and p.domain == (2, 3, 4, 5)
    assert p.outputs[1].memory_order == (0, 3, 1, 2)


@pytest.mark.parametrize("perm, cols", [((2, 0, 1), 2), ((1, 2, 0), 1), ((0, 2, 1), 1)])
def test_a_3d_permute_puts_the_dims_after_its_contiguous_one_in_the_columns(perm, cols):
    x = rand(3, 5, 7)
    y = rand(*[x.shape[k] for k in perm])
    p = _plan_of(lambda m, x, y: x.permute(*perm) * y + 1, x, y)
    assert p.tiled and p.reduced == cols


def test_the_permuted_tensor_moving_most_bytes_decides():
    domain = (4, 6, 8, 10)
    plain = _arg("out", 0, domain, _dense(domain, (0, 1, 2, 3)), domain)
    c_last = _dense(domain, (0, 2, 3, 1))  # contiguous along dim 1: columns (8, 10)
    n_last = _dense(domain, (1, 2, 3, 0))  # contiguous along dim 0: columns (6, 8, 10)
    small = _arg("in", 0, domain, c_last, domain)
    double = _arg("in", 1, domain, n_last, domain, torch.float64)
    assert column_dims(domain, [small, plain]) == 2
    assert column_dims(domain, [small, double, plain]) == 3  # twice the bytes
    same = replace(double, dtype=torch.float32)
    assert column_dims(domain, [same, small, plain]) == 3  # a tie: the first argument
    assert column_dims(domain, [small, same, plain]) == 2
    as_out = _arg("out", 1, domain, c_last, domain)
    assert column_dims(domain, [_arg("in", 1, domain, n_last, domain), as_out]) == 2  # output


def test_a_broadcast_or_sliced_operand_is_not_a_permuted_one():
    """A per-channel vector (unit stride on C, constant along the columns) and a slice of the
    last axis do not move the columns."""
    domain = (2, 3, 4, 5)
    gamma = _arg("in", 0, (3, 1, 1), (1, 0, 0), domain)
    sliced = _arg("in", 1, domain, (3 * 4 * 6, 4 * 6, 6, 1), domain)
    assert unit_dim_against(gamma, 4) is None and unit_dim_against(sliced, 4) is None
    assert column_dims(domain, [gamma, sliced]) == 1


def test_an_operand_broadcast_along_the_last_axis_still_counts_where_it_is_permuted():
    """Channels-last (N, H, W) values, broadcast along W: contiguous along C, varying along
    H, so C still ends the rows."""
    domain = (2, 3, 4, 5)
    per_h = _arg("in", 0, (2, 3, 4, 1), (12, 1, 3, 0), domain)
    sliced = _arg("in", 1, domain, (3 * 4 * 6, 4 * 6, 6, 1), domain)
    assert unit_dim_against(per_h, 4) == 1 and column_dims(domain, [per_h, sliced]) == 2


def test_the_convnext_example_tiles_its_tail_over_the_image():
    from convnext_block import ConvNeXtBlock

    torch.manual_seed(0)
    analysis = analyze(ConvNeXtBlock().eval(), torch.randn(2, 32, 8, 8))
    tail = next(c for c in analysis.clusters if c.chain == "mul → permute → add")
    p = plan(analysis.graph, tail)
    assert p.tiled and p.reduced == 2 and p.n_cols == 64


# -- numerics ------------------------------------------------------------------------------
CASES = {  # fn, input shapes; odd sizes so tiles end part-way in both directions
    "channels-last tail": (lambda m, y, g, x: (y * g).permute(0, 3, 1, 2) + x,
                           ((3, 5, 7, 6), (6,), (3, 6, 5, 7))),
    "channels-last tail, one image": (lambda m, y, g, x: (y * g).permute(0, 3, 1, 2) + x,
                                      ((1, 3, 9, 5), (5,), (1, 5, 3, 9))),
    "NCHW read into NHWC": (lambda m, x, y: torch.sigmoid(x).permute(0, 2, 3, 1) * y,
                            ((2, 5, 3, 7), (2, 3, 7, 5))),
    "3-d (2, 0, 1)": (lambda m, x, y: x.permute(2, 0, 1) * y - 1, ((3, 5, 7), (7, 3, 5))),
    "4-d (3, 1, 2, 0)": (lambda m, x, y: torch.relu(x.permute(3, 1, 2, 0)) + y,
                         ((3, 5, 2, 7), (7, 5, 2, 3))),
    "4-d (1, 3, 0, 2), broadcast operand": (
        lambda m, x, y: x.permute(1, 3, 0, 2) * y + 1, ((3, 5, 2, 7), (7, 1, 2))),
    "5-d (4, 2, 0, 3, 1)": (lambda m, x, y: torch.sigmoid(x.permute(4, 2, 0, 3, 1) - y),
                            ((2, 3, 5, 3, 7), (7, 5, 2, 3, 3))),
    "two permuted inputs": (lambda m, x, y, z: x.permute(0, 2, 1) * y.permute(2, 0, 1) + z,
                            ((3, 7, 5), (5, 7, 3), (3, 5, 7))),
}


@pytest.mark.parametrize("name", CASES)
def test_permuted_elementwise_groups_match_eager(name, tmp_path):
    fn, shapes = CASES[name]
    torch.manual_seed(3)
    checked = check_model(Lambda(fn), tuple(rand(*s) for s in shapes), tmp_path, n_clusters=1,
                          tuning=Tuning(block=64, tile_cols=8))  # several tiles each way
    assert checked.kernels[0].tiled


def test_a_permuted_input_beside_broadcast_operands_only_is_read_flat_in_its_order(tmp_path):
    """The 5-d permute minus a broadcast operand: eager lays the result out in the permuted
    input's memory order, so every full-size tensor shares it and the kernel iterates in it
    (``memory_order_space.py``): flat, where it tiled (the case above, with a contiguous
    operand instead, still tiles)."""
    fn = lambda m, x, y: torch.sigmoid(x.permute(4, 2, 0, 3, 1) - y)  # noqa: E731
    torch.manual_seed(3)
    checked = check_model(Lambda(fn), (rand(2, 3, 5, 3, 7), rand(5, 1, 3, 1)), tmp_path,
                          n_clusters=1, tuning=Tuning(block=64))
    assert not checked.kernels[0].tiled


def test_the_channels_last_kernel_runs_other_shapes_and_layouts(tmp_path):
    """Analysed at one shape, the kernel takes others (the columns are recomputed from the
    shape); an NCHW-contiguous tensor in the channels-last slot is copied into the analysed
    layout first, and the result still matches."""
    fn = lambda m, y, x: (y * 2.0).permute(0, 3, 1, 2) + x  # noqa: E731
    analysis = analyze(Lambda(fn), rand(2, 4, 5, 3), rand(2, 3, 4, 5))
    kernel = generate(analysis, analysis.clusters[0], Tuning(block=32, tile_cols=8))
    assert kernel.tiled
    for n, c, h, w in ((1, 7, 3, 9), (3, 2, 5, 1), (2, 17, 1, 1)):
        y, x = rand(n, h, w, c), rand(n, c, h, w)
        (got,) = run_kernel(kernel, tmp_path / f"{n}x{c}x{h}x{w}", (y, x))
        torch.testing.assert_close(got, (y * 2.0).permute(0, 3, 1, 2) + x)
    y_nchw = rand(2, 3, 4, 5).permute(0, 2, 3, 1)  # NHWC shape, NCHW memory
    x = rand(2, 3, 4, 5)
    (got,) = run_kernel(kernel, tmp_path / "relaid", (y_nchw, x))
    torch.testing.assert_close(got, (y_nchw * 2.0).permute(0, 3, 1, 2) + x)


# -- what Triton makes of it (sm_90 compile, no GPU) ---------------------------------------
@pytest.fixture(scope="module")
def channels_last_layouts() -> dict[str, dict]:
    """Both channels-last cases at ConvNeXt's benchmark shape compiled for sm_90
    (`ttgir_load_layouts`), in one process: case -> layouts."""
    cases = ["channels-last add", "channels-last result"]
    return dict(zip(cases, ttgir_load_layouts_of([("64,32,56,56", c) for c in cases]),
                    strict=True))


@pytest.mark.slow
def test_a_channels_last_tile_loads_each_input_along_its_contiguous_dim(channels_last_layouts):
    """ConvNeXt's benchmark shape: the channels-last input's tile is read fastest down the
    rows, four channels a thread; the NCHW input's along the columns, four pixels a thread
    (before this rule both were read one element at a time, along the columns). The result
    is channels-last as eager's is, so it is stored like the channels-last input."""
    found = channels_last_layouts["channels-last add"]
    permuted, plain = found["loads"]
    assert permuted["order"] == [0, 1] and permuted["sizePerThread"] == [4, 1], permuted
    assert plain["order"] == [1, 0] and plain["sizePerThread"] == [1, 4], plain
    assert found["stores"] == [permuted]


@pytest.mark.slow
def test_a_result_permuted_like_its_input_is_stored_along_with_it(channels_last_layouts):
    """NCHW in, NCHW and NHWC-shaped results: the second in eager's NCHW memory order, so
    the flat kernel loads and stores all three four elements at a time, along one direction."""
    found = channels_last_layouts["channels-last result"]
    flat = {"order": [0], "sizePerThread": [4]}
    assert found["loads"] == [flat] and found["stores"] == [flat, flat], found


@pytest.mark.slow
def test_convnexts_7x7_tail_stores_its_channels_last_sum_four_channels_at_a_time():
    """At 7x7 pixels the NCHW operand's rows are 49 long, which no vector width divides: its
    loads stay one element at a time. The result is channels-last as eager's is, stored down
    the channels four at a time like the channels-last input (stored along the 49-pixel rows
    as an NCHW tensor, one element at a time, before; Inductor stores it down the channels)."""
    found = ttgir_load_layouts("64,768,7,7", "channels-last add")
    assert found["stores"] == [{"order": [0, 1], "sizePerThread": [4, 1]}], found
    assert "st.global.v4.b32" in found["ptx_memory"], found
