"""Multi-output clusters and reductions with prologues/epilogues: where storing an
escaping value pays, where it does not, and how components with several reductions
are cut (microgpt's residual LayerNorms, RMSNorm, gated MLPs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from analysis_helpers import run

from fusion_core.analysis.multi_output import reduction_regions, store_verdict
from fusion_core.analysis.recompute import recompute_plan
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze, analyze_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class Residual(nn.Module):
    """`h = x + proj(x)` feeds a LayerNorm and the next residual add (through a layer)."""

    def __init__(self, h_feeds_a_layer: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.ln = nn.LayerNorm(16)
        self.mlp = nn.Linear(16, 16)
        self.h_feeds_a_layer = h_feeds_a_layer

    def forward(self, x):
        h = x + self.proj(x)
        if self.h_feeds_a_layer:  # a parallel block: only a stored `h` can feed the layer
            return self.proj(h) + self.mlp(self.ln(h))
        return h + self.mlp(self.ln(h))


ACT, VEC = 8 * 16 * 4, 16 * 4


def test_residual_add_and_layer_norm_fuse_with_two_outputs():
    a = analyze(Residual(h_feeds_a_layer=True), (8, 16))
    c = next(c for c in a.clusters if "layer_norm" in c.ops)
    assert c.ops == ("add", "layer_norm")
    assert c.category == "multi-output"
    assert [a.graph[n].op for n in c.outputs] == ["add", "layer_norm"]
    # Reads x, proj(x), weight, bias once; writes h (for the layer) and ln(h).
    assert c.traffic.fused_bytes == 2 * ACT + 2 * VEC + 2 * ACT
    # Eager: add reads 2 and writes 1; layer_norm reads h, weight, bias and writes 1.
    assert c.traffic.unfused_bytes == 3 * ACT + 2 * ACT + 2 * VEC
    assert recompute_plan(a.graph, a.clusters) == ()


def test_storing_pays_against_the_split_alternative():
    a = analyze(Residual(h_feeds_a_layer=True), (8, 16))
    c = next(c for c in a.clusters if "layer_norm" in c.ops)
    add = c.nodes[0]
    verdict = store_verdict(a.graph, c.nodes, (add,))
    assert verdict.pays and verdict.fused_bytes == c.traffic.fused_bytes
    # Split: add alone (eager) and layer_norm alone re-reading h.
    assert verdict.split_bytes - verdict.fused_bytes == 8 * 16 * 4


def test_next_residual_recomputes_the_add_instead_of_reading_it_back():
    a = analyze(Residual(), (8, 16))
    g = a.graph
    norm, last = a.clusters
    assert (norm.ops, norm.category) == (("add", "layer_norm"), "single-reduction-boundary")
    assert [g[n].op for n in norm.outputs] == ["layer_norm"]  # h is not stored
    assert last.ops == ("add", "add") and last.category == "elementwise-chain"
    copy = g[last.nodes[0]]
    assert copy.copy_of == norm.nodes[0] and copy.refs == g[norm.nodes[0]].refs
    # Recomputing reads x and proj(x) again: the same bytes as writing h and reading it back.
    assert norm.traffic.fused_bytes == 2 * ACT + 2 * VEC + ACT
    assert last.traffic.fused_bytes == 3 * ACT + ACT
    stored = norm.traffic.fused_bytes + ACT + 3 * ACT  # store h; the last add alone
    assert norm.traffic.fused_bytes + last.traffic.fused_bytes == stored
    x = torch.randn(8, 16)
    torch.testing.assert_close(a.graph_module(x), a.module(x))


def test_a_recomputed_value_counts_once_in_the_eager_traffic():
    # Eager computes `h` once: the copy is no eager op, so the last add's unfused bytes
    # are the add's own (read h and mlp(...), write), and the savings over both clusters
    # are what the two kernels really save over eager.
    a = analyze(Residual(), (8, 16))
    norm, last = a.clusters
    assert last.traffic.unfused_bytes == 3 * ACT
    eager = 3 * ACT + (2 * ACT + 2 * VEC) + 3 * ACT  # add, layer_norm, last add
    fused = norm.traffic.fused_bytes + last.traffic.fused_bytes
    assert sum(c.traffic.unfused_bytes for c in a.clusters) == eager
    assert sum(c.traffic.saved_bytes for c in a.clusters) == eager - fused == ACT


def test_a_copy_that_joins_no_kernel_is_undone():
    class FloorDiv(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.ln, self.b = nn.Linear(16, 16), nn.LayerNorm(16), nn.Linear(16, 16)

        def forward(self, x):
            h = x + self.a(x)
            return self.b(self.ln(h)), torch.round(h, decimals=1)

    a = analyze(FloorDiv(), (8, 16))
    # Recomputing `h` for the rounding would leave the copy alone (a round to decimals has
    # no lowering): the copy is taken back and the LayerNorm's kernel stores `h`.
    assert not any(n.copy_of for n in a.graph.nodes)
    assert not any("fusion_copy_of" in n.meta for n in a.graph_module.graph.nodes)
    (c,) = a.clusters
    assert c.category == "multi-output" and c.recomputes == ()
    x = torch.randn(8, 16)
    for got, want in zip(a.graph_module(x), a.module(x), strict=True):
        torch.testing.assert_close(got, want)


def test_a_value_is_recomputed_by_all_its_consumers_or_by_none():
    class TwoConsumers(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln, self.fc = nn.LayerNorm(16), nn.Linear(16, 16)

        def forward(self, x, y):
            h = x + y
            return h + self.fc(self.ln(h)), torch.round(h, decimals=1)

    # The rounding to decimals cannot take its copy of `h`, so the LayerNorm's kernel stores `h`
    # anyway; the last add recomputing it would read x and y (1.5x h's bytes) instead of h.
    a = analyze(TwoConsumers(), (2, 8, 16), (1, 8, 16))
    assert not any(n.copy_of for n in a.graph.nodes)
    (c,) = a.clusters
    assert [a.graph[n].op for n in c.outputs] == ["add", "layer_norm"]
    assert all(c.traffic.saved_bytes > 0 for c in a.clusters)


def test_a_recompute_copy_is_never_stored():
    class TwoResiduals(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(16), nn.LayerNorm(16)
            self.fc1, self.fc2 = nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x, y):
            h1 = x + y
            h2 = h1 + self.fc1(self.ln1(h1))
            return h2 + self.fc2(self.ln2(h2))

    # The copy of `h2` made for the last add joined `h2`'s own kernel, which then stored the
    # copy: nothing was recomputed where it is read, and the report said it was.
    model = TwoResiduals().eval()
    a = analyze(model, (8, 16), (8, 16))
    g = a.graph
    assert not any(g[n].copy_of for c in a.clusters for n in c.outputs)
    assert [c.recomputes for c in a.clusters] == [(), ("add",)]
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    torch.testing.assert_close(a.graph_module(x, y), model(x, y))


def test_an_alias_escaping_does_not_pay():
    # dropout in eval returns its input: storing a copy costs a write the split avoids.
    g = run(lambda x: (lambda d: (d, F.layer_norm(d, (8,))))(F.dropout(x, 0.1, False))).graph
    group = {n.name for n in g.nodes if n.op in ("dropout", "layer_norm")}
    verdict = store_verdict(g, group, tuple(n for n in group if g[n].op == "dropout"))
    assert not verdict.pays


# --- microgpt ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def microgpt():
    return analyze_file(EXAMPLES / "microgpt.py", [InputSpec((2, 128), torch.int64)])


def test_microgpt_every_layer_norm_is_fused_with_its_residual_add(microgpt):
    lns = [c for c in microgpt.clusters if "layer_norm" in c.ops]
    assert len(lns) == 5 and all(c.ops.count("layer_norm") == 1 for c in lns)
    assert all(c.ops[-1] == "layer_norm" and "add" in c.ops for c in lns)


def test_microgpt_multi_output_clusters_write_the_residual_and_the_norm(microgpt):
    g = microgpt.graph
    multi = [c for c in microgpt.clusters if c.category == "multi-output"]
    # The embedding sum (it ends in dropout) and block 0's MLP residual (its add reads a
    # recomputed value) are stored; the attention residuals are recomputed instead.
    assert len(multi) == 2
    for c in multi:
        ops = [g[n].op for n in c.outputs]
        assert ops[-1] == "layer_norm" and ops[0] in ("add", "dropout") and len(ops) == 2
    copies = [g[n] for c in microgpt.clusters for n in c.nodes if g[n].copy_of]
    assert len(copies) == 2
    assert all(g[n.copy_of].op == "add" and n.source == g[n.copy_of].source for n in copies)


def test_microgpt_attention_and_regions_do_not_overlap(microgpt):
    nodes = [n for c in microgpt.clusters for n in c.nodes]
    assert len(nodes) == len(set(nodes))
    attn = [c.ops for c in microgpt.clusters if "softmax" in c.ops]
    assert attn == [("mul", "masked_fill", "softmax", "dropout")] * 2


# --- regions: one reduction per candidate ---------------------------------------------

def test_two_layer_norms_in_a_row_share_one_kernel():
    # Same rows, the second reads the first inside the component: one kernel does both.
    a = run(lambda x: F.layer_norm(F.layer_norm(x * 2.0, (8,)) + 1.0, (8,)))
    assert [c.ops for c in a.clusters] == [("mul", "layer_norm", "add", "layer_norm")]
    assert a.rejections == ()


def test_norms_of_a_residual_stream_stay_apart():
    # The second norm is reached from the first through a GEMM (outside): no shared kernel.
    class Stream(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            h = x + self.lin(F.layer_norm(x * 2.0, (8,)))
            return F.layer_norm(h, (8,)), h * 3.0

    a = analyze(Stream(), (4, 8))
    assert all(sum(op == "layer_norm" for op in c.ops) == 1 for c in a.clusters), [
        c.ops for c in a.clusters]
    assert sum(op == "layer_norm" for c in a.clusters for op in c.ops) == 2


def test_regions_put_an_epilogue_after_its_reduction():
    # The second softmax reduces the (4, 1) sums: other rows than the first.
    a = run(lambda x: F.softmax(torch.exp(x), -1) * 2.0 + F.softmax(x.sum(-1, keepdim=True), -1))
    g = a.graph
    comp = {n.name for n in g.nodes if n.kind.is_compute}
    regions = reduction_regions(g, comp)
    assert sorted(sorted(g[n].op for n in r) for r in regions) == [
        ["add", "softmax"], ["exp", "mul", "softmax"], ["sum"]]


def test_rms_norm_written_out_is_one_reduction_cluster():
    class RMS(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(16))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    for capture in ("fx", "export"):
        a = analyze(RMS(), (4, 16), capture=capture)
        assert [c.ops for c in a.clusters] == [("pow", "mean", "add", "rsqrt", "mul", "mul")]
        assert a.clusters[0].category == "single-reduction-boundary"


def test_silu_gated_product_fuses():
    class Gated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate, self.up = nn.Linear(8, 16, bias=False), nn.Linear(8, 16, bias=False)

        def forward(self, x):
            return F.silu(self.gate(x)) * self.up(x)

    a = analyze(Gated(), (4, 8))
    assert [c.ops for c in a.clusters] == [("silu", "mul")]


class MutatedOperand(nn.Module):
    """`y` is written in place between `h = x + y` and `h`'s last use."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(16), nn.Linear(16, 16)
        self.how = how

    def forward(self, x, y):
        h = x + y
        n = self.fc(self.ln(h))
        if self.how == "mul_":
            y.mul_(2.0)
        elif self.how == "view":
            y[:, :4].mul_(3.0)
        else:
            y.copy_(n)
        return h + n


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("how", ["mul_", "view", "copy_"])
def test_no_recompute_across_an_in_place_write_to_an_operand(how, capture):
    # A copy of `h` before the last add would read the overwritten `y`.
    model = MutatedOperand(how).eval()
    a = analyze(model, (8, 16), (8, 16), capture=capture)
    assert not any(n.copy_of for n in a.graph.nodes)
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    with torch.no_grad():
        got = a.graph_module(x, y.clone())
        want = model(x, y.clone())
    torch.testing.assert_close(got[-1] if isinstance(got, (tuple, list)) else got, want)


def test_the_recompute_note_names_the_op_at_its_line_not_the_graph_node():
    from fusion_core.report.console import recompute_lines
    a = analyze_file(EXAMPLES / "microgpt.py", [InputSpec((1, 8), torch.int64)])
    lines = recompute_lines(a)
    assert lines and all("recomputes `add` (line 61)" in line for line in lines)  # x = x + …
    assert not any("`add_" in line for line in lines)  # `add_1`: a name the user never wrote
