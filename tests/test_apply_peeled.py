"""Edits the source map writes by reading two clusters differently: a cluster that holds only a
callee's last op, an eval-mode dropout (`return self.drop(h)` at the end of an MLP), and the
caller's ops on its result (the edit reads the call's result); and a sum one kernel
normalizes without storing it while another recomputes it (one edit, one call inside the other).

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import pytest
import torch
from rich.console import Console
from test_apply import assert_same_outputs, backup_as_py
from test_apply_callsite import CAPTURES, line_of, plan

from fusion_core.sourcemap import EXACT
from fusion_core.sourcemap.apply import apply

# timm's Mlp, GPT-2's MLP and nanoGPT end in a dropout: in eval mode it is the identity, so
# the kernel's dropout → add → tanh reads the same value as `self.mlp(x)` returns.
MLP_DROPOUT = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.fc2(F.relu(self.fc1(x))))


class Block(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.mlp = Mlp(d)

    def forward(self, x):
        return torch.tanh(x + self.mlp(x))
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_callees_trailing_eval_dropout_reads_as_the_calls_result(tmp_path, capture):
    path = tmp_path / "mlp_dropout.py"
    path.write_text(MLP_DROPOUT)
    analysis, mappings, p = plan(path, capture, "Block")
    (c,) = [c for c in analysis.clusters if "tanh" in c.ops]
    (m,) = [m for m in mappings if m.cluster_index == c.index]
    assert m.quality == EXACT, m.reason
    line = line_of(path, "return torch.tanh(x + self.mlp(x))")
    assert (m.start, m.end) == (line, line)
    # The kernel's dropout input is the call's result: equal in eval mode, and in training
    # the callee still runs its own dropout (the kernel's is the identity either way).
    args = dict(zip(c.inputs, m.args, strict=True))
    assert sorted(args.values()) == ["self.mlp(x)", "x"]
    assert c.index in p.clusters
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    text = path.read_text()
    # The cluster holds the callee's dropout: the edit reads that dropout's flag.
    assert ("    def forward(self, x):\n"
            "        if not self.mlp.drop.training:\n"
            f"            return {m.call}(self.mlp(x), x)\n"
            "        else:\n"
            "            return torch.tanh(x + self.mlp(x))\n") in text, text
    assert text.count("return torch.tanh(") == 1  # only under `else:`
    assert "return self.drop(self.fc2(F.relu(self.fc1(x))))" in text  # the callee stays
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Block", torch.randn(3, 8))


# A pre-norm residual (MLP-Mixer's channel mixing): the norm's kernel fuses the sum without
# storing it and the residual add's kernel recomputes it from `x` and `y`.
RESIDUAL_NORM = """\
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.mix = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.mlp = Mlp(d)

    def forward(self, x):
        y = self.mix(x)
        x = x + y
        return x + self.mlp(self.norm(x))
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_sum_the_norm_drops_and_the_residual_add_recomputes_is_one_edit(tmp_path, capture):
    path = tmp_path / "residual_norm.py"
    path.write_text(RESIDUAL_NORM)
    analysis, mappings, p = plan(path, capture, "Block")
    (norm,) = [c for c in analysis.clusters if "layer_norm" in c.ops]
    (add,) = [c for c in analysis.clusters if c.recomputes]
    a, b = mappings[norm.index], mappings[add.index]
    assert a.quality == b.quality == EXACT, (a.reason, b.reason)
    assert (a.start, a.end) == (line_of(path, "x = x + y"),
                                line_of(path, "return x + self.mlp(self.norm(x))"))
    # Every argument is read where `x = x + y` stood: `x` is still the block's input there.
    inner = f"cluster{norm.index}(x, y, self.norm.weight, self.norm.bias)"
    assert a.replacement == b.replacement
    assert a.replacement.strip().startswith(f"return cluster{add.index}(")
    assert f"self.mlp({inner})" in a.replacement
    assert {norm.index, add.index} <= set(p.clusters)
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert "x = x + y" not in path.read_text()
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Block", torch.randn(3, 8))


# LLaMA's block: the sum's second operand is a call, which both kernels read; the edit
# computes it once, under a name of its own, above the fused calls.
CALLED_RESIDUAL = RESIDUAL_NORM.replace("""        y = self.mix(x)
        x = x + y
        return x + self.mlp(self.norm(x))""", """        h = x + self.mix(x)
        return h + self.mlp(self.norm(h))""")


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_call_both_kernels_read_is_assigned_once_above_them(tmp_path, capture):
    path = tmp_path / "called_residual.py"
    path.write_text(CALLED_RESIDUAL)
    analysis, mappings, p = plan(path, capture, "Block")
    (norm,) = [c for c in analysis.clusters if "layer_norm" in c.ops]
    (add,) = [c for c in analysis.clusters if c.recomputes]
    a = mappings[norm.index]
    assert a.quality == mappings[add.index].quality == EXACT, a.reason
    inner = f"cluster{norm.index}(x, fused, self.norm.weight, self.norm.bias)"
    assert [t.strip() for t in a.replacement.splitlines()] == [
        "fused = self.mix(x)", f"return cluster{add.index}(x, fused, self.mlp({inner}))"]
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert path.read_text().count("self.mix(x)") == 1  # the call runs once
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Block", torch.randn(3, 8))


# GPT-NeoX's parallel block: two norms of one sum, each read by its own branch.
TWO_BRANCHES = """\
import torch.nn as nn


class Parallel(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.norm_attn = nn.LayerNorm(d)
        self.norm_mlp = nn.LayerNorm(d)
        self.attn = nn.Linear(d, d)
        self.mlp = nn.Linear(d, d)
        self.mix = nn.Linear(d, d)

    def forward(self, x):
        y = self.mix(x)
        h = x + y
        return h + self.attn(self.norm_attn(h)) + self.mlp(self.norm_mlp(h))
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_two_norms_of_a_recomputed_sum_are_named_above_the_residual_call(tmp_path, capture):
    path = tmp_path / "two_branches.py"
    path.write_text(TWO_BRANCHES)
    analysis, mappings, p = plan(path, capture, "Parallel")
    (norms,) = [c for c in analysis.clusters if "layer_norm" in c.ops]
    (add,) = [c for c in analysis.clusters if c.recomputes]
    a = mappings[norms.index]
    assert a.quality == mappings[add.index].quality == EXACT, a.reason
    lines = [t.strip() for t in a.replacement.splitlines()]
    assert lines[0].startswith(f"fused, fused1 = cluster{norms.index}(x, y, ")
    assert lines[1].startswith(f"return cluster{add.index}(")
    assert lines[1].endswith("self.attn(fused), self.mlp(fused1))")
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert "h = x + y" not in path.read_text()
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Parallel", torch.randn(3, 8))


# Hugging Face's LlamaRMSNorm, copied into a user's file: the norm remembers its input's dtype
# at its first line and casts back to it; the kernel holds that dtype (as it holds `eps`).
REMEMBERED_DTYPE = """\
import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, d: int = 8, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(input_dtype)


class Net(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.norm = RMSNorm(d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return self.proj(self.norm(x))
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_dtype_read_above_the_range_is_built_into_the_kernel(tmp_path, capture):
    path = tmp_path / "remembered_dtype.py"
    path.write_text(REMEMBERED_DTYPE)
    analysis, (m,), p = plan(path, capture, "Net")
    assert m.quality == EXACT, m.reason
    assert (m.start, m.end) == (line_of(path, "hidden_states = hidden_states.to(torch.float32)"),
                                line_of(path, "return self.weight * hidden_states.to("
                                              "input_dtype)"))
    assert m.replacement.strip() == "return cluster0(hidden_states, self.weight)"
    # The note names what the kernel holds; `torch.float32` names its own value.
    assert sorted(m.baked) == ["input_dtype = torch.float32", "self.eps = 1e-06"]
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert "input_dtype = hidden_states.dtype" in path.read_text()  # above the range: kept
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Net", torch.randn(3, 8))


# The pre-norm transformer block, as most users write it.
PRE_NORM = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Linear(d, d)
        self.head = nn.Linear(d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return self.head(x)
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_pre_norm_blocks_residual_and_second_norm_are_one_edit(tmp_path, capture):
    path = tmp_path / "pre_norm.py"
    path.write_text(PRE_NORM)
    analysis, mappings, p = plan(path, capture, "Block")
    assert [m.quality for m in mappings] == [EXACT, EXACT], [m.reason for m in mappings]
    (norm,) = [c for c in analysis.clusters if "layer_norm" in c.ops]
    (add,) = [c for c in analysis.clusters if c.recomputes]
    assert [t.strip() for t in mappings[0].replacement.splitlines()] == [
        "fused = self.attn(self.ln1(x))",
        f"x = cluster{add.index}(x, fused, self.mlp(cluster{norm.index}(x, fused, "
        "self.ln2.weight, self.ln2.bias)))"]
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Block", torch.randn(3, 8))
