"""A computed value read in slices: each slice recomputes the cheap producer in its consumer's
kernel (``analysis/slice_recompute.py``), as Inductor inlines it, instead of the value's
round trip through memory. Where the value is stored anyway (a model output), the slices
read it back and the reason names the slice and its line.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from codegen_harness import Lambda, check_model
from rich.console import Console
from test_apply import assert_same_outputs, backup_as_py
from test_apply_callsite import line_of

from fusion_core.analysis.traffic import estimate_traffic
from fusion_core.codegen import generate
from fusion_core.ir.graph import OpKind
from fusion_core.ir.shapes import InputSpec
from fusion_core.ir.views import INDEX_STEPS, Narrow
from fusion_core.pipeline import analyze, analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.apply import apply
from fusion_core.sourcemap.apply_plan import plan_apply
from fusion_core.validate.run import validate

D = 8  # half the last dim


def halves_gated(m, x, w):  # GLU by subscripts: `h` read only in its two halves
    h = x * w
    a, g = h[..., :D], h[..., D:]
    return a * F.silu(g)


def chunk_gelu_and_whole(m, x, w):  # SwiGLU-style pieces, and `h` whole by another op
    h = F.gelu(x * w)
    a, g = h.chunk(2, -1)
    return a * F.silu(g), h.relu()


def affine_halves_and_row_sum(m, x, w, b):  # a two-op producer, and `h` reduced whole
    h = x * w + b
    a, g = h[..., :D], h[..., D:]
    return a * F.silu(g) + h.sum(-1, keepdim=True)


def halves_and_output(m, x, w, b):  # `h` is a result: stored anyway, its halves read back
    h = x * w + b
    a, g = h[..., :D], h[..., D:]
    return a * F.silu(g), h


def _inputs(n: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return (torch.randn(4, 3, 2 * D), *(torch.randn(2 * D) for _ in range(n - 1)))


def _copies(a, cluster) -> list[str]:
    return [a.graph[n].copy_of for n in cluster.nodes if a.graph[n].copy_of]


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_halves_of_a_computed_value_are_one_kernel(tmp_path, capture):
    # Was two kernels: `getitem → getitem → silu → mul` read `h`, which `mul` wrote alone
    # ("selects part of a value computed in the group").
    inputs = _inputs(2)
    checked = check_model(Lambda(halves_gated, 2), inputs, tmp_path, n_clusters=1,
                          capture=capture)
    a = checked.analysis
    (c,) = a.clusters
    assert c.inputs == ("a", "b") and len(c.outputs) == 1
    assert len(_copies(a, c)) == 1  # the original serves one half, its copy the other
    views = [a.graph[n] for n in c.nodes if a.graph[n].kind is OpKind.VIEW
             and a.graph[n].param(INDEX_STEPS)]
    assert sorted((v.param(INDEX_STEPS) for v in views), key=lambda s: s[0].start) == [
        (Narrow(-1, 0, D, 2 * D),), (Narrow(-1, D, D, 2 * D),)]
    # What the kernel moves: both halves of `x` (all of it), `w`, and the result.
    x, w = inputs
    assert c.traffic.fused_bytes == x.nbytes + w.nbytes + x.nbytes // 2
    assert not a.rejections


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_chunk_pieces_recompute_the_producer_another_op_reads_whole(tmp_path, capture):
    # Was: `mul → gelu → relu` wrote `gelu` for its pieces ("a piece of `gelu` (line …)
    # selects part of a value computed in the group").
    inputs = _inputs(2)
    checked = check_model(Lambda(chunk_gelu_and_whole, 2), inputs, tmp_path, n_clusters=2,
                          capture=capture)
    a = checked.analysis
    whole, gated = sorted(a.clusters, key=lambda c: "relu" not in c.ops)
    assert len(whole.outputs) == 1 and a.graph[whole.outputs[0]].op == "relu"  # no `gelu`
    assert gated.inputs == ("a", "b")  # x and w, not gelu's result
    assert sorted(set(_copies(a, gated))) == sorted(
        n for n in whole.nodes if a.graph[n].op in ("mul", "gelu"))
    x, w = inputs
    assert gated.traffic.fused_bytes == x.nbytes + w.nbytes + x.nbytes // 2


def test_a_producer_of_two_ops_is_copied_whole_for_each_half(tmp_path):
    inputs = _inputs(3)
    checked = check_model(Lambda(affine_halves_and_row_sum, 3), inputs, tmp_path,
                          n_clusters=2)
    a = checked.analysis
    reduce, gated = sorted(a.clusters, key=lambda c: "sum" not in c.ops)
    assert [a.graph[o].op for o in reduce.outputs] == ["sum"]  # `h` is not written
    assert sorted(_copies(a, gated)) == ["add", "add", "mul", "mul"]
    x, w, b = inputs
    row_sums = x.nbytes // (2 * D)
    assert gated.traffic.fused_bytes == (x.nbytes + w.nbytes + b.nbytes + row_sums
                                         + x.nbytes // 2)
    # The patched model matches eager as a whole.
    report = validate(a, timing=False)
    assert report.model.passed, report.model.detail
    assert all(r.usable for r in report.results)


def test_a_value_the_model_returns_is_read_back_by_its_slices(tmp_path):
    # Inductor stores `h` (an output) and its consumer loads the halves: recomputing them
    # would read `x`, `w` and `b` for the bytes of `h`. Two kernels, as before.
    checked = check_model(Lambda(halves_and_output, 3), _inputs(3), tmp_path, n_clusters=2)
    a = checked.analysis
    assert not any(a.graph[n].copy_of for c in a.clusters for n in c.nodes)
    (reason,) = {r.reason for r in a.rejections if r.check == "lowering"}
    line = inspect.getsourcelines(halves_and_output)[1] + 2  # `a, g = h[..., :D], …`
    assert (f"a slice (test_slice_recompute.py:{line}) selects part of a value computed in "
            f"the group, `add` (test_slice_recompute.py:{line - 1});") in reason


def test_the_copies_count_in_the_traffic_of_the_kernel_that_runs_them():
    a = analyze(Lambda(halves_gated, 2), *_inputs(2))
    (c,) = a.clusters
    # The report's unfused bytes are the model's ops, each once: the copy never runs eagerly.
    assert c.traffic == estimate_traffic(a.graph, c.nodes, copies=False)
    assert estimate_traffic(a.graph, c.nodes).unfused_bytes > c.traffic.unfused_bytes


def one_half_and_row_sum(m, x, w):
    h = x * w
    return h[..., :D].relu() * 2.0, h.sum(-1)


def test_a_kernel_reading_one_half_counts_half_of_its_input(tmp_path):
    # The half's kernel recomputes `h` from `x` and `w` at the half's columns only: it loads
    # half of each (was costed as all of `x` and `w`).
    inputs = _inputs(2)
    checked = check_model(Lambda(one_half_and_row_sum, 2), inputs, tmp_path, n_clusters=2)
    a = checked.analysis
    half = next(c for c in a.clusters if "relu" in c.ops)
    assert _copies(a, half) == ["mul"] and half.inputs == ("a", "b")
    x, w = inputs
    assert half.traffic.fused_bytes == x.nbytes // 2 + w.nbytes // 2 + x.nbytes // 2


def overlapping_halves(m, x, w):
    h = torch.sigmoid(x * w)
    return h[..., : D + 2] * h[..., D - 2 :]


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_overlapping_slices_each_recompute_their_columns(tmp_path, capture):
    inputs = _inputs(2)
    checked = check_model(Lambda(overlapping_halves, 2), inputs, tmp_path, n_clusters=1,
                          capture=capture)
    (c,) = checked.analysis.clusters
    assert sorted(_copies(checked.analysis, c)) == ["mul", "sigmoid"]
    x, w = inputs
    assert c.traffic.fused_bytes == x.nbytes + w.nbytes + x.nbytes * (D + 2) // (2 * D)


GATED = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.w = nn.Parameter(torch.randn(16))
        self.down = nn.Linear(8, 8)

    def forward(self, x):
        u = self.up(x)
        h = u * self.w
        a = h[..., :8]
        g = h[..., 8:]
        y = a * F.silu(g)
        return self.down(y)
"""


def test_the_recomputing_kernel_replaces_the_lines_and_computes_the_same(tmp_path):
    # Was: "`h` at line 17 does not hold what the graph reads there" (the copy of `h`).
    # FX only: under export a subscript inside a cluster maps to no line at all yet
    # ("`h[..., :8]` at line 8 does not compute `h[..., :8]`"), with or without copies.
    path = tmp_path / "gated.py"
    path.write_text(GATED)
    analysis = analyze_file(path, [InputSpec((2, 4, 8))], "Gated")
    (c,) = [c for c in analysis.clusters if "silu" in c.ops]
    (m,) = [m for m in map_clusters(analysis) if m.cluster_index == c.index]
    first, last = line_of(path, "h = u * self.w"), line_of(path, "y = a * F.silu(g)")
    assert m.exact and (m.start, m.end) == (first, last), (m.quality, m.reason)
    kernels = {c.index: generate(analysis, c)}
    p = plan_apply(analysis, (m,), path, kernels, {c.index: (True, "verified")})
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert "h[..., 8:]" not in path.read_text()
    torch.manual_seed(0)
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Gated", torch.randn(2, 4, 8))


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]  # bounds from the value's own size
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def scaled_rotary(m, q, cos, sin):  # `x * cos + rotate_half(x) * sin` with `x` computed
    x = q * 0.125
    return x * cos + rotate_half(x) * sin


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_rotary_of_a_computed_value_is_one_kernel(tmp_path, capture):
    # Was: `q * 0.125` alone, its result stored and read back by the rotary kernel ("a slice
    # (…) selects part of a value computed in the group"). The halves' bounds read the
    # value's shape: they read the copy's, so each half keeps its steps.
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 8), torch.randn(3, 8), torch.randn(3, 8))
    checked = check_model(Lambda(scaled_rotary, 3), inputs, tmp_path, n_clusters=1,
                          capture=capture)
    (c,) = checked.analysis.clusters
    assert c.inputs == ("a", "b", "c") and len(c.outputs) == 1
    assert _copies(checked.analysis, c) == ["mul", "mul"]
    q, cos, sin = inputs
    assert c.traffic.fused_bytes == q.nbytes + cos.nbytes + sin.nbytes + q.nbytes


def piece_then_reshape(m, x, b):
    y = (x * 2.0).chunk(1, dim=0)[0]
    return F.relu(y).reshape(4, 2 * D) + b


def test_one_piece_of_a_computed_value_takes_its_readers_map(tmp_path):
    # Was split at the piece ("… selects part of a value computed in the group"): `mul`
    # took `x`'s map before the piece's readers gave theirs (codegen/indexing.py).
    inputs = (torch.randn(4, 2 * D), torch.randn(2 * D))
    checked = check_model(Lambda(piece_then_reshape, 2), inputs, tmp_path, n_clusters=1)
    (c,) = checked.analysis.clusters
    assert c.ops == ("mul", "getitem", "relu", "reshape", "add") and not _copies(
        checked.analysis, c)
