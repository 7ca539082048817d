"""The comparison with Inductor's CPU backend names why a kernel or a grouping differs where
Inductor fuses into a concatenation or a convolution call, and groups sibling norms as it does.

Real CPU compiles (module-scoped, ~20 s each) of ``inductor_cat_model.py``: CatNet in the
default mode and frozen (``freezing=True``, where oneDNN's patterns fold an activation into
the convolution call), GPT-NeoX's parallel-residual norms in the default mode."""

from __future__ import annotations

import re

import pytest
import torch
import torch._inductor.config as inductor_config
from inductor_cat_model import CatNet, NeoXNorms

from fusion_core.inductor.capture import capture
from fusion_core.inductor.explain import INTO_CAT, NO_CAT_FUSION
from fusion_core.inductor.match import DIFFERENT, SAME, match, missed_lines
from fusion_core.pipeline import analyze

SHAPE = (2, 4, 8, 8)
EXTERN_EPILOGUE = "fused into the convolution call: an extern kernel's epilogue"


def _compare(model, shape, freezing: bool = False):
    torch.manual_seed(0)
    model = model.eval()
    analysis = analyze(model, shape, capture="fx")
    with inductor_config.patch(freezing=freezing):
        cap = capture(model, [torch.randn(shape)])
    return analysis, cap, match(analysis, cap)


@pytest.fixture(scope="module")
def default():
    return _compare(CatNet(), SHAPE)


@pytest.fixture(scope="module")
def frozen():
    return _compare(CatNet(), SHAPE, freezing=True)


def _relu_bn_cluster(analysis):
    (c,) = [c for c in analysis.clusters if c.ops == ("relu", "batch_norm")]
    return c


def test_the_capture_records_which_kernels_write_into_a_cat(default):
    _, cap, _ = default
    into = {k.name: {n.line for n in k.into_cat} for k in cap.kernels if k.into_cat}
    # the BatchNorms feed the first cat, the ReLUs the second: two different lines
    assert len(set().union(*into.values())) == 2, into
    bn = next(k for k in cap.kernels if {"batch_norm"} <= set(k.ops))
    assert bn.name in into


def test_activations_written_into_a_cat_are_a_named_miss(default):
    analysis, _, a = default
    (miss,) = [k for k in a.kernels if k.status == "missed"]
    assert miss.ops == ("relu",) and len(miss.lines) == 2
    assert miss.reason.startswith("written into `cat`'s output (line ")
    assert INTO_CAT.split(": ")[1] in miss.reason and NO_CAT_FUSION in miss.reason
    assert any(NO_CAT_FUSION in str(line) for line in missed_lines(a))


def test_a_batch_norm_written_into_a_cat_is_named_in_the_cluster_verdict(default):
    analysis, _, a = default
    v = a.clusters[_relu_bn_cluster(analysis).index]
    assert v.verdict == DIFFERENT
    # Our op as the user's source names it (the module call), not FX's `batch_norm_3`.
    assert re.search(r"`self\.bn2` \(line \d+\) written into `cat`'s output \(line \d+\)",
                     v.detail), v.detail
    assert "batch_norm_3" not in v.detail
    assert v.detail.endswith(INTO_CAT.split(": ")[1])


def test_a_lone_activation_folded_into_the_convolution_call_is_named(frozen):
    analysis, cap, a = frozen
    conv = [
        c
        for c in cap.calls
        if c.op == "mkldnn._convolution_pointwise" and any(n.op == "relu" for n in c.epilogue)
    ]
    assert conv, cap.calls
    v = a.clusters[_relu_bn_cluster(analysis).index]
    assert re.search(rf"`mkldnn._convolution_pointwise` computes `relu` \(line \d+\) "
                     rf"\({re.escape(EXTERN_EPILOGUE)}\)", v.detail), v.detail
    # the kernel preparing the call's input and weight layouts does not claim the ReLU
    assert not [k for k in cap.kernels if "relu" in {n.op for n in k.compute_nodes}]


def test_sibling_norms_are_one_group_as_in_inductor():
    analysis, cap, a = _compare(NeoXNorms(), (2, 4, 16))
    (norms,) = [c for c in analysis.clusters if "layer_norm" in c.ops]
    assert norms.ops == ("layer_norm", "layer_norm")
    assert a.clusters[norms.index].verdict == SAME
    kernel = next(k for k in a.kernels if norms.index in k.clusters)
    assert kernel.status == "exact" and len(kernel.lines) == 2
