"""Views inside clusters and reductions over other dims than the last (codegen/indexing.py).

Each fusing case runs its kernel under the interpreter against the eager subgraph; each
refusal is checked for the reason it names. Shapes stay tiny (the interpreter runs one
program at a time).
"""

import inspect
import sys
from pathlib import Path

import pytest
import torch
from codegen_harness import DEVICE, Lambda, check_model, on_device

from fusion_core.analysis.traffic import estimate_traffic
from fusion_core.codegen.lower import dry_run
from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


def _views(analysis, cluster) -> list[str]:
    return [n for n in cluster.nodes if analysis.graph[n].kind is OpKind.VIEW]


def test_convnext_block_fuses_both_permutes_and_verifies(tmp_path):
    from convnext_block import ConvNeXtBlock

    torch.manual_seed(0)
    checked = check_model(ConvNeXtBlock().eval(), (torch.randn(2, 32, 4, 4),), tmp_path,
                          n_clusters=2)
    a = checked.analysis
    assert [c.chain for c in a.clusters] == ["permute → layer_norm", "mul → permute → add"]
    assert all(len(_views(a, c)) == 1 for c in a.clusters)
    norm, tail = checked.kernels
    # The norm reads the convolution's NCHW output through the permute: no copy first.
    assert "dwconv = dwconv.permute(0, 2, 3, 1)" in norm.source
    # The tail iterates over NCHW (its result's shape) and reads the Linear's NHWC output
    # through the inverse permute.
    assert "pwconv2 = pwconv2.permute(0, 3, 1, 2)" in tail.source


def test_convnext_block_verifies_with_looped_rows(tmp_path):
    from convnext_block import ConvNeXtBlock

    torch.manual_seed(1)
    check_model(ConvNeXtBlock().eval(), (torch.randn(1, 32, 3, 3),), tmp_path, looped=True)


@pytest.mark.parametrize("looped", [False, True])
def test_channel_softmax_reduces_over_dim_1_and_verifies(tmp_path, looped):
    from channel_softmax import ChannelSoftmax

    torch.manual_seed(0)
    checked = check_model(ChannelSoftmax().eval(), (torch.randn(2, 16, 4, 4),), tmp_path,
                          n_clusters=1, looped=looped)
    (kernel,) = checked.kernels
    assert checked.analysis.clusters[0].chain == "div → add → softmax → mul"
    # No view inside: the reduction's own order (an index map) puts the channels last, and
    # the launcher views every tensor, the NCHW result included, through that map.
    assert "Iteration shape at analysis time: (2, 4, 4, 16)." in kernel.source
    assert "x = x.permute(0, 2, 3, 1)" in kernel.source
    assert ("_written(torch.empty_strided(out_shapes[0], out_strides[0], device=\"meta\")"
            ".permute(0, 2, 3, 1)" in kernel.source)


@pytest.mark.parametrize("fn, shapes", [
    # a permute between two elementwise ops
    (lambda m, x, y: torch.relu(x * 2.0).permute(0, 2, 1) + y, [(2, 5, 6), (2, 6, 5)]),
    # reshape (split and merge) between ops
    (lambda m, x: torch.sigmoid((x * 2.0).reshape(2, 3, 4, 5)).flatten(1) - 1.0,
     [(2, 12, 5)]),
    # unsqueeze / squeeze / transpose chains, a broadcast operand after the view
    (lambda m, x, y: torch.exp(x).unsqueeze(1).transpose(0, 2).squeeze(1) * y,
     [(4, 6), (4,)]),
    # slice of a computed value: the kernel computes only the slice's elements
    (lambda m, x: torch.relu(x * 2.0)[:, 1:6:2] + 1.0, [(4, 8)]),
    # expand of a computed row
    (lambda m, x, y: torch.exp(x).expand(5, 8) * y, [(1, 8), (5, 8)]),
])
def test_views_between_elementwise_ops_fuse_and_verify(tmp_path, fn, shapes):
    torch.manual_seed(0)
    checked = check_model(Lambda(fn, len(shapes)), tuple(torch.randn(s) for s in shapes),
                          tmp_path, n_clusters=1)
    a = checked.analysis
    assert _views(a, a.clusters[0]), a.clusters[0].chain


def test_a_slice_inside_a_kernel_refuses_other_input_shapes(tmp_path):
    """The slice's sizes are the analysed ones: another shape gets one line, not a wrong read."""
    from fusion_core.codegen import generate, load_kernel, write_kernels

    a = analyze(Lambda(lambda m, x: torch.relu(x * 2.0)[:, 1:6:2] + 1.0, 1), torch.randn(4, 8))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    with pytest.raises(ValueError, match=r"`a` of shape \(2, 8\); this kernel slices it as "
                                         r"analysed, at \(4, 8\)"):
        load_kernel(path).cluster0(torch.randn(2, 8))


def test_a_result_returned_unflattened_refuses_other_sizes_of_the_merged_dims(tmp_path):
    """`h` is computed over `h.flatten(2)`'s dims and returned in its own shape, unflattened
    at the analysed (4, 4): (8, 2) came back as (4, 4), and (5, 5) raised torch's
    `unflatten` error."""
    from fusion_core.codegen import generate, load_kernel, write_kernels

    def fn(m, x):
        h = x * 2.0
        return h, h.flatten(2).softmax(-1)

    a = analyze(Lambda(fn, 1), torch.randn(2, 3, 4, 4))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = on_device(load_kernel(path).cluster0)
    x = torch.randn(3, 2, 4, 4)  # other leading sizes run
    for got, want in zip(launch(x), fn(None, x), strict=True):
        torch.testing.assert_close(got, want)
    for hw in ((8, 2), (5, 5)):
        with pytest.raises(ValueError, match=rf"^cluster0: `a` is \({hw[0]}, {hw[1]}\) in dims "
                           r"2-3; this kernel returns `mul` \(analysed \(2, 3, 4, 4\)\) with "
                           r"\(4, 4\) there; regenerate it at these sizes or keep the original "
                           "ops$"):
            launch(torch.randn(2, 3, *hw))
    # the map names dims from the start: another rank was torch's IndexError
    with pytest.raises(ValueError, match=r"^cluster0: `a` has 3 dims; this kernel views it by "
                       r"dim as analysed, with 4 \(\(2, 3, 4, 4\)\); regenerate it at these "
                       "sizes or keep the original ops$"):
        launch(torch.randn(3, 4, 4))


@pytest.mark.parametrize("fn, shape, reduced", [
    (lambda m, x: torch.exp(x).sum(1), (3, 5, 4), "sum"),  # one middle axis, no keepdim
    (lambda m, x: (x * 2.0).mean((2, 3), keepdim=True) + 1.0, (2, 3, 4, 5), "mean"),
    (lambda m, x: torch.softmax(x * 2.0, dim=0) + 1.0, (6, 5), "softmax"),
    (lambda m, x: (x - 1.0).amax(dim=(0, 1)) * 3.0, (3, 4, 5), "amax"),
    (lambda m, x: torch.cumsum(x * 2.0, dim=1), (3, 7, 2), "cumsum"),
    (lambda m, x: torch.exp(x).permute(0, 2, 1).sum(-1), (2, 5, 6), "sum"),
])
def test_reductions_over_other_axes_fuse_and_verify(tmp_path, fn, shape, reduced):
    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 1), (torch.randn(shape),), tmp_path, n_clusters=1)
    assert reduced in checked.analysis.clusters[0].ops
    check_model(Lambda(fn, 1), (torch.randn(shape),), tmp_path / "loop", looped=True)


def test_layer_norm_over_two_trailing_dims_verifies(tmp_path):
    torch.manual_seed(0)
    w, b = torch.rand(4, 5) + 0.5, torch.randn(4, 5)
    fn = lambda m, x: torch.nn.functional.layer_norm(x * 2.0, (4, 5), m.w, m.b)  # noqa: E731
    checked = check_model(Lambda(fn, 1, w=w, b=b), (torch.randn(3, 4, 5),), tmp_path,
                          n_clusters=1)
    # its columns cover the last two dims, kept apart (not merged into one)
    assert "Iteration shape at analysis time: (3, 4, 5)." in checked.kernels[0].source


def _group_error(fn, *shapes):
    a = analyze(Lambda(fn, len(shapes)), *(torch.randn(s) for s in shapes))
    group = [n.name for n in a.graph.nodes if n.kind.is_compute or n.kind is OpKind.VIEW]
    return a, dry_run(a.graph, group)


class SizedReshape(torch.nn.Module):
    """A reshape sized by `x.shape` unpacked into Python ints (the graph's `getitem` nodes)."""

    def forward(self, x):
        b, n, c = x.shape
        return torch.softmax(torch.exp(x).reshape(b, n * c), -1)


class Heads(torch.nn.Module):
    """Attention's head split: sizes read from the input, the head dim computed from them."""

    def forward(self, x):
        b, t, c = x.shape
        h = (x * 2.0).view(b, t, 4, c // 4)
        return torch.relu(h).transpose(1, 2) + 1.0


class Rows(torch.nn.Module):
    def forward(self, x):
        return torch.softmax((x - 1.0).reshape(x.shape[0], -1, 16), -1) * 2.0


def _patched_runs(model, analysed, others, tmp_path):
    """Every cluster's generated kernel against eager at `analysed` and at `others`, and
    the model with all of them patched in (``validate.subgraph.patch``)."""
    from fusion_core.codegen import generate, load_kernel, write_kernels
    from fusion_core.codegen.reference import eager_cluster
    from fusion_core.validate.subgraph import patch

    a = analyze(model, torch.randn(analysed))
    assert a.clusters and not a.rejections, [r.reason for r in a.rejections]
    launchers = {}
    for c in a.clusters:
        kernel = generate(a, c)
        (path,) = write_kernels([kernel], tmp_path / f"c{c.index}")
        launchers[c.index] = (c, getattr(load_kernel(path), kernel.name))
    patched = patch(a.graph_module, launchers)
    for shape in (analysed, *others):
        x = torch.randn(shape, device=DEVICE)  # the models hold no weights
        for c in a.clusters:  # each cluster's inputs here are the model's input
            assert c.inputs == ("x",), c.inputs
            got, (want,) = launchers[c.index][1](x), eager_cluster(a, c)(x)
            assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5), shape
        got, want = patched(x), model(x)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5), shape
    return a


@pytest.mark.parametrize("model, analysed, others, chain", [
    (SizedReshape(), (2, 4, 8), [(3, 5, 8), (1, 2, 3)], "exp → reshape → softmax"),
    (Heads(), (2, 3, 8), [(3, 5, 8), (2, 3, 12)], "mul → view → relu → transpose → add"),
    (Rows(), (2, 8, 32), [(3, 8, 32), (1, 4, 48)], "sub → reshape → softmax → mul"),
], ids=["merge", "head split", "reshape keeping the batch"])
def test_a_view_sized_from_input_shapes_fuses_and_follows_other_sizes(tmp_path, model,
                                                                        analysed, others, chain):
    """Sizes read from `x.shape` only restate the view's merge or split: the kernel and the
    patched model match eager at the analysed size and at other batch, sequence and channel
    sizes (the launcher recomputes the view from its input, never from the analysed ints)."""
    a = _patched_runs(model, analysed, others, tmp_path)
    assert [c.chain for c in a.clusters] == [chain]


class NumelSized(torch.nn.Module):
    def forward(self, x):
        return torch.relu((x * 2.0).view(x.numel() // 8, 8)) + 1.0


class FixedBatch(torch.nn.Module):
    def forward(self, x):
        b, t, c = x.shape
        return torch.relu((x * 2.0).view(2, -1, 4, c // 4)) + 1.0


class Swapped(torch.nn.Module):
    def forward(self, x):
        b, t, c = x.shape
        return torch.relu((x * 2.0).view(t, b, c)) + 1.0


@pytest.mark.parametrize("model, shape, reason", [
    # a size this analysis cannot read as a formula of dims: the old refusal
    (NumelSized(), (4, 6), "`view` (line {0}) reads a Python value computed at run time at "
                           "line {0} (`return torch.relu((x * 2.0).view(x.numel() // 8, 8)) "
                           "+ 1.0`) (a size), not a tensor"),
    # a hard-coded batch: `view(2, -1, ...)` is no split of the last dim at another batch
    (FixedBatch(), (2, 3, 8), "`view` (line {0}) sizes dim 0 as `2`, which need not be "
                              "`x.shape[0]` (the size its reshape gives) at another input "
                              "size; its sizes are read at line {1} (`b, t, c = x.shape`)"),
    # (t, b, c) of a (b, t, c) tensor: a fixed reshape at the analysed size only
    (Swapped(), (2, 3, 8), "`view` (line {0}) sizes dim 0 as `x.shape[1]`, which need not be "
                           "`3` (the size its reshape gives) at another input size; its "
                           "sizes are read at line {1} (`b, t, c = x.shape`)"),
])
def test_a_view_sized_otherwise_is_refused_naming_its_line(model, shape, reason):
    a = analyze(model, torch.randn(shape))
    group = [n.name for n in a.graph.nodes if n.kind.is_compute or n.kind is OpKind.VIEW]
    error = dry_run(a.graph, group)
    last = inspect.getsourcelines(type(model).forward)[1] + len(
        inspect.getsourcelines(type(model).forward)[0]) - 1
    assert error is not None and str(error) == reason.format(last, last - 1)
    assert not any("view" in c.ops for c in a.clusters)
    assert any(reason.format(last, last - 1) in r.reason for r in a.rejections)


def test_a_reshape_no_strides_express_is_refused_by_name():
    """`t().reshape(2, 3)` of a computed (2, 3) value cuts its 3 at 2: its operand would need
    div/mod indexing. (`t().reshape(-1)` of a (4, 8) one fuses: the kernel iterates over
    (8, 4), tests/test_codegen_permuted_reshape.py.)"""
    a, error = _group_error(lambda m, x: (torch.relu(x).t().reshape(2, 3)) * 2.0, (2, 3))
    assert error is not None
    assert "cuts dims a permute moved apart at sizes that do not divide them" in str(error)
    assert set(error.nodes) <= {"t", "reshape"} and error.nodes
    # Detection drops the views and fuses nothing across them; no group is left unexplained.
    assert not any(set(c.nodes) & {"t", "reshape"} for c in a.clusters)


class _Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(2, 3))


class TransposedWeight(torch.nn.Module):
    """A block's (2, 3) weight read through `.t().reshape(2, 3)`: no strides walk it, and no
    split of the result's 3 ends where the transposed 3 and 2 do."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Scale()])

    def forward(self, x):
        return torch.exp(self.blocks[0].w).t().reshape(2, 3) * x


def test_a_value_no_strides_express_is_named_as_written_with_its_views():
    # was "reading or writing `blocks_0_w` needs …": the traced node's name
    a = analyze(TransposedWeight(), torch.randn(3))
    group = [n.name for n in a.graph.nodes if n.kind.is_compute or n.kind is OpKind.VIEW]
    error = dry_run(a.graph, group)
    line = inspect.getsourcelines(TransposedWeight.forward)[1] + 1
    assert error is not None and str(error).startswith(
        f"reading or writing `self.blocks[0].w` through `t` (line {line}), `reshape` (line "
        f"{line}) needs a reshape of shape (3, 2), strides (1, 3) to (2, 3): the reshape "
        "cuts dims a permute moved apart"), str(error)


def test_reduced_dims_no_single_stride_walks_fuse_with_views(tmp_path):
    """amax over dims 1 and 2 of a permuted (3, 4, 5), dims 0 and 2 of its input: no single
    stride walks both, and the index map keeps them as two column dims, so the group fuses
    and matches eager (it was refused while index maps merged the reduced dims)."""
    fn = lambda m, x: (x - 1.0).permute(1, 0, 2).amax(dim=(1, 2)) * 3.0  # noqa: E731
    _, error = _group_error(fn, (3, 4, 5))
    assert error is None
    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 1), (torch.randn(3, 4, 5),), tmp_path, n_clusters=1)
    assert "amax" in checked.analysis.clusters[0].ops
    assert "Iteration shape at analysis time: (4, 3, 5)." in checked.kernels[0].source


class _GroupNormOfAPermute(torch.nn.Module):
    """group_norm of an NHWC activation permuted to NCHW, then a pointwise op."""

    def __init__(self):
        super().__init__()
        self.w, self.b = torch.nn.Parameter(torch.rand(8) + 0.5), torch.nn.Parameter(
            torch.randn(8))

    def forward(self, x):
        h = (x * 2.0).permute(0, 3, 1, 2)
        return torch.nn.functional.group_norm(h, 2, self.w, self.b) + 1.0


@pytest.mark.parametrize("looped", [False, True], ids=["one block", "column loop"])
def test_a_group_norm_next_to_a_view_fuses_and_verifies(tmp_path, looped):
    """The channel split is a view step (``Split``) like the permute before it: one index
    map from the NHWC input to the (N, G, C/G, H, W) iteration shape."""
    torch.manual_seed(0)
    checked = check_model(_GroupNormOfAPermute().eval(), (torch.randn(2, 4, 4, 8),), tmp_path,
                          n_clusters=1, looped=looped)
    (cluster,) = checked.analysis.clusters
    assert cluster.chain == "mul → permute → group_norm → add", cluster.chain
    (kernel,) = checked.kernels
    assert kernel.skeleton == "reduction" and kernel.looped == looped
    assert "Iteration shape at analysis time: (2, 2, 4, 4, 4)." in kernel.source
    assert "x = x.permute(0, 3, 1, 2).unflatten(1, (2, -1))" in kernel.source


def test_a_value_needed_through_two_index_maps_is_refused():
    _, error = _group_error(lambda m, x: (lambda e: e + e.t())(torch.exp(x)), (6, 6))
    assert error is not None and "two different index maps" in str(error)


def test_an_input_read_through_two_index_maps_is_loaded_twice(tmp_path):
    """`exp(x).t() + x * 2`: the kernel iterates over the result; x is read transposed by
    exp and as it is by mul, so the launcher passes it twice (the second through a view)."""
    torch.manual_seed(0)
    fn = lambda m, x: torch.exp(x).t() + x * 2.0  # noqa: E731
    checked = check_model(Lambda(fn, 1), (torch.randn(6, 6),), tmp_path, n_clusters=1)
    (kernel,) = checked.kernels
    assert kernel.inputs == ("a",)
    assert "def cluster0(a):" in kernel.source
    assert "a_map1 = a.permute(1, 0)" in kernel.source
    assert kernel.source.count("tl.load(") == 2


def test_an_input_read_per_element_and_per_row_is_loaded_both_ways(tmp_path):
    """`(x * y).sum(-1) + y`: mul reads y along the columns, add along the rows (the sum's
    index map puts its reduced dim back as size 1); y is loaded once each way."""
    torch.manual_seed(0)
    fn = lambda m, x, y: (x * y).sum(-1) + y  # noqa: E731
    checked = check_model(Lambda(fn, 2), (torch.randn(6, 6), torch.randn(6)), tmp_path,
                          n_clusters=1)
    assert checked.analysis.clusters[0].ops == ("mul", "sum", "add")
    assert "b_map1 = b.unsqueeze(-1)" in checked.kernels[0].source


def test_an_escaping_view_of_a_computed_value_is_stored(tmp_path):
    """A view that escapes is written like any result (its own shape, contiguous)."""
    torch.manual_seed(0)
    fn = lambda m, x: (lambda r: (r.t() * 3.0, torch.exp(r.t())))(torch.relu(x + 1.0))  # noqa: E731
    checked = check_model(Lambda(fn, 1), (torch.randn(4, 6),), tmp_path, n_clusters=1)
    assert len(checked.analysis.clusters[0].outputs) == 2


def test_views_move_no_bytes_in_the_traffic_model():
    a = analyze(Lambda(lambda m, x: torch.exp(x).transpose(0, 1) * 2.0, 1), torch.randn(8, 16))
    g = a.graph
    with_view = {n.name for n in g.nodes if n.kind.is_compute or n.kind is OpKind.VIEW}
    without = {n for n in with_view if g[n].kind is not OpKind.VIEW}
    assert estimate_traffic(g, with_view).unfused_bytes == 2 * 2 * 8 * 16 * 4
    assert estimate_traffic(g, without).unfused_bytes == 2 * 2 * 8 * 16 * 4


def test_a_strided_view_eager_copies_before_a_norm_counts_as_a_pass():
    """Eager's layer_norm makes a permuted input contiguous first: read + write."""
    from convnext_block import ConvNeXtBlock

    a = analyze(ConvNeXtBlock().eval(), torch.randn(2, 32, 4, 4))
    norm = a.clusters[0]
    nbytes = 2 * 32 * 4 * 4 * 4
    # the copy (read + write), then layer_norm reads it and its weight and bias, writes
    assert norm.traffic.unfused_bytes == 2 * nbytes + 2 * nbytes + 2 * 32 * 4
    assert norm.traffic.fused_bytes == 2 * nbytes + 2 * 32 * 4


class ChannelsLastNorm(torch.nn.Module):
    """A depthwise conv, channels last, LayerNorm; `copy`: the user makes the permuted value
    contiguous first, as many ConvNeXt ports do."""

    def __init__(self, copy: bool) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.ln = torch.nn.LayerNorm(8)
        self.copy = copy

    def forward(self, x):
        x = self.dw(x).permute(0, 2, 3, 1)
        return self.ln(x.contiguous() if self.copy else x)


def test_a_users_contiguous_copy_before_a_norm_fuses_as_the_pass_it_is(tmp_path):
    """`.contiguous()` of a strided view is eager's copy written out: the norm's kernel saves
    it as it saves eager's own (it used to split the norm off, with no reason given)."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 4, 4)
    checked = check_model(ChannelsLastNorm(copy=True).eval(), (x,), tmp_path, n_clusters=1)
    (norm,) = checked.analysis.clusters
    assert norm.chain == "contiguous → layer_norm"
    (plain,) = analyze(ChannelsLastNorm(copy=False).eval(), x).clusters
    assert norm.traffic == plain.traffic


def test_contiguous_of_a_contiguous_value_is_no_pass():
    """Eager returns the tensor itself: no copy, so nothing for a kernel to save."""
    a = analyze(Lambda(lambda m, x: torch.softmax(x.contiguous(), -1), 1), torch.randn(4, 8))
    assert a.clusters == ()


@pytest.mark.cpu  # with CUDA the model check runs at the analysed batch (nothing is shrunk)
def test_validation_runs_the_view_kernels_in_the_model_at_a_smaller_batch():
    """Launchers apply their index maps to whatever shapes they get: the model check runs
    every kernel patched into the model at batch 1."""
    from convnext_block import ConvNeXtBlock

    from fusion_core.validate.run import validate

    torch.manual_seed(0)
    report = validate(analyze(ConvNeXtBlock().eval(), torch.randn(2, 32, 4, 4)), timing=False)
    assert [r.usable for r in report.results] == [True, True]
    assert report.model.passed and report.model.inputs == ((1, 32, 4, 4),), report.model.detail


class MergedBack(torch.nn.Module):
    """A merge undone by a view sized from `x.shape`, then added to `x`: the add broadcasts
    the view's result against `x`, which must not count as proof that the view's fixed
    split `(2, 3)` is `(b, t)` at any size (it is only at the analysed one)."""

    def forward(self, x):
        b, t, c = x.shape
        y = torch.softmax((x * 2.0).reshape(b * t, c), -1)
        return y.view(b, t, c) + x


def test_a_split_proven_only_by_a_later_broadcast_is_refused():
    a = analyze(MergedBack(), torch.randn(2, 3, 8))
    group = [n.name for n in a.graph.nodes if n.kind.is_compute or n.kind is OpKind.VIEW]
    error = dry_run(a.graph, group)
    assert error is not None and "sizes dim 0 as `x.shape[0]`" in str(error), error
    x = torch.randn(3, 5, 8)  # the model runs at another batch; no kernel may claim it
    assert MergedBack()(x).shape == (3, 5, 8)


class SplitSoftmaxMerged(torch.nn.Module):
    """A softmax over the `c // 4` part of a run-time split, merged back by a reshape sized
    from `x.shape`: the kernel iterates over the split, so storing the merged result undoes
    the merge with the analysed sizes `(2, 4)`; at c = 12 the launcher raised."""

    def forward(self, x):
        b, t, c = x.shape
        y = (x * 2.0).view(b, t, c // 4, 4)
        return torch.softmax(y, 2).reshape(b, t, c) - x


def test_a_merge_sized_at_run_time_undone_with_the_analysed_sizes_is_refused():
    a = analyze(SplitSoftmaxMerged(), torch.randn(2, 3, 8))
    group = [n.name for n in a.graph.nodes if n.kind.is_compute or n.kind is OpKind.VIEW]
    error = dry_run(a.graph, group)
    line = inspect.getsourcelines(SplitSoftmaxMerged.forward)[1] + 3
    assert error is not None and str(error).startswith(f"`reshape` (line {line}) merges"), error
    assert SplitSoftmaxMerged()(torch.randn(3, 5, 12)).shape == (3, 5, 12)
