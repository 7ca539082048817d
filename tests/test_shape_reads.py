"""A read of a cluster value's shape (`h.shape[-1]`, `h.size(-1)`) that the cluster's inputs
answer does not split the cluster: analysis (both frontends), traffic, the patched model at
other input sizes, numerics under the interpreter, and `--apply` on the user's file."""

from __future__ import annotations

import ast
import math
import textwrap

import pytest
import torch
import torch.nn as nn
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.ir.subgraph import eager_subgraph
from fusion_core.pipeline import analyze
from fusion_core.sourcemap.pysource import reads_shape_only
from fusion_core.validate import validate
from fusion_core.validate.subgraph import patch, shape_of

# The review's repro: the size of `h` read on the line that masks it.
SOURCE = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class MaskedChain(nn.Module):
        def __init__(self, n: int = 16) -> None:
            super().__init__()
            self.register_buffer("mask", torch.tril(torch.ones(n, n, dtype=torch.bool)))

        def forward(self, x):
            h = torch.where(x > 0, x, x * 0.1)
            h = h.masked_fill(~self.mask[:h.shape[-1], :h.shape[-1]], float("-inf"))
            h = torch.softmax(h, dim=-1)
            return h * 2.0 + 1.0
''')
namespace: dict = {}
exec(compile(SOURCE, "masked_chain.py", "exec"), namespace)  # noqa: S102 - the model under test
MaskedChain = namespace["MaskedChain"]


class SizeRead(nn.Module):
    """The repro with the size read another way, or from the input (`read="input"`)."""

    def __init__(self, read: str) -> None:
        super().__init__()
        self.read = read
        self.register_buffer("mask", torch.tril(torch.ones(16, 16, dtype=torch.bool)))

    def forward(self, x):
        h = torch.where(x > 0, x, x * 0.1)
        n = {"size": lambda: h.size(-1), "slice": lambda: h.shape[-2:][1],
             "input": lambda: x.shape[-1]}[self.read]()
        h = h.masked_fill(~self.mask[:n, :n], float("-inf"))
        return torch.softmax(h, dim=-1) * 2.0 + 1.0


class NormThenMask(nn.Module):
    """The size read from a layer norm's result, then a softmax over the same rows."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.register_buffer("mask", torch.tril(torch.ones(16, 16, dtype=torch.bool)))

    def forward(self, x):
        h = self.norm(x)
        h = h.masked_fill(~self.mask[:h.shape[-1], :h.shape[-1]], float("-inf"))
        return torch.softmax(h, dim=-1) * 2.0


CHAIN = ("gt → mul → where → bitwise_not → masked_fill → softmax → mul → add")
SHAPE = (4, 16, 16)


@pytest.mark.parametrize("model", [MaskedChain(), SizeRead("size"), SizeRead("slice")],
                         ids=["repro", "size", "slice"])
def test_the_chain_fuses_whole_whichever_way_the_size_is_read(model):
    a = analyze(model, SHAPE)
    assert [c.chain for c in a.clusters] == [CHAIN] and not a.rejections
    (c,) = a.clusters
    assert c.outputs == ("add",)  # `where` is not stored for its shape
    reads = 2 if isinstance(model, MaskedChain) else 1
    assert [(r.of, r.sources) for r in c.shape_reads] == [("where", ("x",))] * reads
    # The same bytes as the model that reads the size from its input.
    assert c.traffic == analyze(SizeRead("input"), SHAPE).clusters[0].traffic


def test_two_reductions_share_a_kernel_across_the_read():
    """The path `layer_norm` → `h.shape` → mask → `softmax` does not leave the component: the
    norm and the softmax walk the same rows in one kernel."""
    (c,) = analyze(NormThenMask(), SHAPE).clusters
    assert c.chain == "layer_norm → bitwise_not → masked_fill → softmax → mul"
    assert {(r.of, r.sources) for r in c.shape_reads} == {("layer_norm", ("x",))}


def test_export_has_no_shape_read_and_fuses_whole():
    a = analyze(MaskedChain(), SHAPE, capture="export")
    assert not [n for n in a.graph.nodes if n.op == "meta"]  # sizes are constants there
    assert [c.chain for c in a.clusters] == [CHAIN]


@pytest.mark.parametrize("model,shapes", [
    (MaskedChain(), [(2, 8, 8), (1, 5, 5)]),
    (NormThenMask(), [(2, 16, 16), (1, 16, 16)]),  # the norm fixes the last dim
], ids=["repro", "norm"])
def test_the_patched_model_reads_the_size_at_every_input_size(model, shapes):
    a = analyze(model.eval(), SHAPE)
    gm, (c,) = a.graph_module, a.clusters
    patched = patch(gm, {c.index: (c, eager_subgraph(gm, c).module)})
    names = {n.name for n in patched.graph.nodes}
    assert not names & set(c.nodes)
    assert any(n.target is shape_of for n in patched.graph.nodes)
    for shape in (SHAPE, *shapes):  # sizes other than the analysed one too
        x = torch.randn(shape)
        assert torch.allclose(patched(x), a.module(x)), shape


@pytest.mark.cpu
def test_the_fused_chain_verifies_and_passes_model_numerics():
    a = analyze(MaskedChain(), SHAPE)
    report = validate(a, timing=False)
    assert [r.usable for r in report.results] == [True]
    assert report.model.passed and report.model.patched == (0,)


@pytest.mark.cpu
def test_apply_refuses_naming_the_read_of_h_and_the_fix(tmp_path):
    path = tmp_path / "masked_chain.py"
    path.write_text(SOURCE)
    result = CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "4,16,16",
                                      "--apply", "--yes"])
    assert "model numerics: pass" in result.output
    assert ("input `self.mask[:h.shape[-1], :h.shape[-1]]` at line 12 reads `h`"
            in result.output), result.output
    assert "only its shape: read that size from a value assigned before" in result.output
    assert path.read_text() == SOURCE


@pytest.mark.cpu
def test_apply_writes_the_edit_the_refusal_asks_for(tmp_path):
    """The size read from `x`, as the refusal says: the lines are replaced, and the rewritten
    model matches the original."""
    path = tmp_path / "masked_chain.py"
    path.write_text(SOURCE.replace("h.shape[-1]", "x.shape[-1]"))
    result = CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "4,16,16",
                                      "--apply", "--yes"])
    assert "rewritten model matches the original" in result.output, result.output
    assert "return cluster0(x, self.mask[:x.shape[-1], :x.shape[-1]])" in path.read_text()


@pytest.mark.parametrize("text,only", [
    ("self.mask[:h.shape[-1], :h.size(0)]", True),
    ("h.ndim + h.dim() + h.numel()", True),
    ("h.ndimension()", True),  # a shape read in the graph too (ir/normalize.py)
    ("self.mask[:h.shape[-1]] + h", False),  # `h` itself too
    ("h.size", False),  # the method, not called
    ("x.shape[-1]", False),  # no `h` at all
])
def test_reads_shape_only_tells_a_shape_read_from_a_use(text, only):
    assert reads_shape_only(ast.parse(text, mode="eval"), "h") is only


class ViewThenMask(nn.Module):
    """The sizes read from a transpose of a computed value: the view's input's shape tells
    them (the reshape to the batch size read from `x` restates a split of the last dim,
    so it fuses too: ``codegen/run_sizes.py``)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(16, 16, dtype=torch.bool)))

    def forward(self, x):
        h = (x * 2.0).reshape(x.shape[0], -1, 16).transpose(1, 2)
        h = h.masked_fill(~self.mask[:h.shape[-2], :h.size(-1)], 0.0)
        return h + 1.0


def test_a_view_read_for_its_shape_fuses_with_what_it_feeds():
    a = analyze(ViewThenMask(), (4, 256))
    (c,) = [c for c in a.clusters if "masked_fill" in c.ops]
    assert c.chain == "mul → reshape → transpose → bitwise_not → masked_fill → add"
    assert {(r.of, r.sources, r.via) for r in c.shape_reads} == {
        ("transpose", ("x",), ("mul", "reshape", "transpose"))}
    assert "transpose" not in c.outputs  # not stored for its shape


def test_a_constant_reshape_read_for_its_shape_fuses_with_its_producer():
    """Before, `mul → reshape` was no candidate (the reshape has a reader that is no op)
    and was left alone without a word."""

    class Constant(ViewThenMask):
        def forward(self, x):
            h = (x * 2.0).reshape(4, 16, 16)
            h = h.masked_fill(~self.mask[:h.shape[-1], :h.shape[-1]], 0.0)
            return h + 1.0

    a = analyze(Constant(), (4, 256))
    assert [c.chain for c in a.clusters] == ["mul → reshape → bitwise_not → masked_fill → add"]
    assert not a.rejections
    (c,) = a.clusters
    assert [(r.of, r.sources, r.via) for r in c.shape_reads] == [
        ("reshape", ("x",), ("mul", "reshape"))] * 2


@pytest.mark.cpu
def test_the_read_through_a_view_follows_the_input_size_and_verifies():
    a = analyze(ViewThenMask().eval(), (4, 256))
    gm = a.graph_module
    patched = patch(gm, {c.index: (c, eager_subgraph(gm, c).module) for c in a.clusters})
    for shape in ((4, 256), (2, 128), (1, 64)):  # 16, 8 and 4 columns of the mask
        x = torch.randn(shape)
        assert torch.allclose(patched(x), a.module(x)), shape
    report = validate(a, timing=False)
    assert all(r.usable for r in report.results) and report.model.passed


class ScaledBySize(nn.Module):
    def __init__(self, log: bool = True) -> None:
        super().__init__()
        self.log = log

    def forward(self, x):
        h = (x * 2.0).reshape(4, 16, 8)
        n = math.log2(h.shape[-1]) if self.log else h.shape[-1]
        return torch.softmax(h, dim=-1) * n


def test_a_size_used_as_a_number_past_a_view_is_named_at_its_line():
    """With a view in the group the code generator, not the shapes check, meets the size:
    it names the line and the fix as the shapes check does, not the graph's `getitem`.
    (`math.log2` is no call ``ir/run_scalars.py`` models; the size itself is a kernel
    scalar, and the whole chain fuses.)"""
    a = analyze(ScaledBySize(), (4, 128))
    assert [c.chain for c in a.clusters] == ["mul → reshape → softmax"]
    (r,) = a.rejections
    line = ScaledBySize.forward.__code__.co_firstlineno + 2
    assert r.check == "lowering" and r.culprits == ("mul_1",)
    assert (f"`mul` (line {line + 1}) reads a Python value computed at run time at line "
            f"{line} (`n = math.log2(h.shape[-1]) if self.log else h.shape[-1]`)"
            ) in r.reason, r.reason
    assert "compute it once in `__init__`" in r.reason
    whole = analyze(ScaledBySize(log=False), (4, 128))
    assert [c.chain for c in whole.clusters] == ["mul → reshape → softmax → mul"]
    assert not whole.rejections


@pytest.mark.cpu
def test_a_size_of_a_value_computed_inside_is_a_scalar_the_patched_model_reads():
    """`n = h.shape[-1]` of the cluster's own reshape: the patched model reads it from the
    shape the inputs give (the shape read above) and passes it to the kernel."""
    a = analyze(ScaledBySize(log=False).eval(), (4, 128))
    (c,) = a.clusters
    assert c.inputs == ("x", "getitem")
    report = validate(a, timing=False)
    assert [r.usable for r in report.results] == [True] and report.model.passed


class LinearNorm(nn.Module):
    """timm LeViT's `Linear` then `BatchNorm1d` over the flattened tokens."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim, bias=False)
        self.bn = nn.BatchNorm1d(dim)

    def forward(self, x):
        x = self.lin(x)
        return self.bn(x.flatten(0, 1)).reshape_as(x)


class Residuals(nn.Module):
    """Two residual blocks whose sums are read for their shape (`B, N, C = x.shape`)."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.one, self.two = LinearNorm(dim), LinearNorm(dim)

    def forward(self, x):
        x = x + self.one(x)
        x = x + self.two(x)
        b, n, c = x.shape
        return self.two.lin(x).reshape(b * n, c)


@pytest.mark.cpu
def test_a_read_replayed_past_another_clusters_result_runs_beside_it():
    """The second sum's read replays `add` on meta tensors; its other operand is the first
    cluster's result, a patched call with no recorded value, and stayed a real tensor: "Tensor
    on device meta is not on the expected device cpu" once both clusters were patched."""
    a = analyze(Residuals().eval(), (2, 4, 8))
    assert len(a.clusters) == 2
    first, second = a.clusters
    assert any(set(r.sources) & set(first.outputs) and r.via for r in second.shape_reads)
    report = validate(a, timing=False)
    assert all(r.usable for r in report.results)
    assert report.model.passed, report.model


def test_a_replayed_operand_keeps_its_strides():
    """A `.view` replayed on meta tensors works where the real one did: a channels-last
    value permuted to NHWC is contiguous, its contiguous stand-in permuted is not."""
    from fusion_core.validate.subgraph import on_meta

    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    stand_in = on_meta(x)
    assert stand_in.device.type == "meta" and stand_in.stride() == x.stride()
    assert stand_in.permute(0, 2, 3, 1).view(2, 20, 3).shape == (2, 20, 3)
    assert on_meta(7) == 7  # a size passes as it is
