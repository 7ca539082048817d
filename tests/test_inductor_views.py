"""Our views are index math, in Inductor's kernels as in ours: no kernel has to compute them.

A permute on a line of its own has no compute node in any Inductor kernel, and the match
used to call the cluster around it a "different grouping" (`not in any Inductor kernel:
`permute``) and the kernel a partial match, though Inductor fused exactly our ops. Two real
CPU compiles; a compute op Inductor really leaves out is still named, on a hand-built capture.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from fusion_core.agreement import agreement
from fusion_core.inductor.capture import InductorCapture, InductorKernel, InductorNode, capture
from fusion_core.inductor.match import DIFFERENT, SAME, match, to_dict
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze, analyze_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class PermuteChain(nn.Module):
    def forward(self, x):
        h = x * 2.0
        h = h.permute(0, 2, 1)
        h = torch.relu(h)
        h = h.unsqueeze(1)
        return h + 1.0


@pytest.fixture(scope="module")
def analysis():
    a = analyze(PermuteChain(), torch.randn(4, 16, 32), capture="fx")
    assert [c.ops for c in a.clusters] == [("mul", "permute", "relu", "unsqueeze", "add")]
    return a


def _lines(analysis) -> dict[str, int]:
    return {n.op: n.source.line for n in analysis.graph.nodes if n.source is not None}


def _kernel(analysis, *ops: str) -> InductorCapture:
    line, file = _lines(analysis), analysis.graph["mul"].source.file
    nodes = tuple(InductorNode(op, op, "", file, line[op]) for op in ops)
    return InductorCapture((InductorKernel("cpp_fused_k_0", nodes),), "define_kernel", (),
                           torch.__version__)


def test_a_cluster_with_views_that_inductor_fuses_whole_is_the_same_group(analysis):
    a = match(analysis, capture(analysis.module, [torch.randn(4, 16, 32)]))
    (v,) = a.clusters
    assert v.verdict == SAME, str(v)
    assert [k.status for k in a.kernels] == ["exact"]
    assert to_dict(a)["exact"] == 1 and to_dict(a)["partial"] == 0


def test_views_on_lines_of_their_own_need_no_kernel(analysis):
    # Inductor's kernel computes mul, relu and add; nothing on the permute's or unsqueeze's line
    a = match(analysis, _kernel(analysis, "mul", "relu", "add"))
    assert str(a.clusters[0]) == "same group: cpp_fused_k_0"
    assert a.count("exact") == 1


def test_convnexts_permute_into_its_layer_norm_is_the_kernel_inductor_writes():
    # `self.dwconv(x).permute(0, 2, 3, 1)` then LayerNorm: Inductor's one kernel reads through
    # the permute, as ours does. Was "not fused by Inductor: each op is its own kernel".
    a = agreement(analyze_file(EXAMPLES / "convnext_block.py", [InputSpec((2, 32, 8, 8))]))
    assert [str(v).split(":")[0] for v in a.clusters] == [SAME, SAME]
    assert a.not_fused == ()


def test_a_compute_op_inductor_leaves_out_is_still_named(analysis):
    a = match(analysis, _kernel(analysis, "mul", "add"))
    (v,) = a.clusters
    assert v.verdict == DIFFERENT and a.count("partial") == 1
    line = _lines(analysis)
    # the kernel is named for what it does compute, not "Inductor fuses more"; no view named
    assert v.detail == (f"cpp_fused_k_0 computes `mul` (line {line['mul']}), `add` (line "
                        f"{line['add']}); not in any Inductor kernel: `relu` (line {line['relu']})")


class HeadsMerged(nn.Module):
    """Heads merged after a permute: eager copies for the reshape, Inductor's one kernel
    splits the flat index instead, as ours iterates over the merged dims split."""

    def forward(self, x, b):
        h = x * 2.0
        h = h.permute(0, 2, 1, 3)
        h = torch.relu(h)
        h = h.reshape(2, 4, 15)
        return h + b


def test_a_reshape_of_a_permuted_value_is_the_kernel_inductor_writes():
    xs = [torch.randn(2, 3, 4, 5), torch.randn(15)]
    a = analyze(HeadsMerged(), *xs, capture="fx")
    assert [c.ops for c in a.clusters] == [("mul", "permute", "relu", "reshape", "add")]
    m = match(a, capture(a.module, xs))
    assert [v.verdict for v in m.clusters] == [SAME], [str(v) for v in m.clusters]
    assert [k.status for k in m.kernels] == ["exact"]
