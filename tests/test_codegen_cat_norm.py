"""A `torch.cat` read by a norm in one kernel: a UNet decoder's `cat((up, skip), 1)` →
GroupNorm (→ SiLU), whose groups split the cat dim (``ir/concat.pieces``: each operand is
whole groups, its piece a range of the group dim), and cat → LayerNorm over the cat dim.
Inductor fuses both on CPU (`cpp_fused_cat_native_group_norm_silu_0`); each fusing case runs
its kernel under the interpreter against eager. A group that holds channels of two operands
(Stable Diffusion's decoder: 1280 + 640 channels in 32 groups of 60) reads each channel
through a per-element select between the operands (its piece *straddles* the groups).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from codegen_harness import (
    Lambda,
    check_model,
    compare,
    compile_for_gpu,
    on_device,
    poison_empty,
    to_device,
)

from fusion_core.analysis.barriers import find_barriers
from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels
from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster
from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze


class DecoderNorm(nn.Module):
    """A UNet decoder block's start: the upsampled features and the skip, concatenated along
    the channels, then GroupNorm and SiLU."""

    def __init__(self, channels: int, groups: int, affine: bool = True) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, affine=affine)
        if affine:  # not the identity the default init gives: a wrong channel would show
            with torch.no_grad():
                self.norm.weight.copy_(torch.randn(channels))
                self.norm.bias.copy_(torch.randn(channels))

    def forward(self, up, skip):
        h = torch.cat((up, skip), dim=1)
        h = self.norm(h)
        return F.silu(h)


def _ops(checked) -> tuple[str, ...]:
    (c,) = checked.analysis.clusters
    g = checked.analysis.graph
    return tuple(g[n].op for n in c.nodes if g[n].kind is not OpKind.VIEW)


@pytest.mark.parametrize("up, skip, groups", [
    ((2, 8, 4, 4), (2, 8, 4, 4), 4),  # two groups each
    ((2, 4, 3, 5), (2, 12, 3, 5), 4),  # one group, then three
    ((2, 6, 3, 3), (2, 2, 3, 3), 8),  # a group per channel
    ((2, 8, 6), (2, 4, 6), 3)],  # (N, C, L): one spatial dim
    ids=["equal", "unequal", "per-channel", "1d"])
def test_cat_group_norm_silu_is_one_kernel(tmp_path, up, skip, groups):
    torch.manual_seed(0)
    model = DecoderNorm(up[1] + skip[1], groups)
    checked = check_model(model, (torch.randn(up), torch.randn(skip)), tmp_path, n_clusters=1)
    assert _ops(checked) == ("cat", "group_norm", "silu")
    assert not find_barriers(checked.analysis.graph, checked.analysis.clusters)
    # the skip is read from the first group past the up's: its rows shifted by that many
    first = up[1] // ((up[1] + skip[1]) // groups)
    assert f">= {first}), other=0" in checked.kernels[0].source


def test_cat_of_computed_values_into_group_norm_without_affine(tmp_path):
    # Each operand computed in its branch over its own groups; no weight, no bias.
    def fn(m, a, b):
        h = torch.cat((torch.relu(a * 2.0), b.sigmoid()), dim=1)
        return F.group_norm(h, 3) * 0.5

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 2), (torch.randn(2, 4, 5), torch.randn(2, 8, 5)),
                          tmp_path, n_clusters=1)
    assert _ops(checked) == ("mul", "relu", "sigmoid", "cat", "group_norm", "mul")


def test_a_cat_also_written_beside_its_group_norm(tmp_path):
    # The cat's result is a second output: stored through group_norm's groups like the norm's.
    def fn(m, a, b):
        h = torch.cat((a * 2.0, b), dim=1)
        return h, F.silu(F.group_norm(h, 4))

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 2), (torch.randn(2, 8, 3, 3), torch.randn(2, 8, 3, 3)),
                          tmp_path, n_clusters=1)
    (c,) = checked.analysis.clusters
    assert c.ops == ("mul", "cat", "group_norm", "silu") and len(c.outputs) == 2


@pytest.mark.parametrize("looped", [False, True])
def test_cat_group_norm_with_looped_rows(tmp_path, looped):
    torch.manual_seed(0)
    model = DecoderNorm(24, 4)
    inputs = (torch.randn(1, 12, 8, 9), torch.randn(1, 12, 8, 9))  # rows of 6 × 72 columns
    checked = check_model(model, inputs, tmp_path, n_clusters=1, looped=looped)
    assert _ops(checked) == ("cat", "group_norm", "silu")


def test_cat_layer_norm_over_the_cat_dim(tmp_path):
    def fn(m, a, b):
        return F.layer_norm(torch.cat((a, b), dim=-1), (12,), m.w, m.b)

    torch.manual_seed(0)
    lam = Lambda(fn, 2, w=torch.randn(12), b=torch.randn(12))
    checked = check_model(lam, (torch.randn(2, 3, 5), torch.randn(2, 3, 7)), tmp_path,
                          n_clusters=1)
    assert _ops(checked) == ("cat", "layer_norm")


def test_the_launcher_runs_other_batches_and_sizes_and_refuses_other_channels(tmp_path):
    torch.manual_seed(0)
    model = DecoderNorm(16, 4).eval()
    a = analyze(model, torch.randn(2, 8, 4, 4), torch.randn(2, 8, 4, 4))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = on_device(load_kernel(path).cluster0)
    up, skip = torch.randn(3, 8, 5, 7), torch.randn(3, 8, 5, 7)
    w, b = model.norm.weight.detach().reshape(16, 1, 1), model.norm.bias.detach().reshape(
        16, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(launch(up, skip, w, b), model(up, skip))
    # 12 up channels of 4 per group would be 3 groups: this kernel reads 2 there (said in
    # channels, as passed: it read "3 long ...; this kernel reads 2")
    with pytest.raises(ValueError, match="cluster0: a concatenated input, `up`, is 12 channels "
                       r"long along the cat dim \(dim 1\); this kernel reads 8 \(group_norm's "
                       r"groups of 4\); regenerate it at these sizes or keep the original ops$"):
        launch(torch.randn(3, 12, 5, 7), torch.randn(3, 4, 5, 7), w, b)


@pytest.mark.parametrize("up, skip, which", [(6, 6, "up"), (8, 6, "skip"), (10, 6, "up")])
def test_the_launcher_refuses_channels_its_groups_do_not_divide_by_input_and_dim(
        tmp_path, up, skip, which):
    # Channels that groups of 4 do not divide: torch's `unflatten` raised ("Provided sizes
    # [-1, 4] don't multiply up to the size of dim 1 (6)") before any check ran.
    torch.manual_seed(0)
    model = DecoderNorm(16, 4).eval()
    a = analyze(model, torch.randn(2, 8, 4, 4), torch.randn(2, 8, 4, 4))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = on_device(load_kernel(path).cluster0)
    w, b = (p.detach().reshape(16, 1, 1) for p in (model.norm.weight, model.norm.bias))
    n = up if which == "up" else skip
    with pytest.raises(ValueError, match=f"^cluster0: a concatenated input, `{which}`, is {n} "
                       r"channels long along the cat dim \(dim 1\); this kernel reads 8 "
                       r"\(group_norm's groups of 4\); regenerate it at these sizes or keep "
                       "the original ops$"):
        launch(torch.randn(1, up, 3, 3), torch.randn(1, skip, 3, 3), w, b)


# 10 + 8 channels in 3 groups of 6: the second group holds up's last 4 and skip's first 2
# (Stable Diffusion's 1280 + 640 in 32 groups of 60, scaled down).
STRADDLING = [((2, 10, 4, 4), (2, 8, 4, 4), 3),
              ((2, 16, 4, 4), (2, 8, 4, 4), 4),  # 2:1 as in the decoder, groups of 6
              ((2, 6, 3, 3), (2, 10, 3, 3), 4),  # groups of 4: two straddle
              ((2, 5, 6), (2, 7, 6), 3),  # (N, C, L)
              ((2, 5), (2, 7), 3),  # (N, C): the channels alone
              ((2, 5, 3, 3), (2, 7, 3, 3), 1)]  # one group: all of both
STRADDLING_IDS = ["10+8", "16+8", "6+10", "1d", "2d", "one-group"]


@pytest.mark.parametrize("up, skip, groups", STRADDLING, ids=STRADDLING_IDS)
def test_a_group_holding_channels_of_two_operands_is_one_kernel(tmp_path, up, skip, groups):
    # Each element picks its operand by its channel (group * channels per group + its
    # channel in the group) against where `up` ends; `skip` is read that many channels back.
    torch.manual_seed(0)
    checked = check_model(DecoderNorm(up[1] + skip[1], groups),
                          (torch.randn(up), torch.randn(skip)), tmp_path, n_clusters=1)
    assert _ops(checked) == ("cat", "group_norm", "silu")
    assert not checked.analysis.rejections
    assert not find_barriers(checked.analysis.graph, checked.analysis.clusters)
    if len(up) == 4 and groups > 1:  # the skip's channels start `up[1]` channels in
        assert f"(cols - {up[1]} * span3)" in checked.kernels[0].source


def test_a_straddling_cat_into_group_norm_without_silu(tmp_path):
    def fn(m, a, b):
        return F.group_norm(torch.cat((a, b), dim=1), 3, m.w, m.b)

    torch.manual_seed(0)
    lam = Lambda(fn, 2, w=torch.randn(18), b=torch.randn(18))
    checked = check_model(lam, (torch.randn(2, 10, 4, 4), torch.randn(2, 8, 4, 4)), tmp_path,
                          n_clusters=1)
    assert _ops(checked) == ("cat", "group_norm")


def test_three_operands_straddling_groups(tmp_path):
    # 4 + 5 + 3 channels in 2 groups of 6: each group holds two operands' channels.
    def fn(m, a, b, c):
        return F.silu(F.group_norm(torch.cat((a, b * 2.0, c), dim=1), 2))

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 3), (torch.randn(2, 4, 3, 3), torch.randn(2, 5, 3, 3),
                                          torch.randn(2, 3, 3, 3)), tmp_path, n_clusters=1)
    assert _ops(checked) == ("mul", "cat", "group_norm", "silu")


def test_a_whole_group_cat_keeps_its_row_masks(tmp_path):
    # Operands of whole groups keep the cheaper path: a row's group picks its operand (a
    # [rows, 1] mask), no per-element channel select.
    torch.manual_seed(0)
    checked = check_model(DecoderNorm(24, 4), (torch.randn(2, 12, 4, 4),
                                              torch.randn(2, 12, 4, 4)), tmp_path, n_clusters=1)
    source = checked.kernels[0].source
    row_in_sample = "_index_mod(rows, rspan1, rspan1_m, rspan1_l, RSPAN1_FAST)"  # rows % rspan1
    assert f"({row_in_sample} >= 2), other=0" in source and "span3 >= " not in source


@pytest.mark.parametrize("layout", ["half-channels-last", "looped", "channels-last"])
def test_straddling_groups_in_other_layouts_and_kernels(tmp_path, layout):
    torch.manual_seed(0)
    model = DecoderNorm(18, 3)
    up, skip = torch.randn(2, 10, 8, 9), torch.randn(2, 8, 8, 9)
    kwargs = {}
    if layout == "half-channels-last":
        model, up, skip = model.half(), up.half().to(memory_format=torch.channels_last), (
            skip.half())
    elif layout == "channels-last":
        up, skip = (t.to(memory_format=torch.channels_last) for t in (up, skip))
    else:
        kwargs["looped"] = True
    checked = check_model(model, (up, skip), tmp_path, n_clusters=1, **kwargs)
    assert _ops(checked) == ("cat", "group_norm", "silu")


def test_a_straddling_launcher_runs_other_batches_and_refuses_other_channels(tmp_path):
    torch.manual_seed(0)
    model = DecoderNorm(18, 3).eval()
    a = analyze(model, torch.randn(2, 10, 4, 4), torch.randn(2, 8, 4, 4))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = on_device(load_kernel(path).cluster0)
    w, b = (p.detach().reshape(18, 1, 1) for p in (model.norm.weight, model.norm.bias))
    up, skip = torch.randn(3, 10, 5, 7), torch.randn(3, 8, 5, 7)
    with torch.no_grad():
        torch.testing.assert_close(launch(up, skip, w, b), model(up, skip))
    # 12 + 6 channels are 18 too, but the kernel's select reads `up` up to channel 10
    with pytest.raises(ValueError, match=r"^cluster0: a concatenated input, `up`, is 12 long "
                       r"along the cat dim; this kernel reads 10; regenerate it at these sizes "
                       "or keep the original ops$"):
        launch(torch.randn(3, 12, 5, 7), torch.randn(3, 6, 5, 7), w, b)


def test_an_upsample_into_a_straddling_cat(tmp_path):
    # A decoder's nearest upsample of 5 channels beside a skip of 7, in groups of 4: the
    # upsampled operand is read through its repeat and at its channel.
    def fn(m, x, skip):
        h = torch.cat([F.interpolate(x, scale_factor=2), skip], 1)
        return F.silu(F.group_norm(h, 3))

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 2), (torch.randn(2, 5, 4, 4), torch.randn(2, 7, 8, 8)),
                          tmp_path, n_clusters=1)
    assert checked.analysis.clusters[0].ops == ("interpolate", "cat", "group_norm", "silu")


class TwoNorms(nn.Module):
    """A group_norm of `x`, then one of a cat whose groups straddle its operands."""

    def forward(self, x, up, skip):
        y = F.group_norm(x, 2)
        h = torch.cat((up * 2.0, skip), dim=1).relu()
        z = F.group_norm(h, 2)
        return y + z


def test_two_group_norms_one_reading_a_straddling_cat(tmp_path):
    # 4 + 2 channels in 2 groups of 3 beside a group_norm of `x`: one kernel, two reductions.
    torch.manual_seed(0)
    checked = check_model(TwoNorms(), (torch.randn(2, 6, 3, 3), torch.randn(2, 4, 3, 3),
                                       torch.randn(2, 2, 3, 3)), tmp_path, n_clusters=1)
    assert _ops(checked) == ("group_norm", "mul", "cat", "relu", "group_norm", "add")


@pytest.mark.parametrize("s_shape, t_shape", [
    ((1, 4, 1, 1), (1, 8, 1, 1)),  # per channel, as a bias: read at the piece's own channel
    ((2, 1, 1, 1), (1,)),  # per sample, and one element: every group of the piece reads it
    ((1, 4, 1, 1), (2, 1, 3, 1))],
    ids=["per-channel", "per-sample", "mixed"])
@pytest.mark.parametrize("a_channels", [4, 5], ids=["whole-groups", "straddling"])
def test_operands_broadcast_inside_the_branches_of_a_cat_into_group_norm(
        tmp_path, s_shape, t_shape, a_channels):
    # 4 + 8 channels in groups of 4 are whole groups; 5 + 7 straddle the second group.
    def fn(m, a, b):
        return F.group_norm(torch.cat((a * m.s, b + m.t), dim=1), 3, m.w, m.b).relu()

    def sized(shape, c):  # per channel: as many as the operand has
        return tuple(c if n > 1 and k == 1 else n for k, n in enumerate(shape))

    torch.manual_seed(0)
    b_channels = 12 - a_channels
    lam = Lambda(fn, 2, s=torch.randn(sized(s_shape, a_channels)),
                 t=torch.randn(sized(t_shape, b_channels)), w=torch.randn(12),
                 b=torch.randn(12))
    checked = check_model(lam, (torch.randn(2, a_channels, 3, 2),
                                torch.randn(2, b_channels, 3, 2)), tmp_path, n_clusters=1)
    assert "cat" in _ops(checked) and "group_norm" in _ops(checked)


class BatchNormCatGroupNorm(nn.Module):
    """A BatchNorm (eval) in one branch of the cat: computed over its own groups."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(4).eval()
        self.norm = nn.GroupNorm(3, 12)
        with torch.no_grad():
            self.bn.running_mean.copy_(torch.randn(4))
            self.bn.running_var.copy_(torch.rand(4) + 0.5)

    def forward(self, x, skip):
        return F.silu(self.norm(torch.cat((self.bn(x), skip), dim=1)))


def test_a_batch_norm_in_a_branch_of_the_cat(tmp_path):
    torch.manual_seed(0)
    checked = check_model(BatchNormCatGroupNorm(), (torch.randn(2, 4, 3, 3),
                                                   torch.randn(2, 8, 3, 3)),
                          tmp_path, n_clusters=1)
    assert _ops(checked) == ("batch_norm", "cat", "group_norm", "silu")


def test_cat_group_norm_under_export_capture(tmp_path):
    torch.manual_seed(0)
    checked = check_model(DecoderNorm(16, 4), (torch.randn(2, 8, 3, 3), torch.randn(2, 8, 3, 3)),
                          tmp_path, n_clusters=1, capture="export")
    assert "cat" in _ops(checked) and "group_norm" in _ops(checked)


def test_cat_group_norm_in_half_precision_and_channels_last(tmp_path):
    torch.manual_seed(0)
    model = DecoderNorm(16, 4).half()
    up = torch.randn(2, 8, 3, 5).half().to(memory_format=torch.channels_last)
    skip = torch.randn(2, 8, 3, 5).half()
    checked = check_model(model, (up, skip), tmp_path, n_clusters=1)
    assert _ops(checked) == ("cat", "group_norm", "silu")


@pytest.mark.parametrize("up_channels", [4, 5], ids=["whole-groups", "straddling"])
def test_few_wide_rows_of_a_cat_group_norm_split_over_programs(tmp_path, up_channels):
    # A UNet at batch 1: few groups of many columns, each row cut into chunks across programs
    # (``codegen/split_rows.py``); each chunk masks its loads to the operand whose groups it
    # reads (straddling: whose channels each element reads).
    torch.manual_seed(0)
    model = DecoderNorm(8, 4).eval()
    up = torch.randn(1, up_channels, 32, 64)  # 4 rows of 4096
    skip = torch.randn(1, 8 - up_channels, 32, 64)
    a = analyze(model, up, skip)
    (cluster,) = a.clusters
    assert cluster.ops == ("cat", "group_norm", "silu")
    # rows of 4096 loop at blocks of 256, chunks of 1024 columns count as wide
    kernel = generate(a, cluster, Tuning(max_block=256, loop_block=256, split_min_cols=1024))
    assert f"def {kernel.name}_partials(" in kernel.source
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    poison_empty(module)
    module._timing_on = lambda device: False
    values = capture_values(a, up, skip)
    args = tuple(values[n] for n in cluster.inputs)
    (want,) = eager_cluster(a, cluster)(*args)
    got = getattr(module, kernel.name)(*map(to_device, args)).cpu()
    assert list(module.CHOSEN.values())[0][3] > 1  # several programs per row
    compare(got, want, "cat → group_norm → silu")


@pytest.mark.parametrize("dim, a_shape, b_shape", [
    (2, (2, 8, 3, 4), (2, 8, 5, 4)),  # along the height: each row reads both pieces
    (0, (1, 8, 3, 4), (2, 8, 3, 4)),  # along the batch: rows of one sample, one piece
    (1, (2, 4), (2, 12))],  # (N, C): groups of channels alone
    ids=["height", "batch", "2d"])
def test_a_cat_along_other_dims_into_group_norm(tmp_path, dim, a_shape, b_shape):
    def fn(m, a, b):
        return F.group_norm(torch.cat((a.exp(), b), dim=dim), 4) * 2.0

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 2), (torch.randn(a_shape), torch.randn(b_shape)),
                          tmp_path, n_clusters=1)
    assert _ops(checked) == ("exp", "cat", "group_norm", "mul")


def test_cat_group_norm_kernels_compile_for_sm90(tmp_path):
    # The interpreter accepts code the compiler rejects: the one-block, looped and split
    # kernels of a decoder's cat → GroupNorm → SiLU, in fp32 and fp16.
    # Also a cat whose groups straddle its operands (10 + 8 channels in groups of 6).
    jobs = []
    for dtype, up, skip, groups in ((torch.float32, 8, 8, 4), (torch.float16, 8, 8, 4),
                                    (torch.float32, 10, 8, 3)):
        model = DecoderNorm(up + skip, groups).to(dtype)
        inputs = (torch.randn(1, up, 16, 16).to(dtype), torch.randn(1, skip, 16, 16).to(dtype))
        a = analyze(model, *inputs)
        (cluster,) = a.clusters
        assert cluster.ops == ("cat", "group_norm", "silu")
        args = cluster_inputs(a, cluster, capture_values(a, *inputs))
        name = f"{str(dtype).removeprefix('torch.')}-{up}"
        jobs.append((generate(a, cluster), tmp_path / f"{name}-single", args))
        looped = generate(a, cluster, Tuning(max_block=64, loop_block=64), looped=True)
        jobs.append((looped, tmp_path / f"{name}-looped", args))  # rows too narrow to split
        split = generate(a, cluster, Tuning(max_block=64, loop_block=64, split_min_cols=128))
        jobs += [(split, tmp_path / f"{name}-{jit}", args, jit)
                 for jit in ("partials", "finish")]
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled
