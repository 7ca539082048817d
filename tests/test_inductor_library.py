"""Clusters Inductor computes inside a library kernel, and a nested BatchNorm's grouping.

One real CPU compile (module-scoped, ~20 s) of a conv → BatchNorm → ReLU block and an
attention written out as matmul → scale → softmax → matmul, which Inductor's attention
pattern replaces with one ``_scaled_dot_product_flash_attention_for_cpu`` call. It is
matched against both of our capture frontends; the other verdicts are checked on captures
written out by hand, as Inductor makes them on a GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.inductor.capture import InductorCapture, InductorNode, LibraryCall, capture
from fusion_core.inductor.coverage import cluster_keys
from fusion_core.inductor.match import DIFFERENT, INSIDE, SAME, match
from fusion_core.inductor.rewrites import Rewrites
from fusion_core.ir.spelling import said, said_all
from fusion_core.pipeline import analyze

FILE = str(Path(__file__).resolve())
SHAPE = (2, 4, 8, 8)  # (batch, heads = channels, sequence, head dim) for the attention


class ConvBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class ConvAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = ConvBlock(SHAPE[1])  # nested: the BatchNorm's module is `block.bn`

    def forward(self, x):
        y = self.block(x)
        att = (y @ y.transpose(-2, -1)) * 0.125
        att = F.softmax(att, dim=-1)
        return att @ y


def _cluster(a, *ops: str):
    return next(c for c in a.clusters if c.ops == ops)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return ConvAttention().eval()


@pytest.fixture(scope="module")
def compiled(model):
    return capture(model, [torch.randn(SHAPE)])


@pytest.fixture(scope="module", params=["fx", "export"])
def analysis(request, model):
    return analyze(model, SHAPE, capture=request.param)


def test_a_nested_batch_norm_is_keyed_by_its_own_module(analysis):
    # FX tracing replaces BatchNorm's forward by F.batch_norm: inside the module's scope,
    # so its key is Inductor's (`block.bn`), not the enclosing block's.
    c = _cluster(analysis, "batch_norm", "relu")
    modules = {op: key[0] for key, op in cluster_keys(analysis, c).values()}
    assert modules == {"batch_norm": "block.bn", "relu": "block.act"}


def test_batch_norm_relu_is_the_same_group(analysis, compiled):
    a = match(analysis, compiled)
    v = a.clusters[_cluster(analysis, "batch_norm", "relu").index]
    assert v.verdict == SAME, v


def test_the_replaced_attention_block_is_inside_a_library_kernel(analysis, compiled):
    call = "_scaled_dot_product_flash_attention_for_cpu"
    a = match(analysis, compiled)
    c = _cluster(analysis, "mul", "softmax")
    v = a.clusters[c.index]
    assert v.verdict == INSIDE, v
    # Our ops as the user wrote them (`mul` (line 9)), not FX's node names (`mul_1`).
    assert v.detail == (f"Inductor's `{call}` computes {said_all(analysis.graph, c.nodes)} "
                        "(attention pattern replaced)")
    assert " (line " in v.detail and not any(f"{n} " in v.detail for n in c.nodes if "_" in n)
    assert call in v.kernels and c.index not in a.not_fused


def test_a_library_call_claims_only_what_it_was_lowered_from(compiled):
    # The attention call's origins also list the BatchNorm and ReLU producing its input;
    # the call keeps only its own node, and what the rewrite replaced.
    ops = {call.op: call for call in compiled.calls}
    attention = ops["_scaled_dot_product_flash_attention_for_cpu"]
    assert [n.op for n in attention.nodes] == ["scaled_dot_product_flash_attention_for_cpu"]
    assert {n.op for n in attention.replaced} >= {"bmm", "mul", "softmax"}
    assert not {"batch_norm", "relu"} & {n.op for n in attention.computes}
    # The pattern's name comes with Inductor's entries in torch 2.13 (2.11's carry none).
    named = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)
    assert attention.pattern.startswith("_sfdp_pattern") if named else attention.pattern == ""
    assert [n.op for n in ops["convolution"].nodes] == ["convolution"]
    assert not ops["convolution"].replaced


def _node(op: str, module: str, line: int) -> InductorNode:
    return InductorNode(op, op, module, FILE, line)


def _attention_capture(analysis, compiled, computes: tuple[str, ...]) -> InductorCapture:
    """The compile's kernels, with CUDA's efficient attention computing `computes` of our
    attention ops (mul, softmax) and a generated kernel the rest."""
    keys = {op: key for key, op in cluster_keys(analysis, _cluster(analysis, "mul",
                                                                   "softmax")).values()}
    call = LibraryCall("_scaled_dot_product_efficient_attention",
                       (InductorNode("sdpa", "scaled_dot_product_efficient_attention", "", None,
                                     None),),
                       tuple(_node(op, keys[op][0], keys[op][2]) for op in computes))
    rest = tuple(_node(op, keys[op][0], keys[op][2]) for op in keys if op not in computes)
    kernels = compiled.kernels
    if rest:
        kernels += (dataclasses.replace(kernels[0], name="triton_poi_fused_mul_9",
                                        nodes=rest),)
    return dataclasses.replace(compiled, kernels=kernels, calls=(call,))


def test_efficient_attention_on_a_gpu_is_named(analysis, compiled):
    a = match(analysis, _attention_capture(analysis, compiled, ("mul", "softmax")))
    v = a.clusters[_cluster(analysis, "mul", "softmax").index]
    assert v.verdict == INSIDE
    assert "`_scaled_dot_product_efficient_attention` computes" in v.detail


def test_a_cluster_partly_inside_a_library_kernel_is_a_different_grouping(analysis,
                                                                           compiled):
    a = match(analysis, _attention_capture(analysis, compiled, ("softmax",)))
    v = a.clusters[_cluster(analysis, "mul", "softmax").index]
    assert v.verdict == DIFFERENT
    mul, softmax = (said(analysis.graph, n) for n in _cluster(analysis, "mul", "softmax").nodes)
    assert v.detail == (f"triton_poi_fused_mul_9 computes {mul}; Inductor's "
                        f"`_scaled_dot_product_efficient_attention` computes {softmax} "
                        "(attention pattern replaced)")


def test_the_verdict_fits_the_json_schema(analysis, compiled):
    import json

    from fusion_core.inductor.match import to_dict
    from fusion_core.report.json_report import schema, to_document

    doc = json.loads(json.dumps(to_document(analysis, {"inductor": to_dict(
        match(analysis, compiled))})))
    assert INSIDE in {v["verdict"] for v in doc["inductor"]["cluster_verdicts"]}
    pytest.importorskip("jsonschema").validate(doc, schema())


def test_rewrites_of_rewrites_stand_for_the_user_nodes():
    log = Rewrites()
    log.add(["first"], ["mul", "softmax"], "p1")
    log.add(["second", "view"], ["first", "bmm"], "p2")
    assert log.sources("second") == ("mul", "softmax", "bmm")
    assert log.sources("view") == log.sources("second") and log.pattern["second"] == "p2"
    assert log.sources("mul") == ()


def test_the_verdict_projects_conv_block_is_the_same_group_as_inductors(tmp_path):
    """The plugin tests' conv → BatchNorm → ReLU(inplace) → squeeze-excite block, through the
    CLI: its two main clusters are the groups Inductor makes (the BatchNorm keeps `block.bn`)."""
    from click.testing import CliRunner
    from verdict_project import BLOCKS

    from fusion_core.cli import cli

    (tmp_path / "blocks.py").write_text(BLOCKS)
    result = CliRunner().invoke(cli, ["--model", str(tmp_path / "blocks.py"), "--model-class",
                                      "Conv", "--input-shape", "2,16,8,8", "--vs-inductor",
                                      "--no-timing"])
    assert result.exit_code == 0, result.output
    # On a GPU the convolutions' biases are split off, so their adds give a third cluster (a
    # lone `add → relu` between the two); every cluster is still one of Inductor's groups.
    section = result.output.split("Inductor (torch.compile):")[1].split("\n\n")[0]
    verdicts = [line.split(":")[1].strip() for line in section.splitlines()
                if line.startswith("cluster ")]
    assert len(verdicts) >= 2 and set(verdicts) == {"same group"}, result.output
