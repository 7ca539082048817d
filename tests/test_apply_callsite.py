"""Source maps and `--apply` for clusters whose ops run partly in a call of the user's own module or
helper: the edit replaces the call's line in the caller, as for a library module (`self.ln(x)`).

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from model_sources import DECODER_NORM, USER_NORM
from rich.console import Console
from test_apply import DEVICE, assert_same_outputs, backup_as_py, load

from fusion_core.codegen import generate
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import EXACT, POINTER, map_clusters
from fusion_core.sourcemap.apply import apply
from fusion_core.sourcemap.apply_plan import plan_apply

CAPTURES = ["auto", "export"]  # FX tracing, and torch.export


def plan(path: Path, capture: str, class_name: str | None = None):
    analysis = analyze_file(path, [InputSpec((4, 8))], class_name=class_name, capture=capture)
    mappings = map_clusters(analysis)
    kernels = {c.index: generate(analysis, c) for c in analysis.clusters}
    verdicts = {c.index: (True, "verified") for c in analysis.clusters}
    return analysis, mappings, plan_apply(analysis, mappings, path, kernels, verdicts)


def line_of(path: Path, code: str) -> int:
    (hit,) = [i for i, t in enumerate(path.read_text().splitlines(), 1) if t.strip() == code]
    return hit


@pytest.mark.parametrize("capture", CAPTURES)
def test_residual_add_and_a_user_norm_module_are_one_edit_in_the_caller(tmp_path, capture):
    path = tmp_path / "user_norm.py"
    path.write_text(USER_NORM)
    analysis, (m,), p = plan(path, capture)
    (c,) = analysis.clusters
    assert {"add", "pow", "mean", "rsqrt", "mul"} <= set(c.ops)  # the add and the norm's ops
    assert m.quality == EXACT, m.reason
    assert (m.start, m.end) == (line_of(path, "h = x + self.attn_like(x)"),
                                line_of(path, "h = self.norm(h)"))
    assert m.function == "Block.forward"
    assert m.replacement.strip() == "h = cluster0(x, self.attn_like(x), self.norm.weight)"
    assert p.clusters == (0,)
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert result.clusters == (0,)
    text = path.read_text()
    assert "h = cluster0(x, self.attn_like(x), self.norm.weight)" in text
    assert "h = self.norm(h)" not in text
    # The norm's own forward is left as written: other code may still call it.
    assert "return x * torch.rsqrt(" in text
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Block", torch.randn(3, 8))
    assert analyze_file(path, [InputSpec((4, 8))], capture=capture).clusters == ()


# Export only: at float32 it records the norm's `.to(torch.float32)` as the sum itself, which
# the block's last add reads, so the sum is stored (FX: the next test).
def test_a_decoder_layers_residual_and_post_attention_norm_are_one_edit(tmp_path):
    path = tmp_path / "decoder.py"
    path.write_text(DECODER_NORM)
    analysis, mappings, p = plan(path, "export")
    (m,) = [m for m in mappings if m.exact]
    assert (m.start, m.end) == (line_of(path, "hidden_states = residual + hidden_states"),
                                line_of(path, "hidden_states = self.post_attention_layernorm("
                                              "hidden_states)"))
    # `residual = hidden_states` inside the range becomes the kernel's first result.
    assert m.replacement.strip() == ("residual, hidden_states = cluster0(residual, "
                                     "hidden_states, self.post_attention_layernorm.weight)")
    assert m.cluster_index in p.clusters
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Layer", torch.randn(3, 8))


def test_under_fx_the_decoders_residual_is_recomputed_and_the_map_says_how_to_spell_it(
        tmp_path):
    """FX's `input_dtype = hidden_states.dtype` is no use of the residual sum (its input has
    the dtype: tests/test_dtype_reads.py), so the block's last add recomputes the sum, as under
    torch.export at bfloat16; the dtype read is no line to spell the sum in."""
    path = tmp_path / "decoder.py"
    path.write_text(DECODER_NORM)
    analysis, mappings, _ = plan(path, "auto")
    norm, last = analysis.clusters
    assert norm.outputs == (norm.nodes[-1],) and last.recomputes == ("add",)
    assert not any(m.exact for m in mappings)
    assert mappings[0].reason.endswith(
        "To apply both, spell `residual + hidden_states` inside each expression that reads it "
        "(lines 13, 33) instead of assigning it once"), mappings[0].reason


# The norm's module also runs a layer and an activation after the norm: the residual add and
# the norm's ops form one cluster, the activation another; neither holds the whole call.
PARTLY_FUSED_NORM = USER_NORM.replace(
    "        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight",
    "        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight\n"
    "        return torch.relu(self.proj(y)) * 2.0").replace(
    "        self.eps = eps", "        self.eps = eps\n        self.proj = nn.Linear(d, d)")


def test_a_norm_call_only_partly_in_the_cluster_stays_a_pointer(tmp_path):
    # Neither cluster holds the whole call, so neither may replace its line.
    path = tmp_path / "partial.py"
    path.write_text(PARTLY_FUSED_NORM)
    analysis, mappings, p = plan(path, "auto")
    call = line_of(path, "h = self.norm(h)")
    norm = next(m for m, c in zip(mappings, analysis.clusters, strict=True) if "add" in c.ops)
    assert norm.quality == POINTER
    assert norm.reason.startswith(f"only part of the call at line {call} (`RMSNorm.forward`) "
                                  "is in the cluster: `self.proj` (`self.norm.proj`, line "
                                  ), norm.reason  # as RMSNorm.forward's line calls it
    assert (norm.start, norm.end) == (call, call)
    assert norm.cluster_index not in p.clusters
    skip = next(s for s in p.skipped if s.cluster == norm.cluster_index)
    assert skip.pointer and "only part of the call" in skip.reason
    # The activation's cluster lies in the norm's forward alone: edited there, as before.
    act = next(m for m, c in zip(mappings, analysis.clusters, strict=True) if "relu" in c.ops)
    assert act.quality == EXACT and act.function == "RMSNorm.forward", act.reason


def test_a_partly_fused_call_in_an_installed_library_is_refused_as_the_librarys(tmp_path):
    # torchvision's ResNet: the head's pool joins the last block's add -> relu, half of the
    # `self.layer4(x)` call. The library's file is never edited, whatever else is wrong.
    path = tmp_path / "site-packages" / "partial.py"
    path.parent.mkdir()
    path.write_text(PARTLY_FUSED_NORM)
    analysis, mappings, p = plan(path, "auto")
    norm = next(m for m, c in zip(mappings, analysis.clusters, strict=True) if "add" in c.ops)
    assert norm.quality == POINTER and "installed library" in norm.reason, norm.reason
    assert norm.file == str(path)
    assert norm.start <= line_of(path, "h = self.norm(h)") <= norm.end
    assert all(not m.exact and "installed library" in m.reason for m in mappings)
    assert p.clusters == ()


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_helper_function_and_a_method_called_whole_map_at_their_lines(tmp_path, capture):
    path = tmp_path / "helpers.py"
    path.write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn


        def rms_norm(x, weight, eps: float = 1e-6):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)
                self.weight = nn.Parameter(torch.rand(8))

            def forward(self, x):
                h = x + self.proj(x)
                h = rms_norm(h, self.weight, eps=1e-5)
                g = self._scale(h, 3.0)
                return self.proj(g)

            def _scale(self, t, s):
                return torch.tanh(t) * s
        """))
    analysis = analyze_file(path, [InputSpec((4, 8))], capture=capture)
    (m,) = map_clusters(analysis)
    assert m.quality == EXACT, m.reason
    assert (m.start, m.end) == (line_of(path, "h = x + self.proj(x)"),
                                line_of(path, "g = self._scale(h, 3.0)"))
    # The weight passed to the helper is bound by the caller's own expression for it.
    assert m.replacement.strip() == "g = cluster0(x, self.proj(x), self.weight)"


TUPLE_HELPER = '''\
import torch
import torch.nn as nn


def act_keep(x):
    return torch.tanh(x) * 2.0, x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Linear(8, 8)

    def forward(self, x):
        h = self.p(x) * 3.0
        a, b = act_keep(h)
        return self.p(a) + self.p(b)
'''

MODULE_TENSOR_HELPER = '''\
import torch
import torch.nn as nn

SCALE = torch.rand(8) + 0.5


def scale(x):
    return torch.tanh(x) * SCALE


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Linear(8, 8)

    def forward(self, x):
        h = x * 2.0
        g = scale(h)
        return self.p(g)
'''


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_helper_returning_a_tuple_is_not_lifted(tmp_path, capture):
    """`a, b = act_keep(h)`, where the second value is the argument itself: the kernel's one
    result cannot be bound to both names, so the call stays a pointer that says why."""
    path = tmp_path / "tuple_helper.py"
    path.write_text(TUPLE_HELPER)
    _, (m,), p = plan(path, capture)
    assert m.quality == POINTER
    assert "returns several values" in m.reason and "act_keep" in m.reason, m.reason
    assert p.clusters == ()


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_helper_reading_a_module_level_tensor_is_not_bound_as_an_attribute(tmp_path, capture):
    """The tracer stores `SCALE` on its graph module (`_tensor_constant0`, `lifted_tensor_0`),
    which no `self.` text of the user's module reaches: no edit passes it as one."""
    path = tmp_path / "module_tensor.py"
    path.write_text(MODULE_TENSOR_HELPER)
    _, (m,), p = plan(path, capture)
    assert m.quality == POINTER, m.replacement
    assert "_tensor_constant" not in (m.replacement or "") and "lifted_tensor" not in (
        m.replacement or "")
    assert p.clusters == ()


def test_gpt_layers_residual_and_norm2_are_one_edit_with_norm1_kept_as_its_argument(tmp_path):
    # examples/gpt12.py: `x = x + self.attn(self.norm1(x))` then `h = self.up(self.norm2(x))`.
    # norm1 fuses with the previous call's add (a pointer), so it stays the kernel's argument;
    # the last layer's cluster does not store `x` (the final norm recomputes it) and joins the
    # others' edit, whose kernel writes it.
    path = tmp_path / "gpt.py"
    path.write_text((Path(__file__).parents[1] / "examples" / "gpt12.py").read_text())
    analysis = analyze_file(path, [InputSpec((1, 8), torch.int64)],
                            model_kwargs=dict(layers=2, hidden=32, heads=2, max_tokens=32))
    mappings = map_clusters(analysis)
    kernels = {c.index: generate(analysis, c) for c in analysis.clusters}
    verdicts = {c.index: (True, "verified") for c in analysis.clusters}
    p = plan_apply(analysis, mappings, path, kernels, verdicts)
    start = line_of(path, "x = x + self.attn(self.norm1(x))")
    residual = [m for m in mappings if (m.start, m.end) == (start, start + 1)]
    assert len(residual) == 2 and all(m.exact for m in residual), [m.reason for m in residual]
    assert residual[0].replacement.splitlines() == [
        "        x, fused = cluster2(x, self.attn(self.norm1(x)), self.norm2.weight, "
        "self.norm2.bias)",
        "        h = self.up(fused)"]
    assert {m.cluster_index for m in residual} <= set(p.clusters)
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert result.max_abs_err is not None
    text = path.read_text()
    assert "        h = self.up(fused)\n" in text and "self.norm2(x)" not in text
    kwargs = dict(layers=2, hidden=32, heads=2, max_tokens=32)
    before = type(load(backup_as_py(result.files[0].backup), "GPT12"))(**kwargs).to(DEVICE)
    after = type(load(path, "GPT12"))(**kwargs).to(DEVICE)
    after.load_state_dict(before.state_dict())
    ids = torch.randint(0, 128, (2, 8), device=DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(after(ids), before(ids), atol=1e-4, rtol=1e-3)


STATIC_HELPER = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @staticmethod
    def squash(h):
        return torch.tanh(h.mul(2.0)) + 1.0

    def forward(self, x):
        return self.squash(self.fc(x))
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_staticmethods_first_parameter_is_an_argument_not_self(tmp_path, capture):
    # Was: "`h.mul(...)` at line 13 is not `mul`": `h`, a staticmethod's first parameter,
    # was taken for the module itself (roberta's `input_ids.ne(padding_idx)` the same).
    path = tmp_path / "static_helper.py"
    path.write_text(STATIC_HELPER)
    analysis, (m,), p = plan(path, capture)
    assert m.quality == EXACT, m.reason
    assert m.replacement.strip() == "return cluster0(h)"
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert result.clusters == (0,)
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Net", torch.randn(3, 8))
