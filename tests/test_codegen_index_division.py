"""Indices divided by a span through a multiply-high (``writer.FastDivisor``): the kernels that
read a broadcast operand by `offs % span` call the file's `_index_mod` with the span's
multiplier and shift from the launcher's `_divisor`, give eager's values at sizes other than
the analysed ones, and compile for an sm_90 GPU (the interpreter accepts types the compiler
rejects)."""

import torch
import torch.nn.functional as F
from codegen_harness import Lambda, catch_launch, compile_for_gpu, run_kernel

from fusion_core.codegen import generate
from fusion_core.codegen.writer import INDEX_DIV, INDEX_MOD
from fusion_core.pipeline import analyze


def _kernel(fn, width: int, params: dict, *shapes):
    model = Lambda(fn, **params)
    analysis = analyze(model, *(torch.empty(s) for s in shapes))
    (cluster,) = analysis.clusters
    return model, generate(analysis, cluster)


def _broadcast(width: int):
    w = torch.randn(width, generator=torch.Generator().manual_seed(0))
    return _kernel(lambda m, x: torch.sigmoid(F.gelu(x * m.w) + 1), width, {"w": w},
                   (3, width))


def test_a_broadcast_operand_is_indexed_through_the_span_division(tmp_path):
    _, kernel = _broadcast(37)
    src = kernel.source
    assert f"def {INDEX_DIV}(x, d, m, l, FAST: tl.constexpr):" in src
    assert f"def {INDEX_MOD}(x, d, m, l, FAST: tl.constexpr):" in src
    assert f"{INDEX_MOD}(offs, span1, span1_m, span1_l, SPAN1_FAST)" in src
    assert "SPAN1_FAST: tl.constexpr" in src and "offs % span1" not in src


def test_the_division_gives_eagers_values_at_other_widths_and_row_counts(tmp_path):
    _, kernel = _broadcast(37)
    for rows, width in ((3, 37), (11, 37), (2, 3001), (5, 1), (4, 64)):
        w = torch.randn(width, generator=torch.Generator().manual_seed(width))
        x = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows))
        (got,) = run_kernel(kernel, tmp_path / f"{rows}x{width}", (x, w))
        torch.testing.assert_close(got, torch.sigmoid(F.gelu(x * w) + 1), rtol=1e-5,
                                   atol=1e-6)


def test_a_middle_dim_broadcast_divides_and_reduces_modulo(tmp_path):
    """x (a, b, c) times w (b, 1): the index of w is offs % (b·c) // c, both divisions."""
    w = torch.randn(5, 1, generator=torch.Generator().manual_seed(0))
    model, kernel = _kernel(lambda m, x: torch.relu(x * m.w) + 1, 0, {"w": w}, (2, 5, 7))
    assert INDEX_DIV in kernel.source
    for shape in ((2, 5, 7), (3, 5, 9)):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
        (got,) = run_kernel(kernel, tmp_path / "x".join(map(str, shape)), (x, model.w))
        torch.testing.assert_close(got, model(x))


def test_the_division_compiles_for_sm90(tmp_path):
    model, kernel = _broadcast(37)
    w = torch.randn(5, 1)
    _, middle = _kernel(lambda m, x: torch.relu(x * m.w) + 1, 0, {"w": w}, (2, 5, 7))
    compiled = compile_for_gpu([(kernel, tmp_path / "a", (torch.randn(3, 37), model.w)),
                                (middle, tmp_path / "b", (torch.randn(2, 5, 7), w))])
    assert len(compiled) == 2 and all(compiled.values()), compiled


def test_the_launch_takes_the_multiply_high_only_for_spans_no_multiple_of_16(tmp_path):
    """A span that is a multiple of 16 keeps `%` (Triton then knows runs of 16 stay
    contiguous: vector loads), and so does a span of 1 (Triton makes it a constant and
    `x // 1` folds away); any other span divides through the multiply-high."""
    _, kernel = _broadcast(37)
    for width, fast in ((37, True), (3001, True), (17, True), (768, False), (16, False),
                        (1, False)):
        x, w = torch.randn(3, width), torch.randn(width)
        caught = catch_launch(kernel, tmp_path / str(width), (x, w))
        assert caught["kwargs"]["SPAN1_FAST"] is fast, width
