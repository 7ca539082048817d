"""`--apply` on a diffusion UNet's residual block (GroupNorm → SiLU → conv, a time embedding
broadcast in with `[:, :, None, None]`, a residual add), two blocks in a row.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import pytest
from apply_checks import apply_net, same_outputs

from fusion_core import cli
from fusion_core.cli_run import mapping_dict
from fusion_core.codegen import generate
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.apply_plan import plan_apply

RESBLOCK = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class ResBlock(nn.Module):
    def __init__(s, ch, temb):
        super().__init__()
        s.n1 = nn.GroupNorm(8, ch)
        s.c1 = nn.Conv2d(ch, ch, 3, padding=1)
        s.t = nn.Linear(temb, ch)
        s.n2 = nn.GroupNorm(8, ch)
        s.c2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(s, x, emb):
        h = s.c1(F.silu(s.n1(x)))
        h = h + s.t(emb)[:, :, None, None]
        h = s.c2(F.silu(s.n2(h)))
        return x + h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, 16, 1)
        self.emb = nn.Linear(16, 32)
        self.b1 = ResBlock(16, 32)
        self.b2 = ResBlock(16, 32)

    def forward(self, x):
        h = self.inp(x)
        emb = self.emb(h.mean((2, 3)))
        h = self.b1(h, emb)
        h = self.b2(h, emb)
        return h
"""


@pytest.fixture(autouse=True)
def _cpu_target(request, monkeypatch):
    """The edits below are a CPU target's, as `_maps` analyses (conv biases stay in the
    convolutions); also where the CLI runs on a GPU. A GPU target's, where each conv's bias
    joins the next kernel, are `test_a_gpu_target_*`'s."""
    if not request.node.name.startswith("test_a_gpu_target"):
        monkeypatch.setattr(cli, "analysis_device", lambda: None)


def _maps(path):
    return map_clusters(analyze_file(path, [InputSpec((2, 3, 8, 8))], class_name="Net"))


def test_time_embedding_add_into_the_next_norm_is_one_edit(tmp_path):
    # Before: `s.t(emb)[:, :, None, None]`, the add's other operand, was "not in the
    # cluster", so 0 of 5 clusters applied; now the two blocks' add → group_norm → silu
    # clusters are one exact edit that keeps the subscript as the kernel's argument.
    path = tmp_path / "unet.py"
    path.write_text(RESBLOCK)
    maps = _maps(path)
    exact = sorted(m.cluster_index for m in maps if m.exact)
    assert exact == [0, 1, 3], [m.reason for m in maps]
    assert (maps[1].start, maps[1].end) == (17, 18)
    assert maps[1].replacement == (
        "        h = s.c2(cluster1(h, s.t(emb)[:, :, None, None], "
        "s.n2.weight.reshape(-1, 1, 1), s.n2.bias.reshape(-1, 1, 1)))")
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 2 edits" in result.output, result.output
    assert "Not applied: clusters 2, 4" in result.output, result.output
    rewritten = path.read_text()
    assert "h = h + s.t(emb)" not in rewritten and "        return x + h\n" in rewritten
    same_outputs(tmp_path, path, RESBLOCK)


def test_the_first_norm_is_one_edit_that_serves_the_next_blocks_call(tmp_path):
    # Before: "line 16 (`s.n1(x)`) also runs in another call … serving that call with this
    # kernel is not supported yet". In b2's call line 16's group_norm → silu is part of
    # cluster 2 (b1's residual add fused in); the edit runs cluster 0's kernel there on b1's
    # output, which b1's `return x + h`, left as written, computes.
    path = tmp_path / "unet.py"
    path.write_text(RESBLOCK)
    maps = _maps(path)
    assert maps[0].exact, maps[0].reason
    assert (maps[0].start, maps[0].end) == (16, 16)
    assert maps[0].replacement == (
        "        h = s.c1(cluster0(x, s.n1.weight.reshape(-1, 1, 1), "
        "s.n1.bias.reshape(-1, 1, 1)))")
    assert maps[0].shared_with == ()  # cluster 2 is not applied by it
    (served,) = maps[0].serves
    assert (served.part.index, served.part.ops, served.call) == (2, ("group_norm", "silu"),
                                                                 "cluster0")
    assert mapping_dict(maps[0])["serves"] == [{  # the JSON report
        "cluster": 2, "ops": ["group_norm", "silu"], "call": "cluster0",
        "site": "at line 34 (`h = self.b2(h, emb)`) on `self.b2`"}]
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert ("unet.py:16  cluster 0; also the call at line 34 (`h = self.b2(h, emb)`) on "
            "`self.b2`, as cluster 2's group_norm → silu") in result.output, result.output
    rewritten = path.read_text().splitlines()
    assert rewritten[rewritten.index("    def forward(s, x, emb):") + 1] == (
        "        h = s.c1(cluster0(x, s.n1.weight.reshape(-1, 1, 1), "
        "s.n1.bias.reshape(-1, 1, 1)))")
    same_outputs(tmp_path, path, RESBLOCK)


def test_a_next_block_with_other_settings_is_not_served(tmp_path):
    # b2's first GroupNorm has another eps: cluster 0's kernel bakes b1's, so the edit of
    # line 16, which runs in b2 too, would compute b2's norm wrong.
    path = tmp_path / "unet.py"
    path.write_text(RESBLOCK.replace(
        "def __init__(s, ch, temb):", "def __init__(s, ch, temb, eps=1e-5):").replace(
        "s.n1 = nn.GroupNorm(8, ch)", "s.n1 = nn.GroupNorm(8, ch, eps=eps)").replace(
        "self.b2 = ResBlock(16, 32)", "self.b2 = ResBlock(16, 32, 1e-3)"))
    maps = _maps(path)
    assert sorted(m.cluster_index for m in maps if m.exact) == [1, 3]
    assert maps[0].reason == (
        "line 16 (`s.n1(x)`) also runs in another call of `ResBlock.forward` at line 34 "
        "(`h = self.b2(h, emb)`), where it is part of cluster 2 (add → group_norm → silu), "
        "not of this one: an edit of the line changes every call, and this kernel cannot "
        "compute that call's ops there: the same lines run as cluster 0 and as part of "
        "cluster 2, with other constants: `eps` of `group_norm` (line 16) is 0.001 there and "
        "1e-05 in cluster 0; one kernel cannot serve both")


def test_a_residual_add_fused_into_the_next_blocks_call_names_both_calls(tmp_path):
    # b1's `return x + h` joins b2's first norm (and, recomputed, b2's residual add): the
    # ops ran in two calls of `ResBlock.forward`, whose lines one edit cannot split.
    path = tmp_path / "unet.py"
    path.write_text(RESBLOCK)
    maps = _maps(path)
    for index, other in ((2, "`group_norm` (line 16)"), (4, "`add` (line 19)")):
        reason = maps[index].reason
        assert not maps[index].exact
        assert reason.startswith(
            "the cluster joins `add` (line 19) of the call at line 33 (`h = self.b1(h, emb)`) "
            f"on `self.b1` with {other} of another call at line 34 (`h = self.b2(h, emb)`) on "
            "`self.b2` of `ResBlock.forward`"), reason
    # Where the ops could be written together; the residual add's fix in the user's names.
    assert maps[4].reason.endswith(
        "To apply it, write these ops in one function's lines (e.g. return `h` and do the "
        "residual add `x + h` in the caller, giving each call's result and each sum a name "
        "of its own)"), maps[4].reason
    # Moving b1's residual add to the caller alone would leave b2's norm in its forward.
    assert maps[2].reason.endswith(
        "To apply it, write these ops in one function's lines (here both in their caller, "
        "`Net.forward`); the edit of line 16 (cluster 0) runs its group_norm → silu in the "
        "call at line 34 (`h = self.b2(h, emb)`) on `self.b2`, leaving `add` (line 19) "
        "unfused"), \
        maps[2].reason


def test_the_residual_adds_moved_to_the_caller_as_the_reason_says_apply(tmp_path):
    # What cluster 4's reason asks for: each block returns `h`, the caller adds the residual
    # under new names; the add → add of both sums is then one edit of the caller's return.
    text = RESBLOCK.replace("        return x + h\n", "        return h\n").replace(
        "        h = self.b1(h, emb)\n        h = self.b2(h, emb)\n        return h\n",
        "        r1 = self.b1(h, emb)\n        y = h + r1\n        r2 = self.b2(y, emb)\n"
        "        return y + r2\n")
    path = tmp_path / "unet.py"
    path.write_text(text)
    maps = _maps(path)
    assert sorted(m.cluster_index for m in maps if m.exact) == [0, 1, 3, 4], maps
    assert maps[4].replacement == "        return cluster4(h, r1, r2)"
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 3 edits" in result.output and "Not applied: cluster 2 " in result.output, \
        result.output
    same_outputs(tmp_path, path, text)


def test_blocks_called_in_a_loop_are_told_apart_by_their_module(tmp_path):
    # One call line for both blocks: the module each call ran on tells the calls apart
    # (before, the add → add kernel was told to assign `x` above line 19).
    path = tmp_path / "unet.py"
    path.write_text(RESBLOCK.replace(
        "        self.b1 = ResBlock(16, 32)\n        self.b2 = ResBlock(16, 32)",
        "        self.blocks = nn.ModuleList([ResBlock(16, 32), ResBlock(16, 32)])").replace(
        "        h = self.b1(h, emb)\n        h = self.b2(h, emb)",
        "        for b in self.blocks:\n            h = b(h, emb)"))
    maps = _maps(path)
    assert sorted(m.cluster_index for m in maps if m.exact) == [0, 1, 3]
    assert maps[0].serves[0].site == "at line 33 (`h = b(h, emb)`) on `b` (`self.blocks[1]`)"
    assert maps[4].reason.startswith(
        "the cluster joins `add` (line 19) of the call at line 33 (`h = b(h, emb)`) on "
        "`b` (`self.blocks[0]`) with `add` (line 19) of another call at line 33 "
        "(`h = b(h, emb)`) on `b` (`self.blocks[1]`) of `ResBlock.forward`"), maps[4].reason


# The same block written out in one forward, its residual sum feeding the next GroupNorm
# and the next residual add: analysis recomputes `x + h` in the add → add kernel (line 27)
# rather than storing it from the add → group_norm → silu kernel (lines 25-26).
FLAT = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(s, ch=16, temb=32):
        super().__init__()
        s.inp = nn.Conv2d(3, ch, 1)
        s.emb = nn.Linear(ch, temb)
        s.n1 = nn.GroupNorm(8, ch)
        s.c1 = nn.Conv2d(ch, ch, 3, padding=1)
        s.t = nn.Linear(temb, ch)
        s.n2 = nn.GroupNorm(8, ch)
        s.c2 = nn.Conv2d(ch, ch, 3, padding=1)
        s.n3 = nn.GroupNorm(8, ch)
        s.c3 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(s, x):
        x = s.inp(x)
        emb = s.emb(x.mean((2, 3)))
        h = s.c1(F.silu(s.n1(x)))
        h = h + s.t(emb)[:, :, None, None]
        h = s.c2(F.silu(s.n2(h)))
{tail}"""
REBOUND = """\
        x = x + h
        h = s.c3(F.silu(s.n3(x)))
        return x + h
"""
NAMED = """\
        r = x + h
        h2 = s.c3(F.silu(s.n3(r)))
        return r + h2
"""
INLINE = """\
        h2 = s.c3(F.silu(s.n3(x + h)))
        return x + h + h2
"""
CALLED = """\
        r = x + s.c2(h)
        h2 = s.c3(F.silu(s.n3(r)))
        return r + h2
"""


def _flat(tmp_path, tail):
    path = tmp_path / "flat.py"
    path.write_text(FLAT.format(tail=tail))
    return path, {m.cluster_index: m for m in _maps(path)}


def test_a_recomputed_sum_kept_under_its_own_name_is_read_from_its_operands(tmp_path):
    # Before: "`add` (line 25) is computed by two kernels" for both; now the add → add
    # kernel reads `x` and `h`, which still hold the sum's operands at line 27.
    path, maps = _flat(tmp_path, NAMED)
    assert maps[3].replacement == "        return cluster3(x, h, h2)"
    assert maps[3].needs == ()
    # The sum's kernel leaves `r` unstored: alone its edit of lines 25-26 would drop `r`,
    # which line 27 reads (it said "spell `x + h` inside each expression that reads it");
    # written with cluster 3's edit, which reads `x` and `h` instead, it drops nothing.
    assert [i for i, m in maps.items() if m.exact] == [0, 1, 2, 3], maps
    assert (maps[2].start, maps[2].end, maps[2].needs) == (25, 26, (3,))
    assert mapping_dict(maps[2])["needs"] == [3]
    assert maps[2].replacement == (
        "        h2 = s.c3(cluster2(x, h, s.n3.weight.reshape(-1, 1, 1), "
        "s.n3.bias.reshape(-1, 1, 1)))")
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "flat.py:25-26  cluster 2; written with cluster 3's edit" in result.output
    assert "Applied 4 edits" in result.output, result.output
    assert "r = x + h" not in path.read_text()
    same_outputs(tmp_path, path, FLAT.format(tail=NAMED))


def test_a_sum_dropped_for_an_edit_is_not_written_without_it(tmp_path):
    # Cluster 3's kernel failed its check: its line still reads `r`, so cluster 2's edit,
    # which drops `r`, is left out too.
    path, _ = _flat(tmp_path, NAMED)
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))], class_name="Net")
    maps = map_clusters(analysis)
    kernels = {c.index: generate(analysis, c) for c in analysis.clusters}
    verdicts = {c.index: (c.index != 3, "mismatch") for c in analysis.clusters}
    plan = plan_apply(analysis, maps, path, kernels, verdicts)
    assert plan.clusters == (0, 1)
    assert {s.cluster: s.reason for s in plan.skipped}[2] == (
        "its edit drops a value cluster 3's kernel recomputes, and cluster 3's edit, which "
        "stops reading it, is not written")


def test_a_recomputed_sum_whose_operands_are_rebound_says_which_line_rebinds_them(tmp_path):
    _, maps = _flat(tmp_path, REBOUND)
    assert not maps[2].exact and not maps[3].exact
    assert maps[2].reason == (
        "`add` (line 25) is computed by two kernels (recomputed instead of stored): cluster 3 "
        "recomputes it at line 27, where the source reads the variable these lines assign, so "
        "an edit of them alone would drop it. To apply both, spell `x + h` inside each "
        "expression that reads it (lines 26, 27) instead of assigning it once")
    assert maps[3].reason == (
        "this kernel recomputes `add` (line 25) (`x + h`) at line 27, but `x` is reassigned "
        "at line 25 in between; to apply it, give what line 25 computes a new name, so `x` "
        "still holds its value at line 27")


def test_the_sum_spelled_where_each_reads_it_applies_every_cluster(tmp_path):
    # What the reason above asks for: no value is shared, so every cluster is one edit.
    path, maps = _flat(tmp_path, INLINE)
    assert all(m.exact for m in maps.values()), [m.reason for m in maps.values()]
    result = apply_net(path)
    assert result.exit_code == 0 and "Applied 4 edits" in result.output, result.output
    same_outputs(tmp_path, path, FLAT.format(tail=INLINE))


def test_a_recomputed_sum_of_a_call_is_not_read_again(tmp_path):
    # Re-reading `x + s.c2(h)` as the kernel's arguments would run the conv a second time.
    _, maps = _flat(tmp_path, CALLED)
    recomputing = [m for m in maps.values() if m.reason and "recomputes `add`" in m.reason]
    assert recomputing and not any(m.exact for m in recomputing), maps
    assert recomputing[0].reason.startswith(
        "this kernel recomputes `add` (line 25) from `x + s.c2(h)` (line 25), whose calls the "
        "edit would run a second time at line 27"), recomputing[0].reason


def test_a_gpu_target_passes_each_conv_bias_to_the_kernel_after_it(tmp_path, monkeypatch):
    # For a GPU, `self.inp`'s and `s.c1`'s biases are adds of the kernels after them: the
    # edits call the convs without their bias. Cluster 5 (the residual `x + h` after
    # `s.c2`'s bias) overlaps the block's edit, which is written instead.
    monkeypatch.setattr(cli, "analysis_device", lambda: "cuda")
    path = tmp_path / "unet.py"
    path.write_text(RESBLOCK)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 2 edits" in result.output, result.output
    rewritten = path.read_text()
    assert ("cluster0(F.conv2d(x, self.inp.weight, None, self.inp.stride, self.inp.padding, "
            "self.inp.dilation, self.inp.groups), self.inp.bias.reshape(-1, 1, 1))") in rewritten
    assert "s.c1.weight, None, s.c1.stride" in rewritten
    assert "cluster 5: pointer" in result.output
    assert "its lines overlap cluster 1's edit" in result.output
    same_outputs(tmp_path, path, RESBLOCK)
