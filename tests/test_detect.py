"""Fusion detection: components, greedy pruning, the diamond, categories, and the two
acceptance models (ExampleNet's three clusters, microgpt's attention softmax clusters)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from analysis_helpers import run

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze, analyze_file
from fusion_core.report.console import retried

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MiB = 2**20


class PruneAbsorbable(nn.Module):
    """The seed's example: relu feeds {mul, add} and a layer_norm (itself absorbable)."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        r = F.relu(x)
        y = r * 2.0 + 1.0
        return y, self.ln(r)


class PruneOpaque(nn.Module):
    """Same shape, but relu's other consumer is an opaque layer outside any group."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        r = F.relu(x)
        y = r * 2.0 + 1.0
        return y + self.proj(r)


def test_pruning_drops_relu_and_keeps_the_mul_add_tail():
    # relu's outside consumer re-enters the group, so storing relu cannot help.
    a = analyze(PruneOpaque(), (4, 8))
    assert len(a.clusters) == 1 and {"mul", "add"} <= set(a.clusters[0].ops)
    assert a.rejections[0].check == "fan-out"
    assert a.rejections[0].culprits == ("relu",)
    assert all("relu" not in c.nodes for c in a.clusters)


def test_absorbable_consumer_makes_one_multi_output_cluster():
    # One kernel writing both results moves less than dropping relu (issue 7).
    a = analyze(PruneAbsorbable(), (4, 8))
    assert [c.ops for c in a.clusters] == [("relu", "mul", "add", "layer_norm")]
    assert a.clusters[0].category == "multi-output"
    assert [a.graph[n].op for n in a.clusters[0].outputs] == ["add", "layer_norm"]
    assert a.rejections == ()


class TwoResiduals(nn.Module):
    """A ResNet's chain in small: the first block's last ReLU is read by the next block's
    layer and by its residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.relu(x * 2.0 + 1.0)
        return torch.relu(self.proj(h) * 3.0 + h)


def test_a_value_pruned_for_fan_out_ends_the_group_that_computes_it():
    # Both blocks in one group fail the fan-out check on the first ReLU; pruned, it ran
    # alone (read and written once more). The first block's group now ends with it.
    a = analyze(TwoResiduals(), (4, 8))
    assert [(r.check, r.culprits) for r in a.rejections] == [("fan-out", ("relu",))]
    assert [c.ops for c in a.clusters] == [("mul", "add", "relu"), ("mul", "add", "relu")]
    assert a.clusters[1].inputs[-1] in a.clusters[0].outputs  # the second reads it
    # the rejection's account of the search says where the pruned value went
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "h = torch.relu(x * 2.0 + 1.0)" in text)
    assert retried(a.graph, a.rejections[0], a.clusters).endswith(
        f"and retried; `relu` (line {line}) is in cluster 0")


class CatTwice(nn.Module):
    """`h` read through two index maps (both halves of the cat): the pipeline copies it
    into the norm's kernel (slice_recompute.py)."""

    def forward(self, x):
        h = torch.tanh(x * 2.0 + 1.0)
        return F.layer_norm(torch.cat([h, h], -1), (16,))


def test_a_pruned_value_the_recompute_plans_copy_is_left_to_them():
    # Found by review: given back to its producers' group before the plans ran, `tanh`
    # was stored and read back by a second kernel, where the plan makes one.
    a = analyze(CatTwice(), (4, 8))
    assert len(a.clusters) == 1 and {"cat", "layer_norm"} <= set(a.clusters[0].ops)


class NoopDropout(nn.Module):
    """An eval-mode dropout returns its input: alone it costs nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, x):
        h = torch.relu(x) * 2.0
        f = self.drop(h)
        return self.proj(f) * h, F.gelu(f * self.w)


def test_a_pruned_value_that_would_add_a_result_stays_alone():
    # Found by review: the dropout joined `relu → mul`, which then wrote both `mul` and
    # the dropout's identical values (384 B where 256 B were written).
    a = analyze(NoopDropout().eval(), (4, 8))
    assert [c.ops for c in a.clusters] == [("relu", "mul"), ("mul", "gelu")]


def test_pruning_with_opaque_consumer_keeps_the_whole_tail():
    # After relu is dropped, mul -> add -> add (with self.proj) is one legal chain.
    a = analyze(PruneOpaque(), (4, 8))
    assert [c.ops for c in a.clusters] == [("mul", "add", "add")]


def test_diamond_is_one_cluster_not_fan_out():
    a = run(lambda x: x * 2.0 + x)
    assert [c.ops for c in a.clusters] == [("mul", "add")]
    assert a.rejections == ()
    assert a.clusters[0].inputs == ("x",)  # read once


def test_inner_diamond_is_an_elementwise_dag():
    a = run(lambda x: (lambda e: e * 2.0 + e)(torch.exp(x)))
    assert [c.ops for c in a.clusters] == [("exp", "mul", "add")]
    assert a.rejections == ()
    assert a.clusters[0].category == "elementwise-dag"


def test_single_op_is_not_a_cluster():
    a = run(lambda x: torch.relu(x))
    assert a.clusters == () and a.rejections == ()


def test_opaque_layer_splits_clusters():
    class TwoChains(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            return torch.sigmoid(self.lin(torch.exp(x) * 2.0)) - 1.0

    a = analyze(TwoChains(), (4, 8))
    assert [c.ops for c in a.clusters] == [("exp", "mul"), ("sigmoid", "sub")]
    assert [c.category for c in a.clusters] == ["elementwise-chain"] * 2


def test_category_single_reduction_boundary():
    a = run(lambda x: F.softmax(torch.tanh(x) * 3.0, dim=-1))
    assert [c.category for c in a.clusters] == ["single-reduction-boundary"]


def test_reductions_over_different_rows_keep_a_legal_part():
    # sum reduces the (4, 8) rows, softmax the (4,) vector sum wrote: cut apart, exp -> sum
    # survives and softmax is named.
    a = run(lambda x: F.softmax(torch.exp(x).sum(-1), dim=-1))
    assert [c.ops for c in a.clusters] == [("exp", "sum")]
    assert [(r.check, r.culprits) for r in a.rejections] == [("reduction", ("softmax",))]


def test_reductions_over_the_same_rows_share_a_kernel():
    # softmax and the sum of its result reduce the same rows: one kernel, one after the other.
    a = run(lambda x: F.softmax(torch.exp(x), dim=-1).sum(dim=-1))
    assert [c.ops for c in a.clusters] == [("exp", "softmax", "sum")]
    assert a.rejections == ()


def test_cluster_lines_point_at_the_user_code():
    a = run(lambda x: torch.exp(x) * 2.0)
    assert a.clusters[0].lines.file == __file__


def test_clusters_are_indexed_in_graph_order():
    a = analyze_file(EXAMPLES / "example_net.py", [InputSpec((8, 1024))])
    assert [c.index for c in a.clusters] == [0, 1, 2]
    positions = [a.graph.position(c.nodes[0]) for c in a.clusters]
    assert positions == sorted(positions)


def test_example_net_acceptance():
    a = analyze_file(EXAMPLES / "example_net.py", [InputSpec((16384, 1024))])
    got = [(c.ops, c.category, c.traffic.unfused_bytes, c.traffic.fused_bytes)
           for c in a.clusters]
    assert got == [
        (("mul", "relu", "add"), "elementwise-chain", 384 * MiB, 128 * MiB),
        (("gelu", "sigmoid", "mul"), "elementwise-chain", 192 * MiB, 64 * MiB),
        (("tanh", "mul", "softmax"), "single-reduction-boundary", 192 * MiB, 64 * MiB),
    ]
    assert [str(c.lines) for c in a.clusters] == ["L15-17", "L20-22", "L25-27"]
    assert a.rejections == ()


@pytest.fixture(scope="module")
def microgpt():
    return analyze_file(EXAMPLES / "microgpt.py", [InputSpec((2, 128), torch.int64)])


def test_microgpt_attention_softmax_cluster_in_each_layer(microgpt):
    attn = [c for c in microgpt.clusters
            if set(c.ops) == {"mul", "masked_fill", "softmax", "dropout"}]
    assert len(attn) == 2  # one per block
    assert all(c.ops == ("mul", "masked_fill", "softmax", "dropout") for c in attn)
    assert all(c.category == "single-reduction-boundary" for c in attn)
    assert len({c.nodes for c in attn}) == 2
    # The causal mask buffer is read from outside the cluster.
    g = microgpt.graph
    assert all(any(r.endswith("causal_mask") for i in c.inputs for r in g[i].refs)
               for c in attn)


def test_microgpt_attention_traffic(microgpt):
    # scores: 2x4x128x128 fp32 = 512 KiB; mask slice 128x128 bool = 16 KiB.
    scores, mask = 2 * 4 * 128 * 128 * 4, 128 * 128
    c = next(c for c in microgpt.clusters if "masked_fill" in c.ops)
    # mul: r+w; masked_fill: r+mask+w; softmax: r+w; dropout (eval): no bytes.
    assert c.traffic.unfused_bytes == 6 * scores + mask
    assert c.traffic.fused_bytes == 2 * scores + mask


def test_microgpt_residual_layer_norms_are_fused(microgpt):
    lns = [n.name for n in microgpt.graph.nodes if n.op == "layer_norm"]
    assert len(lns) == 5  # two per block and the final one
    clustered = {n for c in microgpt.clusters for n in c.nodes}
    # Every LayerNorm fuses with the residual add before it (multi-output where the
    # add also feeds the next residual).
    assert set(lns) <= clustered
    adds = [n.name for n in microgpt.graph.nodes if n.op == "add"]
    assert set(adds) <= clustered
    # The final residual add feeds only ln_f: that pair fuses with one result.
    assert any(c.ops[-2:] == ("add", "layer_norm") and len(c.outputs) == 1
               for c in microgpt.clusters)


class PrunedPair(nn.Module):
    """`h` feeds a LayerNorm (through a layer, back into `mul`) and the final add."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.sigmoid(x)
        return h + self.fc(F.layer_norm(h, (16,))) * 0.5


def test_nodes_pruned_from_a_group_get_a_second_round():
    from fusion_core.analysis.detect import detect
    from fusion_core.ir.capture import capture
    from fusion_core.ir.normalize import to_fusion_graph

    gm, _ = capture(PrunedPair(), [InputSpec((8, 16))], "fx")
    clusters, rejections = detect(to_fusion_graph(gm, "PrunedPair"))
    # The fan-out check drops `sigmoid`; it still fuses with the LayerNorm it feeds.
    assert [r.check for r in rejections] == ["fan-out"]
    assert sorted(c.ops for c in clusters) == [("mul", "add"), ("sigmoid", "layer_norm")]


def test_a_cluster_of_one_real_op_and_an_alias_is_not_reported():
    # dropout in eval returns its input: relu → dropout moves the bytes relu alone does.
    a = run(lambda x: F.dropout(torch.relu(x), 0.1, False))
    assert a.clusters == ()


def test_second_round_does_not_report_a_cut_component_again():
    # The sum and the softmax of its result reduce different rows: both are left alone by
    # the region cut (reported once); the second round must not regroup them and report the
    # same two reductions again.
    a = run(lambda x: x.sum(-1).softmax(-1))
    assert a.clusters == ()
    assert [(r.check, len(r.nodes)) for r in a.rejections] == [("reduction", 2)]


def test_a_cut_rejection_names_only_nodes_no_cluster_took():
    # Two reductions: the cut leaves `relu`, the add and a sum alone in their regions, and
    # the second round fuses some of them; the rejection must not call those left alone.
    def fn(x):  # the sums reduce the (8, 8) rows, the softmax the (8,) vector
        m = x.sum(-1) * x.sum(-1)
        e = torch.exp(m)
        return torch.relu(e) + F.softmax(e, dim=-1), x + m

    a = run(fn, (8, 8))
    fused = {n for c in a.clusters for n in c.nodes}
    cuts = [r for r in a.rejections if r.check == "reduction" and "left alone" in r.reason]
    assert len(cuts) == 1 and cuts[0].culprits
    assert all(not set(r.culprits) & fused for r in cuts)
    assert any(a.graph[n].op == "relu" for n in fused)  # left alone by the cut, fused later
    assert len(a.clusters) >= 2


class ParallelNorms(nn.Module):
    """GPT-NeoX's parallel residual: one value feeds two LayerNorms and the residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.lin0, self.a, self.m = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.ln1, self.ln2 = nn.LayerNorm(16), nn.LayerNorm(16)

    def forward(self, x):
        h = F.dropout(self.lin0(x), 0.1, self.training)
        return h + self.a(self.ln1(h)) + self.m(self.ln2(h))


def test_the_sibling_round_does_not_report_a_rejected_group_again():
    a = analyze(ParallelNorms(), (4, 16))
    seen = [(r.check, r.nodes) for r in a.rejections]
    assert ("fan-out", ("dropout", "layer_norm", "layer_norm_1")) in seen
    assert len(seen) == len(set(seen))  # each candidate once, as --explain-rejections lists
