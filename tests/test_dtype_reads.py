"""A read of a cluster value's dtype (`input_dtype = h.dtype`, Hugging Face's RMSNorm) that
an input of the cluster answers does not make the cluster store the value: analysis under
both frontends, traffic, the patched graph (the read keeps working), and numerics under the
interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from fusion_core.ir.subgraph import eager_subgraph
from fusion_core.pipeline import analyze
from fusion_core.validate import validate
from fusion_core.validate.subgraph import patch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from dtype_rmsnorm import DtypeNormMLP  # noqa: E402

NORM = "add → to → pow → mean → add → rsqrt → mul → to → mul"
SHAPE = (2, 16, 128)


def _bf16_model() -> DtypeNormMLP:
    torch.manual_seed(0)
    return DtypeNormMLP().to(torch.bfloat16).eval()


def _x(shape: tuple[int, ...] = SHAPE) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.bfloat16)


def _patched_with_eager(a):
    gm = a.graph_module
    return patch(gm, {c.index: (c, eager_subgraph(gm, c).module) for c in a.clusters})


class CastAfterLinear(nn.Module):
    """The dtype read of a cluster value is used after a Linear, outside the cluster."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(x * 2.0) + x
        kept = h.dtype
        h = torch.softmax(h, dim=-1) * 3.0
        return self.lin(h.float()).to(kept)


class CastThenRead(nn.Module):
    """The read value's dtype comes from a cast, not from an input: not answered. The cast
    back comes after a Linear, outside any cluster (a cluster's own cast of it would
    compile the dtype in: ``test_a_dtype_read_only_the_cluster_takes_...``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        h = (x * 2.0).to(torch.float16)
        kept = h.dtype
        return self.lin(torch.softmax(h.float(), dim=-1) * 3.0).to(kept)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_the_residual_sum_is_not_stored_for_its_dtype(capture):
    a = analyze(_bf16_model(), _x(), capture=capture)
    (c,) = [c for c in a.clusters if c.chain == NORM]
    assert c.category == "single-reduction-boundary"
    assert c.outputs == (c.nodes[-1],)  # `add` is not written out for `h.dtype`
    if capture == "fx":  # under export the read is a constant already
        assert [(r.of, r.source) for r in c.dtype_reads] == [(c.nodes[0], "x")]
        assert a.graph[c.dtype_reads[0].read].dtype_of == c.nodes[0]


def test_the_traffic_counts_no_write_for_the_read():
    """FX (the read is a node) moves the bytes export (a constant) does: one output."""
    fx_c, export_c = ([c for c in analyze(_bf16_model(), _x(), capture=cap).clusters
                       if c.chain == NORM][0] for cap in ("fx", "export"))
    assert fx_c.traffic == export_c.traffic
    # Reads x, the Linear's result and the weight; writes the normalized rows once.
    assert fx_c.traffic.fused_bytes == (3 * 2 * 16 * 128 + 128) * 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_patched_graph_reads_the_inputs_dtype_and_matches_eager(dtype):
    torch.manual_seed(0)
    model = DtypeNormMLP().to(dtype).eval()
    x = _x().to(dtype)
    a = analyze(model, x)
    (c,) = [c for c in a.clusters if c.chain == NORM]
    (r,) = c.dtype_reads
    patched = _patched_with_eager(a)
    (read,) = [n for n in patched.graph.nodes if n.name == r.read]
    assert read.args == (patched.graph.find_nodes(op="placeholder")[0], "dtype")
    assert torch.equal(patched(x), model(x))


def test_a_read_used_outside_the_cluster_gets_the_right_dtype():
    torch.manual_seed(0)
    model = CastAfterLinear().eval()
    x = torch.randn(4, 8, 16, dtype=torch.bfloat16)
    a = analyze(model, x)
    (c,) = a.clusters
    assert c.outputs == (c.nodes[-1],) and "add" in c.ops
    assert [r.source for r in c.dtype_reads] == ["x"]
    out = _patched_with_eager(a)(x)
    assert out.dtype == torch.bfloat16 and torch.equal(out, model(x))


def test_a_dtype_a_cast_decides_is_no_inputs_to_answer():
    """`h`'s float16 comes from `.to(torch.float16)`, not from `x`: the read still needs `h`,
    so the cast's result is written out (or the cluster stops there)."""
    a = analyze(CastThenRead(), (4, 16))
    assert all(not c.dtype_reads for c in a.clusters)
    cast = next(n.name for n in a.graph.nodes if n.op == "to"
                and n.meta is not None and n.meta.dtype == torch.float16)
    assert any(cast in c.outputs for c in a.clusters if cast in c.nodes)


@pytest.mark.cpu
def test_the_fused_model_verifies_under_the_interpreter():
    a = analyze(_bf16_model(), _x())
    assert [len(c.outputs) for c in a.clusters] == [1, 1, 1]
    report = validate(a, timing=False)
    assert [r.usable for r in report.results] == [True] * len(a.clusters) == [True] * 3
    assert report.model.passed and report.model.patched == (0, 1, 2)


@pytest.mark.cpu
def test_the_kernel_patched_in_leaves_the_outside_cast_its_dtype():
    """The generated kernel, not the eager subgraph, patched in: the Linear's result is cast
    to the dtype the patched graph now reads from `x`."""
    torch.manual_seed(0)
    a = analyze(CastAfterLinear().eval(), torch.randn(4, 8, 16, dtype=torch.bfloat16))
    report = validate(a, timing=False)
    assert [r.usable for r in report.results] == [True]
    assert report.model.passed and report.model.patched == (0,)


class CastGate(nn.Module):
    """A comparison cast back to a value's dtype, which a cast (not an input) decided, times
    a parameter FX fetches after the dtype read (`self.col[:T]`)."""

    def __init__(self, cols: int) -> None:
        super().__init__()
        self.col = nn.Parameter(torch.randn(8, cols), requires_grad=False)

    def forward(self, x):
        h = torch.sigmoid(x.float())
        return (h > 0.5).to(h.dtype) * self.col[:x.shape[1]]


@pytest.mark.cpu
@pytest.mark.parametrize("cols", [1, 8])
def test_a_dtype_read_only_the_cluster_takes_is_not_stored_and_the_kernel_patches_in(
        cols, tmp_path):
    """`(h > 0.5).to(h.dtype)`: no input has `h`'s float32 (x is bfloat16), but only the
    cluster's own cast takes it, and the kernel compiles it in. `h` is not written out, and
    the kernel patches in and matches eager at the analysed and another length (once `h`
    was a result, read by `h.dtype` before `self.col` was fetched: a PatchError)."""
    from codegen_harness import DEVICE

    from fusion_core.codegen import generate, load_kernel, write_kernels

    model = CastGate(cols)
    a = analyze(model, torch.randn(2, 4, 8, dtype=torch.bfloat16), capture="fx")
    (c,) = a.clusters
    assert c.outputs == (c.nodes[-1],)
    kernel = generate(a, c)
    (path,) = write_kernels([kernel], tmp_path)
    patched = patch(a.graph_module, {c.index: (c, getattr(load_kernel(path), kernel.name))})
    for size in ((2, 4, 8), (3, 5, 8)):
        x = torch.randn(*size, dtype=torch.bfloat16)
        torch.testing.assert_close(patched.to(DEVICE)(x.to(DEVICE)).cpu(), model(x),
                                   msg=str(size))
