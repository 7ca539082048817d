"""The model panel in examples/: each file loads as one root model with no arguments, says
its input in the docstring, gives the same clusters on both frontends, and the fusions a
compiler would make (RMSNorm, rotary, gated MLP, BatchNorm+ReLU+residual, LayerNorms)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from test_capture_export import summary

from fusion_core.ir.shapes import InputSpec
from fusion_core.load import import_model_file, load_model
from fusion_core.pipeline import analyze

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PANEL = ("llama_block.py", "resnet_block.py", "mixer_block.py")


def documented_input(path: Path) -> InputSpec:
    """The `--input-shape A,B --dtype D` example the file's docstring gives."""
    doc = import_model_file(path).__doc__ or ""
    shape = re.search(r"--input-shape ([\d,]+)", doc)
    dtype = re.search(r"--dtype (\w+)", doc)
    assert shape and dtype, f"{path.name}: docstring names no input"
    return InputSpec.parse(shape.group(1), dtype.group(1))


@pytest.fixture(scope="module")
def analyses():
    out = {}
    for name in PANEL:
        model = load_model(EXAMPLES / name)  # one root class, built with no arguments
        spec = documented_input(EXAMPLES / name)
        out[name] = {cap: analyze(model, spec, capture=cap) for cap in ("fx", "export")}
    return out


@pytest.mark.parametrize("name", PANEL)
def test_panel_model_same_clusters_on_both_frontends(analyses, name):
    fx_a, ex_a = analyses[name]["fx"], analyses[name]["export"]
    assert fx_a.clusters, name
    assert _as_fx_names(summary(ex_a)) == summary(fx_a)


def _as_fx_names(rows: list) -> list:
    """Export's `aten.slice` of a view the kernel reads is FX's `getitem` (`x[..., h:]`)."""
    return [(tuple("getitem" if op == "slice" else op for op in row[0]), *row[1:])
            for row in rows]


@pytest.mark.parametrize("name", PANEL)
def test_panel_graph_module_still_computes_the_model(analyses, name):
    a = analyses[name]["fx"]
    x = torch.randn(a.inputs[0].shape)
    torch.testing.assert_close(a.graph_module(x), a.module(x))


def test_llama_block_fusions(analyses):
    ops = [c.ops for c in analyses["llama_block.py"]["fx"].clusters]
    rms = ("pow", "mean", "add", "rsqrt", "mul", "mul")
    assert ops[0] == rms  # the first RMSNorm reads the block input
    # rotary on q and on k, `rotate_half`'s negation and cat included (read through pieces),
    # its slices of q read in the kernel (q is read anyway)
    assert ops.count(("mul", "getitem", "neg", "getitem", "cat", "mul", "add")) == 2
    assert ("mul", "masked_fill", "softmax") in ops
    assert ("add", *rms) in ops  # residual add → RMSNorm
    assert ("silu", "mul") in ops
    # The last residual recomputes `h = x + attn` rather than have the RMSNorm store it
    # (as Inductor does): nothing is multi-output.
    assert ops[-1] == ("add", "add")
    g = analyses["llama_block.py"]["fx"].graph
    last = analyses["llama_block.py"]["fx"].clusters[-1]
    assert g[last.nodes[0]].copy_of
    assert all(c.category != "multi-output" for c in analyses["llama_block.py"]["fx"].clusters)


def test_resnet_block_fusions(analyses):
    a = analyses["resnet_block.py"]["fx"]
    assert [c.ops for c in a.clusters] == [("batch_norm", "relu"),
                                          ("batch_norm", "add", "relu")]
    assert all(c.category == "elementwise-chain" for c in a.clusters)


def test_mixer_block_fusions(analyses):
    a = analyses["mixer_block.py"]["fx"]
    # The token MLP's fc1 reads a transposed activation: eager adds its bias in a separate
    # pass, which fuses into the GELU; the first residual add feeds norm2 and is
    # recomputed by the last residual add (after the channel MLP's eval-mode dropout).
    assert [(c.ops, c.category) for c in a.clusters] == [
        (("add", "gelu"), "elementwise-chain"),
        (("add", "layer_norm"), "single-reduction-boundary"),
        (("dropout", "add", "add"), "elementwise-dag")]


def test_recomputing_cluster_explains_its_negative_saving(analyses):
    """The last residual re-reads `x` and `attn` instead of `h`: alone it moves more than its
    eager op, and the report says where the avoided store is credited."""
    from fusion_core.report.console import recompute_lines

    a = analyses["llama_block.py"]["fx"]
    last = a.clusters[-1]
    assert last.traffic.saved_bytes < 0
    lines = recompute_lines(a)
    assert lines[-1].strip().startswith(f"Cluster {last.index} alone shows "
                                        f"{last.traffic.saved_fraction:.0%}")
    assert "credited to cluster 4" in lines[-1]
    # microgpt's recomputing clusters still save on their own: no such note.
    gpt = analyze(load_model(EXAMPLES / "microgpt.py"), InputSpec((2, 64), torch.int64))
    assert [c for c in gpt.clusters if c.recomputes and c.traffic.saved_bytes > 0]
    assert all("alone shows" not in line for line in recompute_lines(gpt))
