"""Several reductions over the same rows in one kernel: found, lowered, verified."""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from codegen_harness import Lambda, check_model

from fusion_core.pipeline import analyze

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

SEVERAL = {
    # two LayerNorms of one input (parallel attention/MLP norms)
    "two norms": (lambda m, x: (lambda h: (F.layer_norm(h, (32,)),
                                           F.layer_norm(h, (32,), eps=1e-3)))(x * 2.0), 2),
    # mean, then the variance around it, written out
    "mean and variance": (lambda m, x: (x - x.mean(-1, keepdim=True)) * torch.rsqrt(
        ((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + 1e-5), 1),
    # a reduction of another's per-element result
    "softmax then its sum": (lambda m, x: (lambda p: p * p.amax(-1, keepdim=True))(
        torch.softmax(x * 3.0, -1)), 1),
    # a reduction of another's per-row result, broadcast back
    "sum then layer_norm": (lambda m, x: F.layer_norm(x - x.sum(-1, keepdim=True), (32,)), 1),
}


@pytest.mark.parametrize("name", sorted(SEVERAL))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_several_reductions_share_one_kernel(tmp_path, name, dtype):
    fn, outputs = SEVERAL[name]
    checked = check_model(Lambda(fn, arity=1), (torch.randn(5, 32, dtype=dtype),), tmp_path)
    (cluster,) = [c for c in checked.analysis.clusters
                  if sum(op in ("layer_norm", "mean", "amax", "softmax", "sum")
                         for op in c.ops) >= 2]
    assert len(cluster.outputs) == outputs
    (kernel,) = [k for k in checked.kernels if k.cluster_index == cluster.index]
    assert kernel.skeleton == "reduction" and not kernel.looped


def test_example_that_normalizes_one_input_twice(tmp_path):
    from two_norms import TwoNorms

    torch.manual_seed(0)
    checked = check_model(TwoNorms(), (torch.randn(2, 8, 64), torch.randn(2, 8, 64)), tmp_path)
    norms = [c for c in checked.analysis.clusters if c.ops.count("layer_norm") == 2]
    # both normalized values; the residual sum is recomputed by the last adds' kernel
    assert len(norms) == 1 and len(norms[0].outputs) == 2, [
        c.ops for c in checked.analysis.clusters]


def test_rows_too_wide_for_one_block_keep_the_reductions_apart():
    """Several reductions need the row in one block: the dry run refuses wider rows, and
    each norm still fuses alone."""
    class Two(nn.Module):
        def forward(self, x):
            h = x * 2.0
            return F.layer_norm(h, (8192,)), F.layer_norm(h, (8192,), eps=1e-3)

    a = analyze(Two(), (2, 8192))
    assert all(c.ops.count("layer_norm") <= 1 for c in a.clusters)
    assert any(r.check == "lowering" and "whole row in one block" in r.reason
               for r in a.rejections)
