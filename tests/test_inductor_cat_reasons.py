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
from inductor_cat_model import CatNet, CatSum, NeoXNorms, NormCatRelu

from fusion_core.inductor.capture import capture
from fusion_core.inductor.match import SAME, match
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


def _cluster(analysis, ops):
    (c,) = [c for c in analysis.clusters if c.ops == ops]
    return c


def test_the_capture_records_which_kernels_write_into_a_cat(default):
    _, cap, _ = default
    into = {k.name: {n.line for n in k.into_cat} for k in cap.kernels if k.into_cat}
    # the BatchNorms feed the first cat, the ReLUs the second: two different lines
    assert len(set().union(*into.values())) == 2, into
    bn = next(k for k in cap.kernels if {"batch_norm"} <= set(k.ops))
    assert bn.name in into


def test_a_cat_a_sum_reads_is_one_kernel_as_in_inductor():
    # Inductor's sum kernel writes both activations into the cat's output and reduces it;
    # our cluster reads the cat through its pieces in the sum's kernel.
    analysis, _, a = _compare(CatSum(), SHAPE)
    assert [c.ops for c in analysis.clusters] == [("relu", "relu", "cat", "sum")]
    assert [v.verdict for v in a.clusters] == [SAME], [str(v) for v in a.clusters]
    assert not [k for k in a.kernels if k.status == "missed"]


def test_producers_written_into_a_cat_match_our_clusters_that_hold_the_cat(default):
    # Was: "`self.bn2` (line 23) written into `cat`'s output (line 24): Inductor fuses a
    # producer into a concatenation" and a missed ReLU kernel, while `torch.cat` was opaque.
    analysis, _, a = default
    for ops in (("batch_norm", "batch_norm", "cat", "mul"), ("relu", "relu", "cat")):
        v = a.clusters[_cluster(analysis, ops).index]
        assert v.verdict == SAME, v
    assert not [k for k in a.kernels if k.status == "missed"]


def test_a_lone_activation_folded_into_the_convolution_call_is_named(frozen):
    analysis, cap, a = frozen
    conv = [
        c
        for c in cap.calls
        if c.op == "mkldnn._convolution_pointwise" and any(n.op == "relu" for n in c.epilogue)
    ]
    assert conv, cap.calls
    v = a.clusters[_cluster(analysis, ("relu", "relu", "cat")).index]
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


def test_a_cat_a_pattern_rewrite_made_is_still_our_cat():
    # Was: "different grouping: Inductor fuses more: …; not in any Inductor kernel: `cat`":
    # the rewritten cat carries no line, so our `cat` found no kernel.
    analysis, _, a = _compare(NormCatRelu(), SHAPE)
    assert [c.ops for c in analysis.clusters] == [("batch_norm", "cat", "relu")]
    (v,) = a.clusters
    assert v.verdict == SAME, str(v)
