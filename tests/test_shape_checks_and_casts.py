"""Shape asserts are not data readers; `type_as` is a cast and `reshape_as` a named view."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from fusion_core.ir.graph import OpKind
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze
from fusion_core.validate.run import validate


class CheckedEncoder(nn.Module):
    """torchvision's ViT encoder checks the rank of an intermediate before its LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 4, 8))
        self.ln = nn.LayerNorm(8)
        self.head = nn.Linear(8, 8)

    def forward(self, x):
        h = x * 2.0 + self.pos
        torch._assert(h.dim() == 3, f"expected (batch, seq, hidden), got {h.shape}")
        return self.head(self.ln(h)).relu() * 0.5


class CastLike(nn.Module):
    def forward(self, x, ref):
        h = torch.sigmoid(x * 2.0).type_as(ref)
        return h + ref


class ReshapeLike(nn.Module):
    def forward(self, x, ref):
        return ((x * 2.0).sigmoid().reshape_as(ref) + 1.0).tanh()


@pytest.mark.parametrize("frontend", ["fx", "export"])
def test_an_assert_on_an_intermediate_reads_no_data(frontend):
    a = analyze(CheckedEncoder(), (2, 4, 8), capture=frontend)
    assert [(c.ops, c.outputs) for c in a.clusters] == [
        (("mul", "add", "layer_norm"), ("layer_norm",)), (("relu", "mul"), ("mul_1",))]
    assert not any(n.op == "meta" for n in a.graph.nodes)


def test_an_assert_on_an_intermediate_patches_and_verifies():
    report = validate(analyze(CheckedEncoder(), (2, 4, 8), capture="fx"), timing=False)
    assert [r.usable for r in report.results] == [True, True]
    assert report.model.passed, report.model.detail


@pytest.mark.parametrize("frontend", ["fx", "export"])
def test_type_as_is_a_cast_that_fuses(frontend):
    specs = (InputSpec((4, 8)), InputSpec((4, 8), torch.float16))
    a = analyze(CastLike(), *specs, capture=frontend)
    cast = next(n for n in a.graph.nodes if n.name == "type_as")
    assert (cast.op, cast.kind, cast.param("dtype")) == ("to", OpKind.POINTWISE_UNARY,
                                                        torch.float16)
    assert [c.ops for c in a.clusters] == [("mul", "sigmoid", "to", "add")]
    report = validate(a, timing=False)
    assert [r.usable for r in report.results] == [True]
    assert report.model.passed, report.model.detail


@pytest.mark.parametrize("frontend", ["fx", "export"])
def test_reshape_as_is_a_named_view(frontend):
    a = analyze(ReshapeLike(), InputSpec((4, 8)), InputSpec((32,)), capture=frontend)
    view = next(n for n in a.graph.nodes if n.name == "reshape_as")
    assert view.kind is OpKind.VIEW
    (c,) = a.clusters
    assert c.ops == ("mul", "sigmoid", "reshape_as", "add", "tanh")


class LinearNorm(nn.Module):
    """LeViT's projection: a Linear over tokens, BatchNorm1d over (batch * tokens, C), then
    `reshape_as` the Linear's result, which it reads for its shape alone."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 16, bias=False)
        self.bn = nn.BatchNorm1d(16)
        nn.init.uniform_(self.bn.running_mean, -1.0, 1.0)

    def forward(self, x):
        h = self.linear(x)
        return nn.functional.hardswish(self.bn(h.flatten(0, 1)).reshape_as(h))


@pytest.mark.parametrize("frontend", ["fx", "export"])
@pytest.mark.parametrize("batch", [1, 2])  # 1: the view adds a dim no kernel input has
def test_a_norm_viewed_back_by_reshape_as_fuses_with_its_activation(frontend, batch):
    a = analyze(LinearNorm().eval(), (batch, 5, 8), capture=frontend)
    assert a.rejections == ()
    (c,) = a.clusters
    assert c.ops == ("batch_norm", "reshape_as", "hardswish")
    assert len(c.inputs) == 5  # the flattened h and four statistics, not h itself
    report = validate(a, timing=False)
    assert [r.usable for r in report.results] == [True]
    assert report.model.passed, report.model.detail


class DtypeReference(nn.Module):
    """`type_as` outside a cluster reads a cluster member only for its dtype (Gemma 3's norm
    after attention): patching the cluster out used to fail with "Tried to erase Node"."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        t = x * 3.0
        return torch.sigmoid(t) + 1.0, self.lin(x).type_as(t)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_dtype_only_read_of_a_cluster_member_patches_and_verifies(capture):
    analysis = analyze(DtypeReference(), (4, 8), capture=capture)
    assert [c.outputs for c in analysis.clusters] == [("add",)]  # `mul` is no result
    report = validate(analysis, timing=False)
    assert report.model.passed, report.model.detail


class ShapeReference(nn.Module):
    """`reshape_as` (and kin) outside a cluster reading a cluster member for its shape only."""

    def __init__(self, read: str = "reshape_as") -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.read = read

    def forward(self, x):
        h = torch.relu(x)
        a = h * 2.0 + 1.0
        return getattr(a @ self.w, self.read)(h)


@pytest.mark.parametrize("read", ["reshape_as", "view_as", "expand_as"])
def test_a_shape_only_read_of_a_cluster_member_patches_and_verifies(read):
    analysis = analyze(ShapeReference(read).eval(), (4, 8), capture="fx")
    assert [c.outputs for c in analysis.clusters] == [("add",)]  # `relu` is no result
    report = validate(analysis, timing=False)
    assert [r.usable for r in report.results] == [True]
    assert report.model.passed, report.model.detail


@pytest.mark.parametrize("read", ["reshape_as", "view_as", "expand_as"])
def test_a_shape_only_read_of_a_cluster_member_follows_another_batch(read, tmp_path):
    """Patched out, the read takes the member's shape at this call (recomputed on meta
    tensors), not the analysed one: at 6 rows it once raised "The expanded size of the
    tensor (4) must match the existing size (6)" (found by tests/size_fuzz.py)."""
    from codegen_harness import DEVICE

    from fusion_core.codegen import generate, load_kernel, write_kernels
    from fusion_core.validate.subgraph import patch

    model = ShapeReference(read).eval()
    analysis = analyze(model, torch.randn(4, 8), capture="fx")
    (c,) = analysis.clusters
    kernel = generate(analysis, c)
    launch = getattr(load_kernel(write_kernels([kernel], tmp_path)[0]), kernel.name)
    patched = patch(analysis.graph_module, {c.index: (c, launch)}).to(DEVICE)
    model.to(DEVICE)
    for rows in (4, 6, 1):
        x = torch.randn(rows, 8, device=DEVICE)
        with torch.no_grad():
            torch.testing.assert_close(patched(x), model(x))
