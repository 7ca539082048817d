"""Attention calls given a boolean mask read one additive mask made once after it
(``ir/sdpa_mask.py``): the conversion each call did inside itself fuses into the cluster that
builds the mask, and the graph still computes what the model does (on CPU every backend
converts with -inf, as the pass does)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.ir.sdpa_mask import ADDITIVE_MASK
from fusion_core.pipeline import analyze
from fusion_core.validate import validate


class TwoLayers(nn.Module):
    """Two attention calls reading one causal-and-padding mask built from the inputs."""

    def __init__(self, by_keyword: bool = False):
        super().__init__()
        self.by_keyword = by_keyword

    def forward(self, q, k, v, keep):
        n = q.shape[-2]
        causal = torch.ones((n, n), dtype=torch.bool, device=q.device).tril()
        mask = causal[None, None] & keep.bool()[:, None, None, :]
        for _ in range(2):
            if self.by_keyword:
                q = F.scaled_dot_product_attention(q, k, v, attn_mask=mask) + q
            else:
                q = F.scaled_dot_product_attention(q, k, v, mask) + q
        return q


def _inputs(dtype=torch.float32, keep=None):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 16).to(dtype) for _ in range(3))
    keep = torch.ones(2, 8, dtype=torch.int64) if keep is None else keep
    return q, k, v, keep


def _additive_nodes(analysis):
    return [n for n in analysis.graph_module.graph.nodes if ADDITIVE_MASK in n.meta]


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("by_keyword", [False, True], ids=["positional", "keyword"])
def test_calls_sharing_a_boolean_mask_read_one_additive_mask_fused_where_it_is_built(
        capture, by_keyword):
    analysis = analyze(TwoLayers(by_keyword), *_inputs(), capture=capture)
    (cast,) = _additive_nodes(analysis)  # one for both calls
    assert cast.meta["val"].dtype == torch.float32
    calls = [n for n in analysis.graph_module.graph.nodes
             if "scaled_dot_product_attention" in str(n.target)]
    assert len(calls) == 2 and all(cast in c.all_input_nodes for c in calls)
    assert cast.meta[ADDITIVE_MASK] == tuple(c.name for c in calls)
    assert not any(n.meta["val"].dtype == torch.bool for c in calls for n in c.all_input_nodes)
    (builder,) = [c for c in analysis.clusters if cast.name in c.nodes]
    assert {"bitwise_and", "where"} <= set(builder.ops), builder.chain


@pytest.mark.parametrize("keep", [None, torch.tensor([[1] * 8, [0, 0, 0] + [1] * 5])],
                         ids=["causal", "padded"])
def test_the_rewritten_graph_computes_what_the_model_does(keep):
    """Model numerics compares the patched graph with the model itself; with padding, rows
    whose every key is masked included (every CPU backend converts with -inf too)."""
    inputs = _inputs(keep=keep)
    analysis = analyze(TwoLayers(), *inputs)
    report = validate(analysis, timing=False)
    assert report.model.passed, report.model.detail
    mask = next(c for c in analysis.clusters if "where" in c.ops)
    assert report.result(mask.index).usable, report.result(mask.index).status


def test_a_16_bit_query_gets_a_mask_of_its_dtype_and_an_additive_mask_is_left_alone():
    class Additive(nn.Module):
        def forward(self, q, k, v, keep):
            bias = (keep[:, None, None, :] - 1).to(q.dtype) * 1e4
            return F.scaled_dot_product_attention(q, k, v, bias)

    half = analyze(TwoLayers(), *_inputs(torch.float16), device="cuda")
    assert [n.meta["val"].dtype for n in _additive_nodes(half)] == [torch.float16]
    assert not _additive_nodes(analyze(Additive(), *_inputs()))


MODEL_FILE = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class MaskedAttention(nn.Module):
    def forward(self, q, k, v, keep):
        n = q.shape[-2]
        causal = torch.ones((n, n), dtype=torch.bool, device=q.device).tril()
        mask = causal[None, None] & keep.bool()[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = F.scaled_dot_product_attention(y, k, v, attn_mask=mask)
        return torch.relu(y) * 2.0
'''


def _apply(path: Path, dtype: str):
    """`fusion-advisor --apply --yes` on the attention model file at `path` (q, k, v of
    `dtype`), kernels under its folder."""
    from click.testing import CliRunner

    from fusion_core.cli import cli

    shapes = ["--input-shape", "2,3,8,16"] * 3 + ["--input-shape", "2,8"]
    dtypes = ["--dtype", dtype] * 3 + ["--dtype", "int64"]
    return CliRunner().invoke(cli, ["--model", str(path), *shapes, *dtypes, "--out-dir",
                                    str(path.parent / "gen"), "--apply", "--yes"])

def test_apply_rewrites_the_line_making_the_mask_into_the_kernel_making_both(tmp_path):
    """--apply: the line building the boolean mask calls the kernel that builds it and
    converts it; both attention calls read the additive mask; the rewritten file computes
    what the original did (the CLI checks it before keeping the edit)."""
    path = tmp_path / "attn_model.py"
    path.write_text(MODEL_FILE)
    res = _apply(path, "float32")
    assert res.exit_code == 0, res.output
    assert "rewritten model matches the original" in res.output, res.output
    lines = path.read_text().splitlines()
    assert "        mask = cluster0(keep, causal[None, None])" in lines
    assert sum("attn_mask=mask" in ln for ln in lines) == 2


def _capture_converting_at_the_attention_call(analysis):
    """Inductor's capture of TwoLayers as a GPU makes it: the mask's ops and the conversion
    (on the attention call's line, decomposed from it) in one kernel."""
    from fusion_core.inductor.capture import InductorCapture, InductorKernel, InductorNode
    from fusion_core.inductor.coverage import cluster_keys

    cluster = next(c for c in analysis.clusters if "where" in c.ops)
    made = {n.name for n in _additive_nodes(analysis)}
    made |= {n.args[0].name for n in _additive_nodes(analysis)}
    mask_ops = [InductorNode(f"{op}_{i}", op, key[0], key[1], key[2]) for i, (name, (key, op))
                in enumerate(cluster_keys(analysis, cluster).items())
                if key is not None and name not in made]
    call = next(n for n in analysis.graph.nodes if "scaled_dot_product" in (n.target or ""))
    at_call = ("", call.source.file, call.source.line)
    conversion = (InductorNode("logical_not_8", "logical_not", *at_call),
                  InductorNode("where_9", "where", *at_call))
    kernel = InductorKernel("triton_poi_fused__scaled_dot_product_attention_bitwise_and_0",
                            (*mask_ops, *conversion))
    return InductorCapture((kernel,), "post_fusion", (), torch.__version__)


def test_against_inductor_the_conversion_on_the_attention_line_is_ours():
    """--vs-inductor: Inductor converts the mask on the attention call's line (decomposing
    the call) in the kernel building the mask; our `where → to` on the mask's line are that
    work, not ops Inductor adds: the same group."""
    from fusion_core.inductor.match import SAME, match

    analysis = analyze(TwoLayers(), *_inputs())
    cluster = next(c for c in analysis.clusters if "where" in c.ops)
    verdict = match(analysis, _capture_converting_at_the_attention_call(analysis)).clusters[
        cluster.index]
    assert verdict.verdict == SAME, verdict


def test_apply_keeps_the_mask_line_when_other_code_reads_the_boolean_mask(tmp_path):
    """A boolean mask something besides the attention calls reads (here a flip of it is
    returned) keeps its line: the edit would hand that reader the additive mask. The cluster
    stays a pointer and says why (a review found the edit offered, then refused by the
    rewritten model's check)."""
    path = tmp_path / "flipped.py"
    path.write_text(MODEL_FILE.replace(
        "        mask = causal[None, None] & keep.bool()[:, None, None, :]\n",
        "        mask = torch.flip(keep.bool()[:, None, None, :], [-1])\n").replace(
        "        return torch.relu(y) * 2.0\n",
        "        return torch.relu(y) * 2.0, torch.flip(mask, [-1])\n"))
    res = _apply(path, "float16")  # a float16 query: its cast makes the mask a cluster
    assert res.exit_code == 0, res.output
    assert ("`torch.flip(keep.bool()[:, None, None, :], [-1])` at line 10 makes a boolean mask "
            "that is also read by `torch.flip` (line 13): the edit would hand it the attention "
            "calls' additive mask instead") in " ".join(res.output.split()), res.output
    assert "mask = torch.flip(keep.bool()" in path.read_text()
    assert "mask = cluster" not in path.read_text()


def test_apply_keeps_the_mask_line_when_queries_of_two_dtypes_read_the_mask(tmp_path):
    """A mask read by a float16 and a float32 attention call gets one additive mask per
    dtype; one line cannot hand each call its own, and the reason says that, not that the
    other conversion's `where` (which the user never wrote) also reads the mask."""
    path = tmp_path / "two_dtypes.py"
    path.write_text(MODEL_FILE.replace(
        "        y = F.scaled_dot_product_attention(y, k, v, attn_mask=mask)\n",
        "        y = F.scaled_dot_product_attention(y.float(), k.float(), v.float(), "
        "attn_mask=mask)\n"))
    res = _apply(path, "float16")
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert ("makes a boolean mask attention calls read with queries of different dtypes "
            "(float16, float32): one line can hand them only one additive mask") in said, (
        res.output)
    assert "also read by" not in said, res.output
    assert "mask = cluster" not in path.read_text()
