"""Hugging Face transformers models (small configs, random weights) that FX symbolic
tracing cannot follow, analyzed end to end through the export frontend. Skipped when
transformers is not installed."""

from __future__ import annotations

import inspect
import re
import warnings
from unittest import mock

import pytest
import torch
from vision_libs import import_transformers

from fusion_core.codegen import generate
from fusion_core.errors import CaptureError
from fusion_core.ir.graph import OpKind
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze
from fusion_core.sourcemap import frames, map_clusters
from fusion_core.sourcemap.apply_plan import plan_apply

T = import_transformers()
if T is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

SMALL = dict(vocab_size=128, max_position_embeddings=64)
MODELS = {
    "gpt2": lambda: T.GPT2Model(T.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, use_cache=False,
        bos_token_id=0, eos_token_id=0)),
    "llama": lambda: T.LlamaModel(T.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, use_cache=False, **SMALL)),
    "bert": lambda: T.BertModel(T.BertConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        **SMALL)),
}
# The reduction every model normalizes with, and how many clusters hold one.
NORMS = {"gpt2": ("layer_norm", 5), "llama": ("mean", 5), "bert": ("layer_norm", 5)}
TOKENS = InputSpec((2, 16), torch.int64)


@pytest.fixture(scope="module")
def analyses():
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, build in MODELS.items():
            torch.manual_seed(0)
            out[name] = analyze(build(), TOKENS)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_fx_cannot_trace_it(name):
    torch.manual_seed(0)
    with pytest.raises(CaptureError, match="cannot trace"):
        analyze(MODELS[name](), TOKENS, capture="fx")


@pytest.mark.parametrize("name", MODELS)
def test_analyzed_through_export_end_to_end(analyses, name):
    a = analyses[name]
    assert a.graph.frontend == "export"
    op, count = NORMS[name]
    norms = [c for c in a.clusters if op in c.ops]
    assert len(norms) == count  # every normalization fused with its neighbours
    assert all(c.traffic.fused_bytes < c.traffic.unfused_bytes for c in norms)
    # Parameters are constants, not inputs; the one input is the token ids.
    assert [n.meta.dtype for n in a.graph.inputs] == [torch.int64]
    assert any(n.kind is OpKind.CONSTANT for n in a.graph.nodes)
    # Source lines come from stack traces: every cluster points into the model code.
    assert all(c.lines is not None and "transformers" in c.lines.file for c in a.clusters)


def test_gpt2_gelu_and_residual_layer_norms(analyses):
    a = analyses["gpt2"]
    gelu = [c for c in a.clusters if "tanh" in c.ops]  # GPT-2's tanh GELU, written out
    assert len(gelu) == 2 and all(c.category == "elementwise-dag" for c in gelu)
    assert sum(c.category == "multi-output" for c in a.clusters) >= 3


def test_llama_rms_norm_and_gated_mlp(analyses):
    ops = [c.ops for c in analyses["llama"].clusters]
    assert ops.count(("silu", "mul")) == 2
    assert sum(o.count("rsqrt") == 1 and o.count("mean") == 1 for o in ops) == 5


def test_the_exported_graph_runs(analyses):
    a = analyses["bert"]
    ids = torch.randint(0, 128, TOKENS.shape)
    ref = a.module(ids).last_hidden_state
    out = a.graph_module(ids)
    got = out["last_hidden_state"] if isinstance(out, dict) else getattr(
        out, "last_hidden_state", out[0])
    torch.testing.assert_close(got, ref)


def _plan_if_yours(a):
    """The `--apply` plan were the model's file the user's (as benchmarks/model_zoo.py counts
    its "if yours"): every cluster taken as verified."""
    kernels = {c.index: generate(a, c) for c in a.clusters}
    verdicts = {c.index: (True, "verified") for c in a.clusters}
    with mock.patch("fusion_core.sourcemap.span.is_library_file", return_value=False):
        mappings = map_clusters(a)
        return mappings, plan_apply(a, mappings, inspect.getsourcefile(type(a.module)),
                                    kernels, verdicts)


def test_llama_is_mapped_through_transformers_wrappers_and_keeps_its_edits(analyses):
    """Decoder layers run through GradientCheckpointingLayer's wrapper, the masks through
    `deprecate_kwarg`'s, the rotary forward through `dynamic_rope_update`'s: the source map
    looks through those frames to the function called, and edits no fewer clusters."""
    a = analyses["llama"]
    mappings, plan = _plan_if_yours(a)
    reasons = [m.reason for m in mappings if m.reason]
    wrappers = ("forward_with_checkpointing", "wrapped_func", "<locals>.wrapper", "__call__")
    assert not [r for r in reasons if any(w in r for w in wrappers)]
    # Nor a wrapper's line: a call through one is said at the line that made it.
    wrapper_lines = ("return func(*args, **kwargs)", "return forward(", "return fn(")
    assert not [r for r in reasons if any(w in r for w in wrapper_lines)]
    # Two layers' calls joined by one cluster: the loop's call of each layer, by its variable.
    site = r"at line (\d+) \(`hidden_states = decoder_layer\(\.\.\.\)`\) on `decoder_layer`"
    joins = [j for r in reasons if (j := re.search(
        rf"of the call {site} \(`self\.layers\[0\]`\) with .* of another call {site} "
        r"\(`self\.layers\[1\]`\) of `LlamaDecoderLayer\.forward`", r))]
    assert joins and joins[0][1] == joins[0][2], reasons
    # Messages name the callee: the layer call left half fused, the rotary forward's tuple.
    # The loop variable that called the layer, on the layer the cluster ran in: the last
    # one's residual add fuses with the final norm (it said `self.layers[0]`).
    assert any("(`LlamaDecoderLayer.forward` on `decoder_layer` (`self.layers[1]`)) is in the "
               "cluster" in r for r in reasons)
    assert any("(`LlamaRotaryEmbedding.forward`) returns several values" in r for r in reasons)
    with mock.patch.object(frames, "is_wrapper", return_value=False):
        _, without = _plan_if_yours(a)
    assert set(without.clusters) <= set(plan.clusters) and plan.clusters


@pytest.mark.parametrize("name", MODELS)
def test_every_kernel_verifies_and_the_patched_model_matches(analyses, name):
    # The product's claim on models nobody here wrote: each cluster's kernel matches its
    # eager ops (under the interpreter here), and the model with all of them patched in
    # matches too. GPT-2's `position_ids[:, :1] - 1` once failed it (a generated range
    # expanded, then narrowed to one column).
    from fusion_core.validate import validate

    report = validate(analyses[name], timing=False)  # numerics: speed is not judged here
    failed = [(r.cluster, [g.detail for g in r.gates if not g.passed])
              for r in report.results if not r.usable]
    assert not failed
    assert report.model.passed
