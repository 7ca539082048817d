"""Kernels analysed where a dim is 1 long (a sequence of one token), run at other lengths.

A dim analysed 1 long is ambiguous: a tensor that has it may grow along it at run time or
be broadcast there. The launcher must follow the new length or refuse it with a one-line
ValueError naming the input and dim, never write a wrong result (found by
tests/size_fuzz.py): a result's own length-1 dim is indexed like the others, a slice that
was whole at length 1 (`x[:, :1]`) keeps its length check, and inputs that no longer
broadcast the way the kernel reads them are named.
"""

import pytest
import torch
from codegen_harness import DEVICE, Lambda

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.pipeline import analyze
from fusion_core.validate.subgraph import patch


def _patched(model, inputs, tmp_path):
    """The model's graph module with every cluster's generated kernel patched in."""
    a = analyze(model, *inputs)
    launchers = {}
    for c in a.clusters:
        kernel = generate(a, c)
        (path,) = write_kernels([kernel], tmp_path / f"c{c.index}")
        launchers[c.index] = (c, getattr(load_kernel(path), kernel.name))
    assert launchers, [r.reason for r in a.rejections]
    return patch(a.graph_module, launchers).to(DEVICE)


def _on_cpu(result):
    """The patched model's result(s) on the CPU, beside the eager model's."""
    return tuple(t.cpu() for t in result) if isinstance(result, tuple) else result.cpu()


def _row_sum(m, x):
    return (x * 1.5).sum(-1)


def _log_softmax_max(m, x):
    h = torch.log_softmax(x, -1)
    return h, h.amax(-1)


@pytest.mark.parametrize("fn", [_row_sum, _log_softmax_max], ids=["sum", "log_softmax amax"])
def test_a_result_analysed_one_long_follows_the_length(fn, tmp_path):
    """(B, 1) per-row results, analysed at T = 1: written at every position of another T
    (once, each row's result went to its batch's first place and the rest stayed empty)."""
    model = Lambda(fn)
    patched = _patched(model, (torch.randn(2, 1, 8),), tmp_path)
    for size in ((2, 1, 8), (2, 4, 8), (3, 5, 8), (1, 6, 8)):
        x = torch.randn(*size)
        torch.testing.assert_close(_on_cpu(patched(x.to(DEVICE))), model(x), msg=str(size))


class MinusFirst(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x - x[:, :1, :])


def test_a_slice_whole_at_length_one_is_checked_at_another(tmp_path):
    """`x[:, :1]` is all of `x` at T = 1 and its first row at T = 4: the kernel, which
    reads it as the first row at no length, refuses T = 4 (once it read all of `x`)."""
    model = MinusFirst()
    patched = _patched(model, (torch.randn(2, 1, 8),), tmp_path)
    x = torch.randn(3, 1, 8)
    torch.testing.assert_close(_on_cpu(patched(x.to(DEVICE))), model(x))
    with pytest.raises(ValueError) as e:
        patched(torch.randn(2, 4, 8, device=DEVICE))
    assert str(e.value) == ("cluster0: `x` is 4 long in dim -2; this kernel slices it as "
                            "analysed, where it was 1 long; regenerate it at these sizes or "
                            "keep the original ops")


class GatedMean(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 1), requires_grad=False)

    def forward(self, x, g):
        return torch.exp(torch.where(x > g, x, g * 0.5) * self.w[:x.shape[1]]).mean(1)


def test_an_input_analysed_one_long_that_grows_is_named(tmp_path):
    """A (B, T, 1) gate and a (T, 1) slice of a parameter, analysed at T = 1, where the
    kernel reads `x` permuted to reduce over T: at T = 4 the gate no longer broadcasts as
    the kernel reads it; a ValueError names it and the dim (once torch's broadcast error)."""
    model = GatedMean()
    patched = _patched(model, (torch.randn(2, 1, 8), torch.randn(2, 1, 1)), tmp_path)
    with pytest.raises(ValueError) as e:
        patched(torch.randn(2, 4, 8, device=DEVICE), torch.randn(2, 4, 1, device=DEVICE))
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("cluster0: `g` is 4 long in dim 1 as this kernel views its "
                                   "inputs, another is 8 long there: they do not broadcast")


class ScaledByMax(torch.nn.Module):
    def forward(self, x):
        h = x * x.amax(1).unsqueeze(1)
        return h, h.amax(-1)


def test_a_result_written_through_a_squeeze_of_a_dim_one_long_is_refused_at_another(tmp_path):
    """Analysed at T = 1, `x * x.amax(1)` is per row of the reduction over T (one element
    each), written through a squeeze of that dim; at T = 6 (with `x` strided so its layout
    fits) the launcher names the result and the squeezed dim (once torch's squeeze kept the
    dim and the result's store view failed in `permute`)."""
    model = ScaledByMax()
    patched = _patched(model, (torch.randn(2, 1, 8),), tmp_path)
    x = torch.randn(2, 8, 1).transpose(1, 2)
    for got, want in zip(_on_cpu(patched(x.to(DEVICE))), model(x), strict=True):
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError) as e:
        patched(torch.randn(2, 8, 6, device=DEVICE).transpose(1, 2))
    assert str(e.value) == ("cluster0: `mul` is written through its index map, which squeezes "
                            "dims (-2) of (2, 6, 8), 1 long where it was analysed; regenerate "
                            "it at these sizes or keep the original ops")


class CenteredOverBatchAndFeatures(torch.nn.Module):
    def forward(self, x):
        return -(x - x.mean((0, 2), keepdim=True))


def test_a_result_whose_grouped_dims_come_apart_at_another_length_is_refused(tmp_path):
    """A mean over (B, C) per position, analysed at T = 1: the kernel reads and writes
    (T, B, C) with B and C as one run of memory, which they are in a (B, 1, C) tensor but
    not in a (B, 6, C) one. The input is copied into that layout; the result, allocated in
    its own, does not fit, and the call is refused naming the input whose T grew (once the
    kernel wrote it as one run, a wrong result; then the refusal named the result)."""
    model = CenteredOverBatchAndFeatures()
    patched = _patched(model, (torch.randn(2, 1, 8),), tmp_path)
    x = torch.randn(3, 1, 8)
    torch.testing.assert_close(_on_cpu(patched(x.to(DEVICE))), model(x))
    with pytest.raises(ValueError) as e:
        patched(torch.randn(2, 6, 8, device=DEVICE))
    assert str(e.value) == ("cluster0: `x`'s dim 1, 1 long in the analysed (2, 1, 8), is 6 "
                            "long here; this kernel writes the result `neg` in an order that "
                            "holds only while it is 1 long; regenerate it at these sizes or "
                            "keep the original ops")


class TokenShift(torch.nn.Module):
    def forward(self, x):
        return torch.cat((x[:, :1], x[:, :-1]), 1) * 0.5 + x


def test_a_cat_piece_analysed_at_batch_1_follows_another_batch(tmp_path):
    """A token shift analysed at batch 1: the piece `x[:, :-1]` is shorter than the cat
    along T, so the batch dim steps by the piece's own stride, not as a continuation of
    T (once its copy, 3 rows per batch, was read 4 rows per batch: NaN past the end)."""
    model = TokenShift()
    patched = _patched(model, (torch.randn(1, 4, 8),), tmp_path)
    for size in ((1, 4, 8), (3, 4, 8)):
        x = torch.randn(*size)
        torch.testing.assert_close(_on_cpu(patched(x.to(DEVICE))), model(x), msg=str(size))


class MeanOverLengthAndFeatures(torch.nn.Module):
    def forward(self, x):
        h = x * 2.0
        return h, h.mean((1, 2), keepdim=True)


def test_a_reduction_over_a_dim_analysed_one_long_keeps_it_reduced(tmp_path):
    """`mean((1, 2))` analysed at T = 1: its result stays (B, 1, 1) at T = 3 (once the
    launcher sized it (B, T, 1) from the iteration shape, the analysed 1 matching)."""
    model = MeanOverLengthAndFeatures()
    patched = _patched(model, (torch.randn(2, 1, 8),), tmp_path)
    for size in ((2, 1, 8), (4, 3, 8), (1, 6, 8)):
        x = torch.randn(*size)
        for got, want in zip(_on_cpu(patched(x.to(DEVICE))), model(x), strict=True):
            torch.testing.assert_close(got, want, msg=str(size))


def _flattened_batch(m, x):
    return torch.sigmoid(torch.nn.functional.rms_norm(x + 1.0, (8,)).flatten(0, 1))


def test_a_result_that_merged_away_a_batch_of_one_refuses_a_longer_batch(tmp_path):
    """`flatten(0, 1)` of a batch of 1 leaves a (T, C) result that reads as the iteration
    shape without its leading 1: at batch 2 the launcher returned (4, 8) where eager gives
    (8, 8). Now the batch of 1 is checked; the analysed size still runs."""
    patched = _patched(Lambda(_flattened_batch, 1), (torch.randn(1, 4, 8),), tmp_path)
    x = torch.randn(1, 4, 8)
    torch.testing.assert_close(_on_cpu(patched(x.to(DEVICE))), _flattened_batch(None, x))
    with pytest.raises(ValueError) as e:
        patched(torch.randn(2, 4, 8, device=DEVICE))
    msg = str(e.value)
    assert "\n" not in msg and "the inputs are 2 long in dim 0 of the iteration shape" in msg
    assert "`sigmoid` has no dim for it (it was 1 long at the analysed (1, 4, 8)" in msg
    assert msg.endswith("regenerate it at these sizes or keep the original ops")


class GroupNormFlattened(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8), requires_grad=False)
        self.b = torch.nn.Parameter(torch.randn(8), requires_grad=False)

    def forward(self, x):
        h = torch.nn.functional.group_norm(x.transpose(1, 2), 2, self.w, self.b)
        return torch.sigmoid(h.transpose(1, 2).flatten(0, 1))


def test_a_result_flattened_beside_group_norms_groups_names_the_merged_dims(tmp_path):
    """group_norm over a transposed (B, T, C), its result flattened to (B * T, C): the
    kernel writes it through an unflatten of B * T at the analysed (2, 4), beside the
    channel groups' split. At (3, 4) a ValueError names the input and its dims (once
    torch's own unflatten error, naming no kernel and no input)."""
    model = GroupNormFlattened()
    x = torch.randn(2, 4, 8)
    want = model(x)  # on the CPU: `_patched` moves the model's weights to DEVICE
    patched = _patched(model, (torch.randn(2, 4, 8),), tmp_path)
    torch.testing.assert_close(_on_cpu(patched(x.to(DEVICE))), want)
    with pytest.raises(ValueError) as e:
        patched(torch.randn(3, 4, 8, device=DEVICE))
    assert str(e.value) == ("cluster0: `transpose` holds 12 elements in dims 0, 2; this kernel "
                            "writes `sigmoid` with them merged as 8 (analysed (2, 4)); "
                            "regenerate it at these sizes or keep the original ops")
    with pytest.raises(ValueError) as e:  # as many rows, split otherwise: still refused
        patched(torch.randn(4, 2, 8, device=DEVICE))
    assert "\n" not in str(e.value)


class PlusBatchSum(torch.nn.Module):
    def forward(self, x):
        h = torch.tanh(x)
        return h + h.sum(0, keepdim=True) * 0.1


def test_an_input_copied_for_a_longer_batch_is_laid_out_as_the_kernel_reads_it(tmp_path):
    """A sum over the batch, analysed at batch 1: the kernel reads `x` as (T, C, B) in one
    run, which a (1, T, C) tensor is. At batch 3 `x` is copied into the order its index
    group reads (once the order of its analysed strides, where the batch of 1 had the
    outermost stride: the copy did not fit either, and the launcher refused)."""
    model = PlusBatchSum()
    patched = _patched(model, (torch.randn(1, 4, 8),), tmp_path)
    for size in ((1, 4, 8), (3, 4, 8), (2, 5, 8)):
        x = torch.randn(*size)
        torch.testing.assert_close(_on_cpu(patched(x.to(DEVICE))), model(x), msg=str(size))


def _softmax_over_length(m, x):
    return torch.softmax(x * 2.0, 1)


def test_a_result_whose_run_breaks_at_another_length_is_refused_naming_the_input(tmp_path):
    """A softmax over T analysed at T = 1 writes (B, C) as one run; at T = 4 the result's
    layout no longer fits, and the refusal names the input whose T is 4 long, `a` in the
    model's spelling (once the result, once `an input`)."""
    patched = _patched(Lambda(_softmax_over_length), (torch.randn(2, 1, 8),), tmp_path)
    with pytest.raises(ValueError) as e:
        patched(torch.randn(2, 4, 8, device=DEVICE))
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("cluster0: `a`'s dim 1, 1 long in the analysed (2, 1, 8), "
                                   "is 4 long here; this kernel writes the result `softmax` ")
    assert str(e.value).endswith("; regenerate it at these sizes or keep the original ops")
