"""Traffic estimation: the unfused/fused formulas, broadcast operands at their own size,
element sizes from dtypes, and ops eager implements as aliases (no bytes)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from analysis_helpers import run
from codegen_harness import Lambda

from fusion_core.analysis.traffic import estimate_traffic, external_inputs
from fusion_core.ir.graph import TensorMeta
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze

N = 4 * 8  # elements of the default (4, 8) input


def test_chain_formula():
    c = run(lambda x: torch.relu(x * 2.0) + 1.0).clusters[0]
    # three ops, each reads one value and writes one: 6 transfers; fused: read x, write out.
    assert c.traffic.unfused_bytes == 6 * N * 4
    assert c.traffic.fused_bytes == 2 * N * 4
    assert c.traffic.saved_bytes == 4 * N * 4
    assert c.traffic.saved_fraction == pytest.approx(2 / 3)


def test_operand_read_twice_by_one_op_counts_once():
    c = run(lambda x: (lambda e: e * e)(torch.exp(x))).clusters[0]
    assert c.traffic.unfused_bytes == (2 + 2) * N * 4  # exp r+w, mul r(e once)+w


def test_broadcast_operands_count_at_their_own_size():
    a = run(lambda x, b: torch.relu(x * b) + b, (64, 16), (16,))
    c = a.clusters[0]
    big, small = 64 * 16 * 4, 16 * 4
    # mul: x + b + write; relu: r + w; add: r + b + w
    assert c.traffic.unfused_bytes == (big + small + big) + (big + big) + (big + small + big)
    # fused: x once, b once (read by two ops), result once
    assert c.traffic.fused_bytes == big + small + big
    assert c.inputs == ("x", "y")  # Fn2.forward(x, y)


def test_scalar_operands_move_nothing():
    c = run(lambda x: (x * 3.0 + 1.0) / 2.0).clusters[0]
    assert c.traffic.unfused_bytes == 6 * N * 4


@pytest.mark.parametrize("dtype, size", [
    (torch.float32, 4), (torch.float16, 2), (torch.bfloat16, 2), (torch.int64, 8),
    (torch.int32, 4), (torch.bool, 1),
])
def test_tensor_meta_itemsize(dtype, size):
    meta = TensorMeta((3, 5), dtype, (5, 1))
    assert meta.itemsize == size and meta.nbytes == 15 * size


@pytest.mark.parametrize("dtype, size", [
    (torch.float16, 2), (torch.bfloat16, 2), (torch.float32, 4), (torch.int64, 8),
])
def test_traffic_scales_with_element_size(dtype, size):
    a = run(lambda x: (x + 1) * 2, InputSpec((4, 8), dtype))
    c = a.clusters[0]
    assert c.traffic.unfused_bytes == 4 * N * size
    assert c.traffic.fused_bytes == 2 * N * size


def test_cast_reads_and_writes_at_each_dtype():
    a = run(lambda x: (x.float() * 2.0).to(torch.float16), InputSpec((4, 8), torch.float16))
    c = a.clusters[0]
    # float(): r 2 + w 4; mul: r 4 + w 4; to(fp16): r 4 + w 2  (bytes per element)
    assert c.traffic.unfused_bytes == (2 + 4 + 4 + 4 + 4 + 2) * N
    assert c.traffic.fused_bytes == (2 + 2) * N


def test_same_dtype_cast_moves_no_data():
    # `.float()` on a float32 tensor returns the tensor itself in eager.
    plain = run(lambda x: torch.exp(x) * 2.0).clusters[0].traffic
    cast = run(lambda x: torch.exp(x).float() * 2.0).clusters[0].traffic
    assert cast == plain


def test_dropout_in_eval_moves_no_data():
    plain = run(lambda x: torch.exp(x) * 2.0).clusters[0].traffic
    with_dropout = run(lambda x: F.dropout(torch.exp(x), 0.1, training=False) * 2.0)
    assert with_dropout.clusters[0].ops == ("exp", "dropout", "mul")
    assert with_dropout.clusters[0].traffic == plain


def test_escaping_values_are_written_in_fused_traffic():
    # An estimate for a two-result group (not a legal cluster) still counts both writes.
    g = run(lambda x: (lambda e: (e * 2.0, e + 1.0))(torch.exp(x))).graph
    group = {"exp", "mul", "add"}
    t = estimate_traffic(g, group)
    assert t.fused_bytes == 3 * N * 4  # read x, write mul and add
    assert external_inputs(g, group) == ("x",)


def test_reduction_output_is_counted_at_its_reduced_size():
    c = run(lambda x: torch.exp(x).sum(dim=-1), (64, 16)).clusters[0]
    big, rows = 64 * 16 * 4, 64 * 4
    assert c.traffic.unfused_bytes == (big + big) + (big + rows)
    assert c.traffic.fused_bytes == big + rows


def test_a_slice_inside_the_group_stores_at_the_kernels_shape():
    # The kernel iterates over what it writes, (16, 4): the (16, 16) product it slices is
    # never stored, so the result is not charged at that size; nor is `x`, of which it
    # loads the (16, 4) part the slice reaches (was charged whole).
    a = run(lambda x: torch.relu((x * 2.0)[:, :4]) + 1.0, (16, 16))
    (c,) = a.clusters
    assert c.ops == ("mul", "getitem", "relu", "add")  # the slice is inside
    assert c.traffic.fused_bytes == 16 * 4 * 4 + 16 * 4 * 4


def test_slices_read_in_the_kernel_of_a_value_it_reads_anyway_count_once():
    # rotate_half's `q[..., h:]`, `q[..., :h]`: the kernel takes q (read whole for `q * cos`)
    # and reads the halves through their maps, the same bytes: q, cos and sin read once each.
    def rotary(m, q, cos, sin):
        h = q.shape[-1] // 2
        return q * cos + torch.cat((-q[..., h:], q[..., :h]), dim=-1) * sin

    a = analyze(Lambda(rotary, 3), torch.randn(2, 3, 8), torch.randn(3, 8), torch.randn(3, 8))
    (c,) = a.clusters
    assert c.inputs == ("a", "b", "c")
    assert c.traffic.fused_bytes == 4 * (48 + 24 + 24 + 48)  # q, cos, sin read; result written


def test_overlapping_slices_count_the_columns_they_reach_once():
    # `h` is computed again for each slice (``slice_recompute.py``), each copy loading `x` at
    # its slice's columns: 0-3 and 2-5 of 16 load six of them. A slice of two dims counts
    # the whole input (the model tracks one sliced dim).
    c = run(lambda x: (lambda h: (h[:, :4] + h[:, 2:6]).relu())(x * 2.0), (16, 16)).clusters[0]
    assert c.ops.count("mul") == 2
    assert c.traffic.fused_bytes == 16 * 6 * 4 + 16 * 4 * 4
    c = run(lambda x: ((x * 2.0)[:4, :4]).relu(), (16, 16)).clusters[0]
    assert c.traffic.fused_bytes == 16 * 16 * 4 + 4 * 4 * 4
