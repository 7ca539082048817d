"""Tiled elementwise kernels (rows x column blocks, see codegen/lower.py) under stress: results
smaller than the tile, permuted/sliced/expanded views of rank 3-5, integer and bool data
through transposed views, and runtime layouts other than the analysed one. Each kernel runs
under Triton's interpreter against eager PyTorch (tests/codegen_harness.py)."""

import pytest
import torch
from codegen_harness import Lambda, check_model, run_kernel

from fusion_core.analysis import multi_output
from fusion_core.codegen import Tuning, generate
from fusion_core.codegen.reference import random_like
from fusion_core.pipeline import analyze


def rand(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


def _small_result_escapes(m, x, b, y):
    bb = torch.sigmoid(b * 2) + 1  # escapes: a result smaller than the iteration shape
    # beside a contiguous `y` (alone, `x.transpose` is iterated in its memory order: flat)
    return x.transpose(-1, -2) * y + bb, bb


SMALL_RESULTS = {  # x, b, whether the traffic model fuses it unforced
    "column": ((2, 7), (7, 1), True),  # (7, 2) iteration: storing 2 columns beats a split
    "0-d": ((2, 7), (), False),
    "rank-3 (2, 1, 1)": ((2, 7, 2), (2, 1, 1), False),
    "rank-3 (1, 2, 1)": ((2, 7, 2), (1, 2, 1), False),
}


@pytest.mark.parametrize("name", SMALL_RESULTS)
def test_results_that_do_not_span_the_last_axis(name, tmp_path, monkeypatch):
    """A column or 0-d result of a tiled kernel is stored under the tile's [ROWS, BLOCK] mask,
    so its pointer block must be that wide too (it was [ROWS, 1]: Triton refused the store)."""
    x_shape, b_shape, natural = SMALL_RESULTS[name]
    if not natural:  # the traffic model splits these; a kernel holding them must still work
        monkeypatch.setattr(multi_output.StoreVerdict, "pays", property(lambda self: True))
    x = rand(*x_shape)
    checked = check_model(Lambda(_small_result_escapes),
                          (x, rand(*b_shape), rand(*x.transpose(-1, -2).shape)), tmp_path,
                          n_clusters=1)
    (cluster,) = checked.analysis.clusters
    shapes = [checked.analysis.graph[v].meta.shape for v in cluster.outputs]
    assert checked.kernels[0].tiled and tuple(shapes[0]) == b_shape, shapes


PERMUTES = {
    "rank-3 (2, 0, 1)": (lambda m, x, y: x.permute(2, 0, 1) * y + 1, ((3, 4, 5), (5, 3, 4))),
    "rank-3 (1, 2, 0)": (lambda m, x, y: x.permute(1, 2, 0) * y + 1, ((3, 4, 5), (4, 5, 3))),
    "rank-4 (0, 2, 1, 3), middle broadcast": (
        lambda m, x, y: x.permute(0, 2, 1, 3) * y + 1, ((2, 3, 4, 5), (4, 1, 5))),
    "rank-4 (3, 1, 2, 0)": (lambda m, x: torch.relu(x.permute(3, 1, 2, 0)) * 2,
                            ((2, 3, 2, 5),)),
    "rank-5": (lambda m, x, y: torch.sigmoid(x.permute(4, 2, 0, 3, 1) - y),
               ((2, 3, 2, 3, 4), (2, 1, 3))),
    "size-1 middle dim": (lambda m, x: x.transpose(0, 2) * 2 + 1, ((6, 1, 3),)),
    "sliced last axis": (lambda m, x, y: x[..., 1:] * y + 1, ((2, 3, 6), (3, 5))),
    "step slice and transpose": (lambda m, x, y: x[:, ::2].t() * y + 1, ((5, 12), (6, 5))),
    "expanded operand": (lambda m, x, y: x.expand(2, 3, 5) * y.transpose(1, 2) + 1,
                         ((2, 1, 5), (2, 5, 3))),
}


# Every full-size tensor in the permuted input's memory order (eager writes the result in it,
# the other operand is broadcast): iterated in that order, flat (``memory_order_space.py``).
ONE_ORDER = {"rank-4 (0, 2, 1, 3), middle broadcast", "rank-4 (3, 1, 2, 0)", "rank-5",
             "size-1 middle dim"}


@pytest.mark.parametrize("name", PERMUTES)
def test_permuted_sliced_and_expanded_views(name, tmp_path):
    fn, shapes = PERMUTES[name]
    torch.manual_seed(1)
    checked = check_model(Lambda(fn), tuple(rand(*s) for s in shapes), tmp_path, n_clusters=1)
    assert checked.kernels[0].tiled == (name not in ONE_ORDER)


def test_random_inputs_keep_expanded_and_sliced_layouts():
    """The harness's fresh inputs have the captured strides: an expanded view (stride 0, whose
    elements share memory, so it cannot be written elementwise) and a sliced half view."""
    for t in (torch.randn(2, 1, 5).expand(2, 3, 5),
              torch.randn(4, 6, dtype=torch.float16)[:, 1:]):
        r = random_like(t)
        assert (r.shape, r.stride(), r.dtype) == (t.shape, t.stride(), t.dtype)
        assert bool((r.float().abs() >= 0.49).all())


INTEGERS = {
    "bool mask": (lambda m, x, k: x.masked_fill(k.t(), 0.5) * 2,
                  (rand(4, 6), torch.rand(6, 4) > 0.5)),
    "int64 operand": (lambda m, x, k: x * k.t() + 1, (rand(4, 6), torch.randint(-3, 3, (6, 4)))),
    "int8 chain": (lambda m, k, j: (k.t() + 1) * j,
                   (torch.randint(-3, 3, (6, 4), dtype=torch.int8),
                    torch.randint(-3, 3, (4, 6), dtype=torch.int8))),
    "bool result": (lambda m, x: (x.t() > 0) & (x.t() < 1), (rand(6, 4),)),
    "bfloat16": (lambda m, x, y: torch.sigmoid(x.t()) * y,
                 (rand(6, 4, dtype=torch.bfloat16), rand(4, 6, dtype=torch.bfloat16))),
}


@pytest.mark.parametrize("name", INTEGERS)
def test_integer_bool_and_half_data_through_transposed_views(name, tmp_path):
    fn, inputs = INTEGERS[name]
    torch.manual_seed(2)
    checked = check_model(Lambda(fn), inputs, tmp_path, n_clusters=1)
    # a transposed input alone is iterated in its memory order (eager writes the result so)
    assert checked.kernels[0].tiled == (name != "bool result")


def test_runtime_layouts_other_than_the_analysed_one(tmp_path):
    """A kernel analysed on `x.t()` of a (7, 5) x runs other shapes (one row, one column), and
    a contiguous tensor in the transposed slot, which the launcher copies into the analysed
    layout (the kernel iterates in `x.t()`'s memory order, flat: a contiguous copy would not
    be one contiguous group there)."""
    analysis = analyze(Lambda(lambda m, x: torch.sigmoid(x.t()) * 2 + 1), rand(7, 5))
    kernel = generate(analysis, analysis.clusters[0])
    assert not kernel.tiled
    for shape in ((9, 3), (9, 1), (1, 9), (40, 2)):
        x = rand(*shape)
        (got,) = run_kernel(kernel, tmp_path / "x".join(map(str, shape)), (x.t(),))
        torch.testing.assert_close(got, torch.sigmoid(x.t()) * 2 + 1)
    y = rand(5, 7)
    (got,) = run_kernel(kernel, tmp_path / "contiguous", (y,))
    torch.testing.assert_close(got, torch.sigmoid(y) * 2 + 1)


def test_a_column_operand_is_loaded_once_per_row(tmp_path):
    """In a tile, a column vector is a [ROWS, 1] load under the row mask, not a full tile."""
    torch.manual_seed(11)
    # beside a contiguous `y` (alone, `x.t()` is iterated in its memory order: flat)
    model = Lambda(lambda m, x, c, y: torch.relu(x.t() * c) + y)
    checked = check_model(model, (rand(40, 7), rand(7, 1), rand(7, 40)), tmp_path, n_clusters=1,
                          tuning=Tuning(block=64, tile_cols=16))  # 7 rows: a partial row block
    (kernel,) = checked.kernels
    assert kernel.tiled
    loads = [line.strip() for line in kernel.source.splitlines() if "tl.load(" in line]
    assert any(line.endswith("+ rows, mask=row_mask)") for line in loads), loads


def test_an_expanded_input_given_another_layout_is_relaid(tmp_path):
    """Analysed on `x.expand` of a column (strides (1, 0)), the kernel reads its rows with
    stride 1; a contiguous or row-expanded tensor in that slot is copied so that the rows keep
    stride 1 (the expanded dim outermost), not refused as unindexable."""
    fn = lambda m, x, y: x.expand(4, 8) * y.t() + 1  # noqa: E731
    analysis = analyze(Lambda(fn), rand(4, 1), rand(8, 4))
    kernel = generate(analysis, analysis.clusters[0])
    assert kernel.tiled
    yt = rand(8, 4).t()
    for i, e in enumerate((rand(4, 8), rand(8).expand(4, 8))):
        (got,) = run_kernel(kernel, tmp_path / str(i), (e, yt))
        torch.testing.assert_close(got, e * yt + 1)


def test_a_permuted_read_takes_column_blocks_first_and_covers_every_tile(tmp_path):
    """A kernel reading a permuted view remaps each program's place so the column blocks come
    first (emit.tile_order); over a grid of 3 row blocks x 3 column blocks with partial blocks
    on both axes every element is still written once, as eager computes it."""
    torch.manual_seed(5)
    model = Lambda(lambda m, x, y: x.t() * y + 1)
    checked = check_model(model, (rand(40, 20), rand(20, 40)), tmp_path, n_clusters=1,
                          tuning=Tuning(block=128, tile_cols=16))  # 8 rows x 16 columns a tile
    (kernel,) = checked.kernels
    assert kernel.tiled
    assert "programs take their tiles columns first" in kernel.source
    assert "col_block = place % tl.num_programs(1)" in kernel.source
