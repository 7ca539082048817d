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
            return F.layer_norm(h, (32768,)), F.layer_norm(h, (32768,), eps=1e-3)

    a = analyze(Two(), (2, 32768))
    assert all(c.ops.count("layer_norm") <= 1 for c in a.clusters)
    assert any(r.check == "lowering" and "whole row in one block" in r.reason
               for r in a.rejections)


class ParallelResidual(nn.Module):
    """GPT-NeoX's parallel residual: two LayerNorms of the same hidden states, which come
    from a GEMM (outside any group), feed the attention and MLP branches side by side."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d, eps=1e-3)
        self.attn, self.mlp = nn.Linear(d, d), nn.Linear(d, d)
        with torch.no_grad():  # affine parameters that are not the identity
            for ln in (self.ln1, self.ln2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        h = self.proj(x)
        return h + self.attn(self.ln1(h)) + self.mlp(self.ln2(h))


def test_sibling_norms_of_one_input_share_one_kernel_that_reads_the_row_once(tmp_path):
    torch.manual_seed(0)
    checked = check_model(ParallelResidual(), (torch.randn(2, 5, 32),), tmp_path)
    (norms,) = [c for c in checked.analysis.clusters if "layer_norm" in c.ops]
    assert norms.ops == ("layer_norm", "layer_norm") and len(norms.outputs) == 2
    assert norms.inputs[0] == "proj"  # the GEMM's output, read by one kernel for both norms
    # one read of the row instead of two: the fused kernel moves fewer bytes than eager
    assert norms.traffic.fused_bytes < norms.traffic.unfused_bytes
    (kernel,) = [k for k in checked.kernels if k.cluster_index == norms.index]
    assert kernel.skeleton == "reduction" and not kernel.looped
    assert checked.max_err < 1e-4


def test_sibling_norms_over_rows_too_wide_for_one_block_are_rejected_by_name():
    class Wide(nn.Module):
        def forward(self, x):  # the model's input, read by both norms
            return F.layer_norm(x, (32768,)), F.layer_norm(x, (32768,), eps=1e-3)

    a = analyze(Wide(), (2, 32768))
    assert all(c.ops.count("layer_norm") <= 1 for c in a.clusters)
    (rejection,) = [r for r in a.rejections if r.ops == ("layer_norm", "layer_norm")]
    assert rejection.check == "lowering" and "whole row in one block" in rejection.reason
