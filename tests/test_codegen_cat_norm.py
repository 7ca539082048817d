"""A `torch.cat` read by a norm in one kernel: a UNet decoder's `cat((up, skip), 1)` →
GroupNorm (→ SiLU), whose groups split the cat dim (``ir/concat.pieces``: each operand is
whole groups, its piece a range of the group dim), and cat → LayerNorm over the cat dim.
Inductor fuses both on CPU (`cpp_fused_cat_native_group_norm_silu_0`); each fusing case runs
its kernel under the interpreter against eager. A group that would hold channels of two
operands is refused by op, line and sizes.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from codegen_harness import Lambda, check_model, compare, compile_for_gpu, poison_empty

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
    launch = load_kernel(path).cluster0
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
    launch = load_kernel(path).cluster0
    w, b = (p.detach().reshape(16, 1, 1) for p in (model.norm.weight, model.norm.bias))
    n = up if which == "up" else skip
    with pytest.raises(ValueError, match=f"^cluster0: a concatenated input, `{which}`, is {n} "
                       r"channels long along the cat dim \(dim 1\); this kernel reads 8 "
                       r"\(group_norm's groups of 4\); regenerate it at these sizes or keep "
                       "the original ops$"):
        launch(torch.randn(1, up, 3, 3), torch.randn(1, skip, 3, 3), w, b)


def test_a_group_holding_channels_of_two_operands_is_refused_by_name():
    # 6 + 10 channels in 4 groups of 4: the second group holds up's last 2 and skip's first 2.
    model = DecoderNorm(16, 4)
    a = analyze(model, torch.randn(2, 6, 3, 3), torch.randn(2, 10, 3, 3))
    assert [c.ops for c in a.clusters] == [("group_norm", "silu")]
    reasons = [r.reason for r in a.rejections]
    line = DecoderNorm.forward.__code__.co_firstlineno  # `def forward`: cat and norm follow
    assert any(f"`self.norm` (line {line + 2}) splits `cat` (line {line + 1}) into groups of 4 "
               "channels, and `up` is 6 channels long there: a group would hold channels of "
               "two operands; a kernel reads each operand as whole groups (operands of a "
               "multiple of 4 channels fuse)" in r for r in reasons), reasons


class TwoNorms(nn.Module):
    """A group_norm of `x` first, then one of a cat: the refusal names the second."""

    def forward(self, x, up, skip):
        y = F.group_norm(x, 2)
        h = torch.cat((up * 2.0, skip), dim=1).relu()
        z = F.group_norm(h, 2)
        return y + z


def test_the_refusal_names_the_group_norm_that_splits_the_cat():
    # 4 + 2 channels in 2 groups of 3; `y`'s group_norm comes first in the group (it was
    # named, and its line, though it reads no cat)
    a = analyze(TwoNorms(), torch.randn(2, 6, 3, 3), torch.randn(2, 4, 3, 3),
                torch.randn(2, 2, 3, 3))
    reasons = [r.reason for r in a.rejections]
    line = TwoNorms.forward.__code__.co_firstlineno
    assert any(f"`group_norm` (line {line + 3}) splits `cat` (line {line + 2}) into groups of "
               f"3 channels, and `mul` (line {line + 2}) is 4 channels long there" in r
               for r in reasons), reasons


@pytest.mark.parametrize("s_shape, t_shape", [
    ((1, 4, 1, 1), (1, 8, 1, 1)),  # per channel, as a bias: read at the piece's own channel
    ((2, 1, 1, 1), (1,)),  # per sample, and one element: every group of the piece reads it
    ((1, 4, 1, 1), (2, 1, 3, 1))],
    ids=["per-channel", "per-sample", "mixed"])
def test_operands_broadcast_inside_the_branches_of_a_cat_into_group_norm(tmp_path, s_shape,
                                                                          t_shape):
    def fn(m, a, b):
        return F.group_norm(torch.cat((a * m.s, b + m.t), dim=1), 3, m.w, m.b).relu()

    torch.manual_seed(0)
    lam = Lambda(fn, 2, s=torch.randn(s_shape), t=torch.randn(t_shape), w=torch.randn(12),
                 b=torch.randn(12))
    checked = check_model(lam, (torch.randn(2, 4, 3, 2), torch.randn(2, 8, 3, 2)), tmp_path,
                          n_clusters=1)
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


def test_few_wide_rows_of_a_cat_group_norm_split_over_programs(tmp_path):
    # A UNet at batch 1: few groups of many columns, each row cut into chunks across programs
    # (``codegen/split_rows.py``); each chunk masks its loads to the operand whose groups it
    # reads.
    torch.manual_seed(0)
    model = DecoderNorm(8, 4).eval()
    up, skip = torch.randn(1, 4, 32, 64), torch.randn(1, 4, 32, 64)  # 4 rows of 4096
    a = analyze(model, up, skip)
    (cluster,) = a.clusters
    # rows of 4096 loop at blocks of 256, chunks of 1024 columns count as wide
    kernel = generate(a, cluster, Tuning(max_block=256, loop_block=256, split_min_cols=1024))
    assert f"def {kernel.name}_partials(" in kernel.source
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    poison_empty(module)
    module._timing_on = lambda device: False
    values = capture_values(a, up, skip)
    args = tuple(values[n] for n in cluster.inputs)
    (want,) = eager_cluster(a, cluster)(*args)
    got = getattr(module, kernel.name)(*args)
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
    jobs = []
    for dtype in (torch.float32, torch.float16):
        model = DecoderNorm(16, 4).to(dtype)
        inputs = (torch.randn(1, 8, 16, 16).to(dtype), torch.randn(1, 8, 16, 16).to(dtype))
        a = analyze(model, *inputs)
        (cluster,) = a.clusters
        args = cluster_inputs(a, cluster, capture_values(a, *inputs))
        name = str(dtype).removeprefix("torch.")
        jobs.append((generate(a, cluster), tmp_path / f"{name}-single", args))
        looped = generate(a, cluster, Tuning(max_block=64, loop_block=64), looped=True)
        jobs.append((looped, tmp_path / f"{name}-looped", args))  # rows too narrow to split
        split = generate(a, cluster, Tuning(max_block=64, loop_block=64, split_min_cols=128))
        jobs += [(split, tmp_path / f"{name}-{jit}", args, jit)
                 for jit in ("partials", "finish")]
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled
