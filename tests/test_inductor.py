"""Inductor agreement: what torch.compile fused on CPU, matched against our clusters.

One real compile of ExampleNet (module-scoped, ~20 s); the matcher's other verdicts are
checked on hand-built captures so they need no compile."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fusion_core.agreement import agreement
from fusion_core.inductor.capture import (
    InductorCapture,
    InductorKernel,
    InductorNode,
    module_path,
    names_from_code,
    ops_from_name,
)
from fusion_core.inductor.match import match, to_dict
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "example_net.py"


@pytest.fixture(scope="module")
def example():
    return analyze_file(EXAMPLE, [InputSpec((64, 1024))])


@pytest.fixture(scope="module")
def compiled(example):
    return agreement(example)


def test_example_net_kernels_all_match_exactly(compiled):
    a = compiled
    assert a.method == "define_kernel"  # the structured path worked on this torch
    assert len(a.kernels) == 3
    assert [k.status for k in a.kernels] == ["exact"] * 3
    assert [k.clusters for k in a.kernels] == [(0,), (1,), (2,)]
    assert a.kernels[0].lines == (15, 16, 17) and a.kernels[0].ops == ("add", "mul", "relu")
    assert [v.verdict for v in a.clusters] == ["same group"] * 3
    assert a.matched_fraction == 1.0 and a.not_fused == ()
    assert to_dict(a)["exact"] == 3


def test_agreement_json_fits_the_schema(example, compiled):
    import json

    from fusion_core.report.json_report import schema, to_document

    doc = json.loads(json.dumps(to_document(example, {"inductor": to_dict(compiled)})))
    assert doc["inductor"]["cluster_verdicts"][2]["verdict"] == "same group"
    pytest.importorskip("jsonschema").validate(doc, schema())


def test_kernel_names_parse():
    assert ops_from_name("cpp_fused_add_mul_relu_0") == ("add", "mul", "relu")
    assert ops_from_name("triton_per_fused__softmax_masked_fill_mul_3") == (
        "softmax", "masked_fill", "mul")
    assert ops_from_name("cpp_fused_add_native_layer_norm_7") == ("add", "layer_norm")
    code = ["cpp_fused_b_1 = async_compile.cpp(...)\ncpp_fused_a_0 = x\ncpp_fused_b_1(...)"]
    assert names_from_code(code) == ["cpp_fused_a_0", "cpp_fused_b_1"]


def test_module_paths_normalize():
    assert module_path({"a": ("L['self'].blocks.0.attn", object)}) == "blocks.0.attn"
    assert module_path({"a": ("L['self'].blocks[1].mlp", object)}) == "blocks.1.mlp"
    assert module_path({"blocks.0": ("blocks.0", object)}) == "blocks.0"
    assert module_path(None) == ""
    spelled = "L['self'].__dict__['_modules']['blocks'][0].attn"
    assert module_path({"a": (spelled, object)}) == "blocks.0.attn"
    wrapped = "L['args'][0].layers[0].input_layernorm"  # forward behind a decorator
    assert module_path({"a": (wrapped, object)}) == "layers.0.input_layernorm"


def _node(name, op, line):
    return InductorNode(name, op, "", str(EXAMPLE), line)


def _capture(*kernels):
    return InductorCapture(tuple(kernels), "define_kernel", (), torch.__version__)


def test_different_grouping_and_missed(example):
    # Inductor puts x*2 alone, relu+add+gelu together, and fuses cluster 2's lines as ours.
    cap = _capture(
        InductorKernel("k_mul_0", (_node("mul", "mul", 15),)),
        InductorKernel("k_big_1", (_node("relu", "relu", 16), _node("add", "add", 17),
                                   _node("gelu", "gelu", 20))),
        InductorKernel("k_sig_2", (_node("sigmoid", "sigmoid", 21), _node("mul_1", "mul", 22))),
        InductorKernel("k_soft_3", (_node("tanh", "tanh", 25), _node("mul_2", "mul", 26),
                                    _node("softmax", "softmax", 27))),
        InductorKernel("k_other_4", (_node("exp", "exp", 99), _node("neg", "neg", 98))),
        InductorKernel("k_copy_5", (_node("clone", "clone", 19),)),
    )
    a = match(example, cap)
    v = {x.cluster: x for x in a.clusters}
    assert v[0].verdict == "different grouping" and "splits it over 2 kernels" in v[0].detail
    assert v[1].verdict == "different grouping"
    assert v[2].verdict == "same group"
    status = {k.kernel: k.status for k in a.kernels}
    assert status == {"k_big_1": "partial", "k_sig_2": "partial", "k_soft_3": "exact",
                      "k_other_4": "missed"}
    assert a.layout_kernels == 1  # the clone kernel is not counted
    assert a.single_op_kernels == 1  # nor x*2 alone: it fuses nothing
    assert a.matched_fraction == pytest.approx(3 / 4)


def test_not_fused_by_inductor(example):
    cap = _capture(InductorKernel("k0", (_node("mul", "mul", 15),)),
                   InductorKernel("k1", (_node("relu", "relu", 16),)),
                   InductorKernel("k2", (_node("add", "add", 17),)))
    v = match(example, cap).clusters
    assert v[0].verdict == "not fused by Inductor" and "its own kernel" in v[0].detail
    assert v[1].verdict == "not fused by Inductor" and v[1].kernels == ()


def test_unkeyed_pattern_nodes_explain_our_ops(example):
    # Inductor's pattern rewrite drops the stack trace of the scale (line 26).
    cap = _capture(InductorKernel("k", (_node("tanh", "tanh", 25), _node("m", "mul", None),
                                        _node("s", "softmax", 27))))
    a = match(example, cap)
    assert a.clusters[2].verdict == "same group" and a.kernels[0].status == "exact"


def test_recomputed_values_belong_to_the_first_kernel(example):
    # k1 recomputes cluster 0's add (line 17) inside its own work on lines 20-22.
    cap = _capture(
        InductorKernel("k0", (_node("mul", "mul", 15), _node("relu", "relu", 16),
                              _node("add", "add", 17))),
        InductorKernel("k1", (_node("add", "add", 17), _node("gelu", "gelu", 20),
                              _node("sig", "sigmoid", 21), _node("mul_1", "mul", 22))))
    a = match(example, cap)
    assert [k.status for k in a.kernels] == ["exact", "exact"]


def test_names_fallback(example):
    cap = InductorCapture((InductorKernel("cpp_fused_add_mul_relu_0", (), ("add", "mul", "relu")),
                           InductorKernel("cpp_fused_exp_neg_1", (), ("exp", "neg"))),
                          "names", (), "x")
    a = match(example, cap)
    assert a.clusters[0].verdict == "same group"
    assert [k.status for k in a.kernels] == ["exact", "missed"]


def test_missing_module_on_one_side_still_matches_the_line(example):
    # Inductor knows the module (`scale`) where our rewritten node has none.
    def mod(name, op, line, module):
        return InductorNode(name, op, module, str(EXAMPLE), line)

    cap = _capture(InductorKernel("k", (mod("mul", "mul", 15, "scale"),
                                        mod("relu", "relu", 16, ""), mod("add", "add", 17, ""))))
    a = match(example, cap)
    assert a.clusters[0].verdict == "same group" and a.kernels[0].status == "exact"



def test_top_level_code_does_not_match_a_module_on_the_same_line():
    from fusion_core.inductor.kernel_graph import compatible

    f = str(EXAMPLE)
    # Inductor's "" is the model's own forward, not our LayerNorm module on that line.
    assert not compatible(("norm2", f, 36), ("", f, 36))
    # Our node without a module (rewritten by a capture pass) matches by file and line.
    assert compatible(("", f, 30), ("bn2", f, 30))
    assert not compatible(("blocks.0", f, 61), ("blocks.1", f, 61))
    assert not compatible(("", f, 30), ("bn2", f, 31))
