"""Reshapes of permuted values sized at run time (codegen/run_sizes.py, ir/sizes.py).

Attention code reads the merge's sizes from its input (`B, T, C = x.shape; y =
o.transpose(1, 2).reshape(B, T, C)`), Swin's window partition splits two dims at once
(`x.view(B, H // w, w, W // w, w, C)`). Where those sizes only restate the merge or the
splits, the reshape fuses like its constant-sized twin (tests/test_codegen_permuted_reshape.py)
and the launcher follows other batch sizes and sequence lengths; where they do not, the
group is refused naming the size and the line that read it.
"""

import inspect

import pytest
import torch
from codegen_harness import DEVICE

from fusion_core.codegen.lower import dry_run
from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze


class HeadMerge(torch.nn.Module):
    """An attention block's heads merged back at the input's sizes, then gelu and the
    residual (no projection)."""

    def forward(self, o, x):
        B, T, C = x.shape
        return torch.nn.functional.gelu(o.transpose(1, 2).reshape(B, T, C)) + x


class HeadMergeCopied(torch.nn.Module):
    """The same merge written as GPT ports often do: eager's copy spelled `.contiguous()`."""

    def forward(self, o, x):
        B, T, C = x.shape
        return o.transpose(1, 2).contiguous().view(B, T, C) * 2.0 + x


class Partition(torch.nn.Module):
    """Swin's window partition sized from the input: two dims split in one view."""

    def forward(self, o, x):
        B, H, W, C = x.shape
        w = 2
        y = (x * 2.0).view(B, H // w, w, W // w, w, C).permute(0, 1, 3, 2, 4, 5)
        return torch.sigmoid(y.reshape(-1, w * w, C)) + o


class Reverse(torch.nn.Module):
    """Swin's window reverse sized from the shortcut, then the residual add."""

    def forward(self, windows, shortcut):
        B, H, W, C = shortcut.shape
        w = 2
        x = windows.view(B, H // w, W // w, w, w, C).permute(0, 1, 3, 2, 4, 5)
        return shortcut + torch.tanh(x.reshape(B, H, W, C)) * 0.5


class ScaledHeadMerge(torch.nn.Module):
    """The heads merged back, times a learned scalar: a (1,) parameter broadcast over the
    merged dim, which the kernel splits."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(1), requires_grad=False)

    def forward(self, o, x):
        B, T, C = x.shape
        return o.transpose(1, 2).reshape(B, T, C) * self.scale + x


class GainedHeadMerge(torch.nn.Module):
    """The heads merged back, times a per-position gain of shape (1, T, 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = torch.nn.Parameter(torch.randn(1, 4, 1), requires_grad=False)

    def forward(self, o, x):
        B, T, C = x.shape
        return torch.relu(o.transpose(1, 2).reshape(B, T, C)) * self.gain + x


class GatedHeadMerge(torch.nn.Module):
    """A gate per head and position (B, H, T, 1), broadcast over each head's features, then
    the heads merged back: the gate's size-1 dim merges with the heads' dim and is split
    again where the kernel splits the merged dim."""

    def forward(self, o, g, x):
        B, T, C = x.shape
        return torch.relu((o * torch.sigmoid(g)).transpose(1, 2).reshape(B, T, C)) + x


def _heads(b, h, t, d):
    return (torch.randn(b, h, t, d), torch.randn(b, t, h * d))


def _gated_heads(b, h, t, d):
    return (torch.randn(b, h, t, d), torch.randn(b, h, t, 1), torch.randn(b, t, h * d))


def _windows(b, h, w, c):
    return (torch.randn(b * (h // 2) * (w // 2), 4, c), torch.randn(b, h, w, c))


@pytest.mark.parametrize("model, make, analysed, others, chain", [
    (HeadMerge(), _heads, (2, 3, 4, 5), [(3, 3, 7, 5), (1, 3, 2, 5)],
     "reshape → gelu → add"),
    (HeadMergeCopied(), _heads, (2, 3, 4, 5), [(3, 3, 7, 5), (1, 3, 2, 5)],
     "contiguous → view → mul → add"),
    # the windows' merged dim is split as analysed (batch included): channels follow
    (Partition(), _windows, (2, 4, 6, 3), [(2, 4, 6, 5), (2, 4, 6, 1)],
     "mul → view → permute → reshape → sigmoid → add"),
    # the windows' dims split as analysed, the batch a dim of its own: it follows
    (Reverse(), _windows, (2, 4, 6, 3), [(3, 4, 6, 3), (1, 4, 6, 5)],
     "reshape → tanh → mul → add"),
    # a size-1 parameter dim in the merged dim splits into size-1 dims: no expansion to
    # the analysed (B, T) fixes the launcher's sizes
    (ScaledHeadMerge(), _heads, (2, 3, 4, 5), [(3, 3, 7, 5), (1, 3, 2, 5)],
     "reshape → mul → add"),
    (GainedHeadMerge(), _heads, (2, 3, 4, 5), [(3, 3, 4, 5), (1, 3, 4, 5)],
     "reshape → relu → mul → add"),
    (GatedHeadMerge(), _gated_heads, (2, 3, 4, 5), [(3, 3, 7, 5), (1, 3, 2, 5)],
     "sigmoid → mul → transpose → reshape → relu → add"),
    # a batch of 1 is a dim of its own in the views' refined steps (once fused nothing:
    # "sizes dim 1 as `x.shape[1] // 2`, which need not be `2`")
    (Partition(), _windows, (1, 4, 6, 3), [(1, 4, 6, 5)],
     "mul → view → permute → reshape → sigmoid → add"),
    (Reverse(), _windows, (1, 4, 6, 3), [(3, 4, 6, 3), (1, 4, 6, 5)],
     "reshape → tanh → mul → add"),
], ids=["head merge", "head merge contiguous", "swin partition", "swin reverse",
        "head merge scaled", "head merge gained", "head merge gated",
        "swin partition batch 1", "swin reverse batch 1"])
def test_a_permuted_reshape_sized_from_input_shapes_fuses_and_follows_other_sizes(
        tmp_path, model, make, analysed, others, chain):
    """One cluster holding the reshape; each kernel and the model with it patched in match
    eager at the analysed size and at other batch sizes and sequence lengths."""
    from fusion_core.codegen import generate, load_kernel, write_kernels
    from fusion_core.codegen.reference import capture_values, eager_cluster
    from fusion_core.validate.subgraph import patch

    a = analyze(model, *make(*analysed))
    assert not a.rejections, [r.reason for r in a.rejections]
    assert [c.chain for c in a.clusters] == [chain]
    (c,) = a.clusters
    kernel = generate(a, c)
    (path,) = write_kernels([kernel], tmp_path)
    launch = getattr(load_kernel(path), kernel.name)
    patched = patch(a.graph_module, {c.index: (c, launch)})
    model.to(DEVICE), patched.to(DEVICE), a.graph_module.to(DEVICE)  # parameters too
    for sizes in (analysed, *others):
        inputs = tuple(t.to(DEVICE) for t in make(*sizes))
        got, want = patched(*inputs), model(*inputs)
        assert got.shape == want.shape, sizes
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        values = capture_values(a, *inputs)
        args = [values[n] for n in c.inputs]
        (ref,) = eager_cluster(a, c)(*args)
        torch.testing.assert_close(launch(*args), ref, atol=1e-5, rtol=1e-5)


class SwappedMerge(torch.nn.Module):
    """(T, B, C) of a (B, T, H, D) value: a reshape at the analysed size only."""

    def forward(self, o, x):
        B, T, C = x.shape
        return torch.relu(o.transpose(1, 2).reshape(T, B, C)) + x.transpose(0, 1)


class UnlinkedMerge(torch.nn.Module):
    """Sizes read from `x`, whose dims nothing in the kernel ties to `o`'s."""

    def forward(self, o, x):
        B, T, C = x.shape
        return torch.relu(o.transpose(1, 2).reshape(B, T, C)) * x.sum()


@pytest.mark.parametrize("model, reason", [
    (SwappedMerge(), "`reshape` (line {0}) sizes dim 0 as `x.shape[1]`, which need not be "
                     "`4` (the size its reshape gives) at another input size; its sizes are "
                     "read at line {1} (`B, T, C = x.shape`)"),
    (UnlinkedMerge(), "`reshape` (line {0}) sizes dim 0 as `x.shape[0]`, which need not be "
                      "`o.shape[0]` (the size its reshape gives) at another input size; its "
                      "sizes are read at line {1} (`B, T, C = x.shape`)"),
], ids=["swapped batch and length", "sizes tied to nothing"])
def test_a_permuted_reshape_sized_otherwise_is_refused_naming_its_line(model, reason):
    a = analyze(model, *_heads(2, 3, 4, 5))
    group = [n.name for n in a.graph.nodes if n.kind.is_compute or n.kind is OpKind.VIEW]
    error = dry_run(a.graph, group)
    lines, first = inspect.getsourcelines(type(model).forward)
    last = first + len(lines) - 1
    assert error is not None and str(error) == reason.format(last, last - 1)
    assert not any("reshape" in c.ops for c in a.clusters)


def test_a_reshape_splitting_several_dims_is_refined_as_one_unflatten_each():
    """Swin's (B, H, W, C) -> (B, H // 2, 2, W // 2, 2, C): each split's run-time size is its
    `-1`; a run that both merges and splits (and its twin with two run-time sizes in one
    split) keeps the analysed sizes for run_sizes to judge."""
    from fusion_core.ir.sizes import Arith, Const, Dim, refine
    from fusion_core.ir.views import Merge, Reshape, Unflatten

    def half(k):
        return Arith("floordiv", Dim("x", k), Const(2))

    swin = (Dim("x", 0), half(1), Const(2), half(2), Const(2), Dim("x", 3))
    assert refine((Reshape((2, 2, 2, 3, 2, 3)),), swin, (2, 4, 6, 3)) == (
        Unflatten(2, (-1, 2)), Unflatten(1, (-1, 2)))
    windows = (Dim("x", 0), Const(4), Dim("x", 3))  # (B * H // 2 * W // 2, 4, C), permuted
    assert refine((Reshape((12, 4, 3)),), windows, (2, 2, 3, 2, 2, 3)) == (
        Merge(3, 5), Merge(0, 3))
    crossing = (Dim("x", 1), Dim("x", 0), Dim("x", 2))  # (T, B, C) of (B, T, C): no run
    assert refine((Reshape((4, 2, 15)),), crossing, (2, 4, 15)) == (Reshape((4, 2, 15)),)
    third = Arith("floordiv", Dim("x", 2), Const(3))
    two_free = (Dim("x", 0), half(1), Const(2), Arith("floordiv", Dim("x", 2), Const(4)), third)
    assert refine((Reshape((2, 2, 2, 3, 4)),), two_free, (2, 4, 12)) == (
        Unflatten(2, (3, 4)), Unflatten(1, (-1, 2)))


class HeadSequences(torch.nn.Module):
    """Heads split from the channels, each head's positions and features merged: the kernel
    splits that merged dim at the analysed length."""

    def forward(self, x):
        B, T, C = x.shape
        y = torch.relu(x * 2.0).view(B, T, 3, C // 3).transpose(1, 2)
        return y.reshape(B, 3, -1) + 1.0


def test_a_batch_of_one_stays_a_dim_and_another_length_is_refused_by_name(tmp_path):
    """Analysed at batch 1, the input's view keeps its batch dim (no squeeze that another
    batch would leave in place, a dim too many); the sequence length, which the kernel
    splits the merged dim at, is refused naming the input's dim, not in torch's
    `unflatten`."""
    from fusion_core.codegen import generate, load_kernel, write_kernels

    model = HeadSequences()
    a = analyze(model, torch.randn(1, 4, 6))
    (c,) = a.clusters
    (path,) = write_kernels([generate(a, c)], tmp_path)
    launch = load_kernel(path).cluster0
    for x in (torch.randn(1, 4, 6), torch.randn(3, 4, 6)):
        torch.testing.assert_close(launch(x.to(DEVICE)).cpu(), model(x))
    with pytest.raises(ValueError, match=r"^cluster0: `x` is 5 long in dim 1; this kernel "
                       r"writes `add` with it merged as analysed, 4 of \(4, 2\); regenerate"):
        launch(torch.randn(1, 5, 6).to(DEVICE))


class SummedHeads(torch.nn.Module):
    """Heads split from the channels and merged with the batch (`(B * H, T, D)`), then a
    sum over each head's features: the result is written with its batch-and-heads dim
    split at the analysed batch."""

    def forward(self, x):
        B, T, C = x.shape
        y = torch.relu(x).reshape(B, T, 3, -1).permute(0, 2, 1, 3)
        return torch.tanh(y.reshape(-1, T, y.shape[-1])).sum(-1)


def test_a_reduced_result_split_at_the_analysed_batch_is_refused_by_name(tmp_path):
    """Another length follows; another batch is refused naming the input's dim (the
    result's map holds the reduced dim put back before the split: once unchecked, torch's
    `unflatten` error)."""
    from fusion_core.codegen import generate, load_kernel, write_kernels

    model = SummedHeads()
    a = analyze(model, torch.randn(2, 5, 12))
    (c,) = a.clusters
    (path,) = write_kernels([generate(a, c)], tmp_path)
    launch = load_kernel(path).cluster0
    x = torch.randn(2, 7, 12)
    torch.testing.assert_close(launch(x.to(DEVICE)).cpu(), model(x))
    with pytest.raises(ValueError, match=r"^cluster0: `x` is 3 long in dim 0; this kernel "
                       r"writes `sum_1` with it merged as analysed, 2 of \(2, 3\); regenerate"):
        launch(torch.randn(3, 5, 12).to(DEVICE))


class PartitionSoftmax(torch.nn.Module):
    """Swin's window partition sized from the input, windows as (w, w) maps, a softmax over
    channels."""

    def forward(self, x):
        B, H, W, C = x.shape
        w = 2
        y = torch.relu(x).view(B, H // w, w, W // w, w, C).permute(0, 1, 3, 2, 4, 5)
        return torch.softmax(y.contiguous().view(-1, w, w, C), -1)


def test_a_map_one_window_high_is_refused_at_another_height_by_name(tmp_path):
    """A map 2 high at batch 1: its window rows, 1 when analysed, are dropped; a map 6 high
    is refused naming `x`'s dim (once a rank mismatch of the broadcast shapes, "this kernel
    iterates over 4-d shapes"); other channels follow."""
    from fusion_core.codegen import generate, load_kernel, write_kernels

    model = PartitionSoftmax()
    a = analyze(model, torch.randn(1, 2, 4, 3))
    (c,) = a.clusters
    (path,) = write_kernels([generate(a, c)], tmp_path)
    launch = load_kernel(path).cluster0
    x = torch.randn(1, 2, 4, 5)
    torch.testing.assert_close(launch(x.to(DEVICE)).cpu(), model(x))
    with pytest.raises(ValueError, match=r"^cluster0: `x` is 6 long in dim 1; this kernel "
                       r"reads it as analysed, 2 long, split with a dim of 1 that it drops; "):
        launch(torch.randn(1, 6, 4, 3).to(DEVICE))


class WindowSums(torch.nn.Module):
    """Swin's window partition, windows as (w, w) maps, summed over channels."""

    def forward(self, x):
        B, H, W, C = x.shape
        w = 2
        y = torch.tanh(x).view(B, H // w, w, W // w, w, C).permute(0, 1, 3, 2, 4, 5)
        return (y.contiguous().view(-1, w, w, C) + 1.0).sum(-1)


def test_a_split_with_a_part_of_1_keeps_it_where_the_kernel_regroups(tmp_path):
    """A map one window high: its rows split as (1, 2). The kernel splits the windows dim,
    and the input's view once read the rows whole, as the 2 of each window: a map 6 high
    came back (4, 6, 2) where eager gives (12, 2, 2). The split now keeps its 1, which the
    launcher checks."""
    from fusion_core.codegen import generate, load_kernel, write_kernels

    model = WindowSums()
    a = analyze(model, torch.randn(2, 2, 4, 3))
    (c,) = a.clusters
    (path,) = write_kernels([generate(a, c)], tmp_path)
    launch = load_kernel(path).cluster0
    x = torch.randn(2, 2, 4, 5)
    torch.testing.assert_close(launch(x.to(DEVICE)).cpu(), model(x))
    with pytest.raises(ValueError, match=r"^cluster0: `x` is 6 long in dim 1; this kernel "
                       r"reads it as \(1, 2\) there \(analysed 2\); regenerate it"):
        launch(torch.randn(2, 6, 4, 3).to(DEVICE))
