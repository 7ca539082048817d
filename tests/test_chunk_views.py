"""Pieces of a chunk or split as ``Narrow`` views of its source (``ir/split_views.py``):
rotary embeddings written with `x.chunk(2, dim=-1)` are one kernel taking `q, cos, sin`, and
`--apply` rewrites the line with them.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import pytest
import torch
from codegen_harness import Lambda, check_model
from rich.console import Console
from test_apply import assert_same_outputs, backup_as_py
from test_apply_callsite import line_of

from fusion_core.analysis.barriers import find_barriers
from fusion_core.codegen import generate
from fusion_core.ir.graph import OpKind
from fusion_core.ir.shapes import InputSpec
from fusion_core.ir.views import INDEX_STEPS, Narrow
from fusion_core.pipeline import analyze, analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.apply import apply
from fusion_core.sourcemap.apply_plan import plan_apply


def rotary_chunk(m, q, cos, sin):
    x1, x2 = q.chunk(2, dim=-1)
    return q * cos + torch.cat((-x2, x1), dim=-1) * sin


def rotary_torch_chunk(m, q, cos, sin):
    x1, x2 = torch.chunk(q, 2, -1)
    return q * cos + torch.cat((-x2, x1), dim=-1) * sin


def rotary_split_own_size(m, q, cos, sin):
    x1, x2 = q.split(q.shape[-1] // 2, dim=-1)
    return q * cos + torch.cat((-x2, x1), dim=-1) * sin


def split_unequal(m, q, cos, sin):
    x1, x2 = torch.split(q, [3, 5], dim=-1)
    return q * cos + torch.cat((x2.exp(), -x1), dim=-1) * sin


def chunk_of_three(m, q, cos, sin):
    # 8 in three: 3, 3 and 2; the last taken by a negative index
    x1, x2, _ = q.chunk(3, dim=-1)
    return q * cos + torch.cat((q.chunk(3, dim=-1)[-1], x2, -x1), dim=-1) * sin


def _pieces(a) -> dict[str, tuple]:
    return {n.name: (n.param(INDEX_STEPS), n.refs) for n in a.graph.nodes
            if n.kind is OpKind.VIEW and n.op == "getitem"}


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("fn", [rotary_chunk, rotary_torch_chunk, rotary_split_own_size])
def test_rotary_with_chunk_reads_the_halves_of_q_in_the_kernel(tmp_path, fn, capture):
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 8), torch.randn(3, 8), torch.randn(3, 8))
    checked = check_model(Lambda(fn, 3), inputs, tmp_path, n_clusters=1, capture=capture)
    (c,) = checked.analysis.clusters
    g = checked.analysis.graph
    assert c.inputs == ("a", "b", "c"), c.inputs  # q, cos, sin: no piece is passed
    assert [g[n].op for n in c.nodes if g[n].kind is OpKind.VIEW] == ["getitem"] * 2
    assert sorted(_pieces(checked.analysis).values(), key=lambda p: p[0][0].start) == [
        ((Narrow(-1, 0, 4, 8),), ("a",)), ((Narrow(-1, 4, 4, 8),), ("a",))]
    # the split itself is a tuple no kernel reads
    split = next(n for n in g.nodes if n.op in ("chunk", "split", "split_with_sizes"))
    assert split.meta is None and split.name not in c.nodes
    assert not find_barriers(g, checked.analysis.clusters)


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("fn, pieces", [
    (split_unequal, {(0, 3), (3, 5)}),
    (chunk_of_three, {(0, 3), (3, 3), (6, 2)})])
def test_split_of_unequal_sizes(tmp_path, capture, fn, pieces):
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 8), torch.randn(3, 8), torch.randn(3, 8))
    checked = check_model(Lambda(fn, 3), inputs, tmp_path, n_clusters=1, capture=capture)
    (c,) = checked.analysis.clusters
    assert c.inputs == ("a", "b", "c"), c.inputs
    found = _pieces(checked.analysis).values()
    assert {refs for _, refs in found} == {("a",)}
    assert {(s.start, s.length) for (s,), _ in found} == pieces, found
    assert {(s.dim, s.size) for (s,), _ in found} == {(-1, 8)}


def test_a_split_sized_by_another_tensor_keeps_no_steps():
    # `x.split(y.shape[1], -1)`: the pieces' bounds change with y, not with x (the slice rule)
    fn = lambda m, x, y: torch.cat(x.split(y.shape[1], -1)[::-1], -1) * 2.0  # noqa: E731
    a = analyze(Lambda(fn, 2), torch.randn(2, 8), torch.randn(3, 4), capture="fx")
    pieces = _pieces(a)
    assert pieces and all(steps is None and refs[0].startswith("split")
                          for steps, refs in pieces.values()), pieces


def test_a_chunk_along_a_dim_sized_at_run_time_stays_a_barrier_that_says_why():
    def fn(m, a, b):
        n, t = a.shape[0], a.shape[1]
        h = a.reshape(n, t * 2, -1)
        x1, x2 = h.chunk(2, dim=1)
        return torch.cat((x2 * 2.0, x1), dim=1) + b

    a = analyze(Lambda(fn, 2), torch.randn(2, 3, 4), torch.randn(2, 6, 2), capture="fx")
    (b,) = find_barriers(a.graph, a.clusters)
    assert b.target == "torch.cat"
    text = b.describe(a.graph)
    assert "concatenates along dim 1 values sized at run time there (by `reshape` (" in text
    assert "a kernel fixes each piece's size" in text


ROTARY = """\
import torch
import torch.nn as nn


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.register_buffer("cos", torch.randn(4, d))
        self.register_buffer("sin", torch.randn(4, d))

    def forward(self, x):
        q = self.q(x)
        cos, sin = self.cos, self.sin
        q = q * cos + rotate_half(q) * sin
        return self.o(q)
"""


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_rotary_with_chunk_is_rewritten_on_its_line_and_computes_the_same(tmp_path, capture):
    path = tmp_path / "rotary.py"
    path.write_text(ROTARY)
    analysis = analyze_file(path, [InputSpec((2, 4, 8))], "Rotary", capture=capture)
    (c,) = [c for c in analysis.clusters if "cat" in c.ops]
    (m,) = [m for m in map_clusters(analysis) if m.cluster_index == c.index]
    line = line_of(path, "q = q * cos + rotate_half(q) * sin")
    assert m.exact and (m.start, m.end) == (line, line), (m.quality, m.reason)
    assert m.replacement == f"        q = cluster{c.index}(q, cos, sin)"
    kernels = {c.index: generate(analysis, c)}
    p = plan_apply(analysis, (m,), path, kernels, {c.index: (True, "verified")})
    assert p.clusters == (c.index,)
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert "rotate_half(q)" not in path.read_text()
    torch.manual_seed(0)
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Rotary", torch.randn(2, 4, 8))
