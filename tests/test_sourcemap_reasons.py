"""The source map's reasons for clusters it gives no edit, named at their cause in the user's
own spelling, and the two-result `return` that now maps.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rich.console import Console
from test_apply import assert_same_outputs, backup_as_py
from test_apply_callsite import CAPTURES, line_of

from fusion_core.codegen import generate
from fusion_core.ir.graph import OpKind
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import EXACT, POINTER, map_clusters
from fusion_core.sourcemap.apply import apply
from fusion_core.sourcemap.apply_plan import plan_apply

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

TWO_RESULTS = """\
import torch
import torch.nn as nn


class Together(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 8)
        self.scale = 0.5

    def forward(self, ids):
        h = self.emb(ids) * self.scale
        return torch.tanh(h).sum(-1), h.amax(-1)


class Swapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 8)
        self.scale = 0.5

    def forward(self, ids):
        h = self.emb(ids) * self.scale
        m = h.amax(-1)
        return torch.tanh(h).sum(-1), m
"""

HELPERS = """\
import torch
import torch.nn as nn


def act(t):
    return torch.tanh(t) * 2.0


def rotate(t):
    return torch.roll(t, 4, -1)


def rotate_half(t):
    return torch.cat((-t[..., 4:], t[..., :4]), dim=-1)


class NestedAlone(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.p = nn.Linear(d, d)

    def forward(self, x):
        return act(act(self.p(x)))


class HelperOnLine(nn.Module):
    def forward(self, x):
        h = x * 2.0
        return torch.relu(h) + rotate(h)


class CatHelperOnLine(nn.Module):
    def forward(self, x):
        h = x * 2.0
        return torch.relu(h) + rotate_half(h)


class CatHelperAlone(nn.Module):
    def forward(self, x):
        return rotate_half(x) * 2.0
"""


def analysed(tmp_path: Path, text: str, cls: str, spec: InputSpec, capture: str = "auto"):
    path = tmp_path / f"{cls.lower()}.py"
    path.write_text(text)
    analysis = analyze_file(path, [spec], cls, capture=capture)
    return path, analysis, map_clusters(analysis)


IDS = InputSpec((4, 6), torch.int64)


@pytest.mark.parametrize("capture", CAPTURES)
def test_two_results_returned_together_are_one_call_returning_both(tmp_path, capture):
    # Was: "line range also holds `self.emb(ids)` (line 12), which is not in the cluster",
    # though the edit keeps that call as its argument (as with one result).
    path, analysis, (m,) = analysed(tmp_path, TWO_RESULTS, "Together", IDS, capture)
    assert m.quality == EXACT, m.reason
    line = line_of(path, "return torch.tanh(h).sum(-1), h.amax(-1)")
    assert (m.start, m.end) == (line - 1, line)
    assert m.replacement.strip() == "return cluster0(self.emb(ids))"
    kernels = {c.index: generate(analysis, c) for c in analysis.clusters}
    p = plan_apply(analysis, (m,), path, kernels, {0: (True, "verified")})
    assert p.clusters == (0,)
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert "return cluster0(self.emb(ids))" in path.read_text()
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Together",
                        torch.randint(0, 100, (3, 5)))


def test_results_returned_in_another_order_name_the_return(tmp_path):
    path, analysis, (m,) = analysed(tmp_path, TWO_RESULTS, "Swapped", IDS)
    line = line_of(path, "return torch.tanh(h).sum(-1), m")
    (c,) = analysis.clusters
    assert m.quality == POINTER
    assert m.reason == (f"line {line} returns `torch.tanh(h).sum(-1), m`, which is not the "
                        f"kernel's two results in its order (`amax` (line {line - 1}), then "
                        f"`sum` (line {line})): `torch.tanh(h).sum(...)` at line {line} is not "
                        f"`amax` (line {line - 1})")
    assert c.outputs[0] == "amax"  # node and op agree here; the reason names the op


def test_nested_calls_of_a_helper_alone_on_a_line_say_so(tmp_path):
    # Was: "`t` at line 6 reads a value the cluster computes itself (the lines run more
    # than once, e.g. in a loop)", pointing into the helper.
    path, _, (m,) = analysed(tmp_path, HELPERS, "NestedAlone", InputSpec((4, 8)))
    line = line_of(path, "return act(act(self.p(x)))")
    assert m.quality == POINTER
    assert m.reason == (f"line {line} calls `act` twice (`act(act(self.p(x)))`, one inside "
                        "the other), and the graph does not say which of its ops ran in which "
                        "call; an edit of the line cannot bind each call's result")
    assert (m.start, m.end) == (line, line)


def test_a_helper_call_left_on_the_line_is_named_by_its_call(tmp_path):
    # Was the whole statement: "line range also holds `return torch.relu(h) + rotate(h)`".
    path, _, (m,) = analysed(tmp_path, HELPERS, "HelperOnLine", InputSpec((4, 8)))
    line = line_of(path, "return torch.relu(h) + rotate(h)")
    assert m.quality == POINTER
    assert m.reason == (f"line range also holds `rotate(h)` (line {line}), which is not in "
                        "the cluster")


def test_a_cat_helper_whose_slices_of_a_value_the_kernel_reads_anyway_is_rewritten(tmp_path):
    # Was a pointer naming the slices of `h` made inside the helper; then the kernel took
    # `h` (`x * 2.0` run alone) and read the slices through their maps. Now each slice
    # reads its own copy of `x * 2.0` (``analysis/slice_recompute.py``), so the kernel
    # takes `x`, and both lines (`h = x * 2.0` and the return) become its call.
    path, analysis, (m,) = analysed(tmp_path, HELPERS, "CatHelperOnLine", InputSpec((4, 8)))
    (c,) = analysis.clusters
    assert "cat" in c.ops and c.inputs == ("x",)
    assert m.exact and m.replacement == "        return cluster0(x)"
    end = line_of(path, "return torch.relu(h) + rotate_half(h)")
    assert (m.start, m.end) == (end - 1, end)


def test_a_cat_helper_whose_slices_the_kernel_reads_names_the_view(tmp_path):
    # The cat and the negation fuse; the slices of `x` are the kernel's inputs (nothing else
    # in the kernel reads `x`), made inside the helper, so the line cannot be rewritten
    # without them.
    path, analysis, (m,) = analysed(tmp_path, HELPERS, "CatHelperAlone", InputSpec((4, 8)))
    line = line_of(path, "return rotate_half(x) * 2.0")
    cut = line_of(path, "return torch.cat((-t[..., 4:], t[..., :4]), dim=-1)")
    assert "cat" in analysis.clusters[0].ops
    assert m.quality == POINTER
    assert m.reason == (f"only part of the call at line {line} (`rotate_half`) is in the "
                        f"cluster: a slice (line {cut}) is a view made inside the call, which "
                        "the kernel reads as an input, and an edit of the call's line would "
                        "drop it")


def test_llama_rotary_clusters_are_rewritten_on_their_lines(tmp_path):
    # Was a pointer: "only part of the call at line 55 (`rotate_half`) is in the cluster: a
    # slice (line 29) is a view made inside the call, which the kernel reads as an input".
    # The slices of q are views of a value the kernel reads anyway: it takes q, cos and sin
    # and reads the halves through their index maps (analysis/boundary.py).
    path = EXAMPLES / "llama_block.py"
    analysis = analyze_file(path, [InputSpec((1, 4, 128))], "LlamaBlock")
    g = analysis.graph
    rotary = [c for c in analysis.clusters if "cat" in c.ops]
    assert [tuple(g[n].op for n in c.nodes if g[n].kind is not OpKind.VIEW)
            for c in rotary] == [("mul", "neg", "cat", "mul", "add")] * 2
    # q (k) as the line has it, after its transpose; cos and sin, the buffers' slices
    assert [[g[i].op for i in c.inputs] for c in rotary] == [
        ["transpose", "getitem", "getitem"]] * 2
    fused = {m.cluster_index: m for m in map_clusters(analysis)}
    for c, name in zip(rotary, ("q", "k"), strict=True):
        m = fused[c.index]
        line = line_of(path, f"{name} = {name} * cos + rotate_half({name}) * sin")
        assert m.exact and (m.start, m.end) == (line, line), (m.quality, m.reason)
        assert m.replacement == f"        {name} = cluster{c.index}({name}, cos, sin)"


def test_llama_rotary_lines_applied_compute_what_the_model_did(tmp_path):
    path = tmp_path / "llama_block.py"
    path.write_text((EXAMPLES / "llama_block.py").read_text())
    analysis = analyze_file(path, [InputSpec((1, 4, 128))], "LlamaBlock")
    rotary = [c.index for c in analysis.clusters if "cat" in c.ops]
    mappings = tuple(m for m in map_clusters(analysis) if m.cluster_index in rotary)
    kernels = {i: generate(analysis, analysis.clusters[i]) for i in rotary}
    p = plan_apply(analysis, mappings, path, kernels, dict.fromkeys(rotary, (True, "verified")))
    assert p.clusters == tuple(rotary)
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    lines = path.read_text().splitlines()
    for i, name in zip(rotary, ("q", "k"), strict=True):
        assert f"        {name} = cluster{i}({name}, cos, sin)" in lines
    assert "rotate_half(q)" not in path.read_text()
    torch.manual_seed(0)
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "LlamaBlock",
                        torch.randn(1, 4, 128))


ONE_CALL = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Linear(8, 8)
        self.q = nn.Linear(8, 8)

    def forward(self, x):
        a = self.p(x).cos() * 2.0
        b = self.q(x).sin() * 2.0
        return a.to(torch.float64), b.to(torch.float64)
"""


def test_another_clusters_op_in_the_same_call_is_other_code_on_the_line(tmp_path):
    # Was: "line 14 (`a.to(torch.float64)`) also runs in another call of `Net.forward`":
    # `forward` ran once; both clusters' casts stand on line 14 of that one call.
    path = tmp_path / "one_call.py"
    path.write_text(ONE_CALL)
    analysis = analyze_file(path, [InputSpec((4, 8))], class_name="Net")
    assert [c.ops for c in analysis.clusters] == [("cos", "mul", "to"), ("sin", "mul", "to")]
    maps = map_clusters(analysis)
    assert maps[1].quality == POINTER and maps[1].serves == ()
    assert maps[1].reason == ("line range also holds `a.to(torch.float64)` (line 14), which is "
                              "not in the cluster")


BRANCH_BETWEEN = """\
import torch
import torch.nn as nn


EXTRA = None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        h = x + 1.0
        if EXTRA is not None:
            # a branch the traced call skips, on a value that is not the module's own
            # setting (GPT-2's cross-attention between its residual add and ln_2)
            h = h + EXTRA
        return self.ln(h)
"""

IN_PLACE = """\
import torch
import torch.nn as nn


EXTRA = None


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        h = x + 1.0
        if EXTRA is not None:
            h.mul_(EXTRA)
        return self.ln(h)
"""

_LN = "        self.ln = nn.LayerNorm(8)\n"
ON_A_SETTING = BRANCH_BETWEEN.replace("EXTRA = None\n\n\n", "").replace(
    _LN, _LN + "        self.extra = None\n").replace("EXTRA", "self.extra")


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_branch_between_the_fused_lines_is_named_by_its_first_line_and_what_it_assigns(
        tmp_path, capture):
    path = tmp_path / "branch.py"
    path.write_text(BRANCH_BETWEEN)
    analysis = analyze_file(path, [InputSpec((4, 8))], "Net", capture=capture)
    (m,) = map_clusters(analysis)
    assert m.quality == POINTER
    line = line_of(path, "if EXTRA is not None:")
    assert (f"line {line} (`if EXTRA is not None:`) lies between the fused lines and may "
            "change `h`: one kernel cannot run around it") in m.reason
    assert "# a branch" not in m.reason  # the first line only, not the block


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_branch_on_a_module_setting_the_call_skipped_becomes_the_edits_condition(
        tmp_path, capture):
    """The same branch on `self.extra`, None in this module: its condition is fixed per
    instance, so the edit runs the kernel where it is False (sourcemap/skipped.py)."""
    path = tmp_path / "branch.py"
    path.write_text(ON_A_SETTING)
    analysis = analyze_file(path, [InputSpec((4, 8))], "Net", capture=capture)
    (m,) = map_clusters(analysis)
    assert m.quality == EXACT, m.reason
    assert m.condition == "self.extra is None"
    assert "h = h + self.extra" in m.original


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_branch_changing_a_value_in_place_names_it(tmp_path, capture):
    path = tmp_path / "in_place.py"
    path.write_text(IN_PLACE)
    analysis = analyze_file(path, [InputSpec((4, 8))], "InPlace", capture=capture)
    (m,) = map_clusters(analysis)
    assert m.quality == POINTER
    assert "lies between the fused lines and may change `h`" in m.reason


# LeViT's attention adds a bias a helper method of the block returns. In a loop of blocks,
# a later block's `q @ k` reads the stream an earlier block's kernel wrote: the reason named
# that `q @ k` as the stray code (timm levit_128s: 9 clusters), where the argument it computes
# is evaluated in its own call; the cause is the helper.
BIASED_BLOCKS = """\
import torch
from torch import nn


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.scale = 0.25
        self.attention_biases = nn.Parameter(torch.zeros(2, 9))
        self.register_buffer("idxs", torch.randint(0, 9, (6, 6)), persistent=False)

    def get_attention_biases(self, device):
        return self.attention_biases[:, self.idxs]

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 2, -1).split([8, 8, 8], dim=3)
        q = q.permute(0, 2, 1, 3)
        k = k.permute(0, 2, 3, 1)
        v = v.permute(0, 2, 1, 3)
        attn = q @ k * self.scale + self.get_attention_biases(x.device)
        attn = attn.softmax(dim=-1)
        return (attn @ v).transpose(1, 2).reshape(B, N, 16)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Attn(), Attn()])

    def forward(self, x):
        for blk in self.blocks:
            x = x + blk(x)
        return x
"""


def test_an_input_a_kernel_of_another_call_feeds_is_not_named_as_the_stray_code(tmp_path):
    path = tmp_path / "biased.py"
    path.write_text(BIASED_BLOCKS)
    maps = map_clusters(analyze_file(path, [InputSpec((2, 6, 16))], class_name="Net"))
    softmax = [m for m in maps if (m.start, m.end) == (22, 23)]
    assert len(softmax) == 2 and not any(m.exact for m in softmax)
    assert {m.reason for m in softmax} == {
        "line range also holds `self.get_attention_biases(x.device)` (line 22), which is not "
        "in the cluster"}


# timm's BatchNormAct2d in miniature: BatchNorm's forward copied, its buffers passed by a
# condition, in two calls whose clusters differ (the second's runs on into a mean below).
# timm's condition reads `self.training`, which eval mode settles (test_apply_eval_settled.py);
# this one reads a setting only.
BN_COPY = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class NormAct(nn.BatchNorm2d):
    def forward(self, x):
        x = F.batch_norm(
            x,
            self.running_mean if self.track_running_stats else None,
            self.running_var if self.track_running_stats else None,
            self.weight, self.bias, False, 0.0, self.eps)
        x = torch.relu(x)
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 1)
        self.bn1 = NormAct(4)
        self.conv2 = nn.Conv2d(4, 4, 1)
        self.bn2 = NormAct(4)

    def forward(self, x):
        x = self.bn1(self.conv1(x))
        x = self.bn2(self.conv2(x))
        return x * x.mean((2, 3), keepdim=True)
"""


def test_a_buffer_passed_by_a_condition_is_named_not_the_other_call(tmp_path):
    """The reason names the conditional argument, the real cause (it named the other call,
    `self.bn2`, and "serving that call ... is not supported yet" before)."""
    path = tmp_path / "bn_copy.py"
    path.write_text(BN_COPY)
    analysis = analyze_file(path, [InputSpec((2, 3, 4, 4))])
    maps = map_clusters(analysis)
    first = next(m for m in maps if analysis.clusters[m.cluster_index].ops == (
        "batch_norm", "relu"))
    assert first.quality == POINTER
    assert first.reason.startswith(
        "`self.running_mean if self.track_running_stats else None` "
        "(line 10) chooses a kernel input by a condition"), first.reason
    assert "not supported yet" not in first.reason
