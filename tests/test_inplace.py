"""In-place ops: rewritten out of place where that keeps the results, else rejected by name."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
import torch.nn as nn

from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze

FRONTENDS = ("fx", "export")


class ConvBatchNormReLU(nn.Module):
    """torchvision's stem: conv, batch norm, then a ReLU that overwrites the BN result."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(self.bn(self.conv(x))) * 0.5


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        s = self.act(self.reduce(s))
        return x * torch.sigmoid(self.expand(s))


class InvertedResidual(nn.Module):
    """An MBConv block: expand, depthwise, squeeze-excite, project, each BN'd, with in-place
    SiLU and Hardswish as EfficientNet and MobileNetV3 write them."""

    def __init__(self, channels: int = 8, expanded: int = 16) -> None:
        super().__init__()
        self.expand = nn.Conv2d(channels, expanded, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(expanded)
        self.act1 = nn.SiLU(inplace=True)
        self.depthwise = nn.Conv2d(expanded, expanded, 3, padding=1, groups=expanded, bias=False)
        self.bn2 = nn.BatchNorm2d(expanded)
        self.act2 = nn.Hardswish(inplace=True)
        self.se = SqueezeExcite(expanded, 4)
        self.project = nn.Conv2d(expanded, channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)

    def forward(self, x):
        h = self.act1(self.bn1(self.expand(x)))
        h = self.act2(self.bn2(self.depthwise(h)))
        h = self.se(h)
        return x + self.bn3(self.project(h))


class MethodChain(nn.Module):
    def forward(self, x):
        y = x * 2.0
        y.relu_()
        return y.sigmoid()


class MutatedAfterRead(nn.Module):
    """Issue 16.5: `z` reads `y` before the mutations, the product after them."""

    def forward(self, x):
        y = x * 2.0
        z = torch.sigmoid(y)
        y.relu_()
        y.add_(1.0)
        return z * y


class AugmentedAssign(nn.Module):
    def forward(self, x):
        y = x * 2.0
        y += x
        return y.sigmoid()


class MutatesThroughView(nn.Module):
    """The ReLU writes a view of `y`: `y` changes too, which no rewrite of one node keeps."""

    def forward(self, x):
        y = x * 2.0
        z = torch.sigmoid(y)
        y.view(-1).relu_()
        return z * y


class MutatesInput(nn.Module):
    def forward(self, x):
        return x.mul_(2.0).tanh()  # the caller's tensor changes: must stay in place


def _randomize_bn(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def _same_results(model: nn.Module, gm: torch.nn.Module, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    with torch.no_grad():
        torch.testing.assert_close(gm(x.clone()), model(x.clone()))


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_batch_norm_then_inplace_relu_fuses(frontend):
    model = _randomize_bn(ConvBatchNormReLU())
    a = analyze(model, (2, 3, 6, 6), capture=frontend)
    assert [c.ops for c in a.clusters] == [("batch_norm", "relu", "mul")]
    assert not any(n.kind is OpKind.INPLACE for n in a.graph.nodes)
    _same_results(model, a.graph_module, (2, 3, 6, 6))


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_mbconv_with_inplace_silu_and_hardswish_fuses(frontend):
    model = _randomize_bn(InvertedResidual())
    a = analyze(model, (2, 8, 6, 6), capture=frontend)
    chains = {c.ops for c in a.clusters}
    assert ("batch_norm", "silu") in chains
    assert any(ops[:2] == ("batch_norm", "hardswish") for ops in chains)
    assert not any(n.kind is OpKind.INPLACE for n in a.graph.nodes)
    _same_results(model, a.graph_module, (2, 8, 6, 6))


def test_a_chained_inplace_method_is_rewritten_and_fuses():
    class Chained(nn.Module):
        def forward(self, x):
            return (x * 2.0).relu_().sigmoid()

    for frontend in FRONTENDS:
        a = analyze(Chained(), (4, 8), capture=frontend)
        assert [c.ops for c in a.clusters] == [("mul", "relu", "sigmoid")], frontend
        _same_results(Chained(), a.graph_module, (4, 8))


def test_export_points_later_readers_at_the_mutated_value_so_it_fuses():
    for model in (MethodChain(), MutatedAfterRead()):
        a = analyze(model, (4, 8), capture="export")
        assert len(a.clusters) == 1 and "relu" in a.clusters[0].ops
        _same_results(model, a.graph_module, (4, 8))


@pytest.mark.parametrize("model", [MethodChain(), MutatedAfterRead()], ids=type)
def test_fx_mutation_of_a_value_read_later_is_rejected_by_name(model):
    # Issue 16.5: FX records the later read as reading the old value; the op stays in
    # place and no kernel may span it.
    a = analyze(model, (4, 8), capture="fx")
    assert any(n.kind is OpKind.INPLACE and n.op == "relu_" for n in a.graph.nodes)
    assert all("relu_" not in c.nodes for c in a.clusters)
    named = [r for r in a.rejections if r.check == "aliasing" and "`.relu_()`" in r.reason]
    assert named
    # No cluster spans the mutation: each lies wholly before or after it.
    relu = a.graph.position("relu_")
    for c in a.clusters:
        positions = [a.graph.position(n) for n in c.nodes]
        assert max(positions) < relu or min(positions) > relu
    _same_results(model, a.graph_module, (4, 8))


def test_augmented_assignment_under_export_fuses():
    a = analyze(AugmentedAssign(), (4, 8), capture="export")
    assert [c.ops for c in a.clusters] == [("mul", "add", "sigmoid")]
    _same_results(AugmentedAssign(), a.graph_module, (4, 8))


def test_mutation_through_a_view_is_rejected_by_name():
    a = analyze(MutatesThroughView(), (4, 8), capture="fx")
    assert all("mul_1" not in c.nodes or "mul" not in c.nodes for c in a.clusters)
    hits = [r for r in a.rejections if r.check == "aliasing" and ".relu_()" in r.reason]
    line = inspect.getsourcelines(MutatesThroughView.forward)[1]
    assert any(f"mutates `mul` (line {line + 1}) through `view` (line {line + 3}) in place"
               in r.reason for r in hits)
    _same_results(MutatesThroughView(), a.graph_module, (4, 8))


def test_mutation_of_a_model_input_stays_in_place_and_is_rejected():
    a = analyze(MutatesInput(), (4, 8), capture="fx")
    mul = next(n for n in a.graph.nodes if n.op.startswith("mul"))
    assert mul.kind is OpKind.INPLACE
    assert a.clusters == ()
    assert [(r.check, r.culprits) for r in a.rejections] == [("aliasing", (mul.name,))]
    assert re.search(r"`\.mul_\(\)` \(line \d+\) mutates its input in place",
                     a.rejections[0].reason)


SOURCE = '''\
import torch.nn as nn
import torch.nn.functional as F


class KeywordInPlace(nn.Module):
    def forward(self, x):
        y = x * 2.0
        y = F.relu(y, inplace=True)
        return y + 1.0


class ChainedInPlace(nn.Module):
    def forward(self, x):
        y = (x * 2.0).relu_()
        return y + 1.0
'''


def _mapping(tmp_path, name):
    from fusion_core.load import load_model
    from fusion_core.sourcemap.mapping import map_clusters

    path = tmp_path / "inplace_model.py"
    path.write_text(SOURCE)
    a = analyze(load_model(path, name), (4, 8))
    (mapping,) = map_clusters(a)
    return a, mapping


def test_an_inplace_keyword_call_maps_to_an_exact_edit(tmp_path):
    a, m = _mapping(tmp_path, "KeywordInPlace")
    assert a.clusters[0].ops == ("mul", "relu", "add")
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(x)"


def test_an_inplace_method_on_a_temporary_maps_to_an_exact_edit(tmp_path):
    # `.relu_()` overwrites the product, which nothing else reads: the kernel's new tensor
    # computes the same model.
    a, m = _mapping(tmp_path, "ChainedInPlace")
    assert a.clusters[0].ops == ("mul", "relu", "add")
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(x)"


class MutatesAFlattenedView(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.flat = nn.Flatten()

    def forward(self, x):
        h = x * 2.0
        self.flat(h).relu_()  # writes `h` through the view
        return h.sigmoid()


def test_inplace_on_a_view_module_output_stays_in_place():
    a = analyze(MutatesAFlattenedView(), (4, 2, 4), capture="fx")
    assert [n.op for n in a.graph.nodes if n.kind is OpKind.INPLACE] == ["relu_"]
    assert a.clusters == ()  # the sigmoid reads `h` after the ReLU wrote it
    line = inspect.getsourcelines(MutatesAFlattenedView.forward)[1]
    assert any(f"mutates `mul` (line {line + 1}) through `self.flat` (line {line + 2})"
               in r.reason for r in a.rejections)
    _same_results(MutatesAFlattenedView(), a.graph_module, (4, 2, 4))


class MutatesBetweenCasts(nn.Module):
    """`.mul_()` writes the `.half()` result between it and `.float()`: both are the graph's
    `to` nodes (`half`, `float_1`), which the user never wrote."""

    def forward(self, x):
        h = (x * 2.0).half()
        h.mul_(2)
        return h.float() + 1.0


def test_mutation_between_casts_names_them_as_written():
    a = analyze(MutatesBetweenCasts(), (4, 8), capture="fx")
    line = inspect.getsourcelines(MutatesBetweenCasts.forward)[1]
    hits = [r.reason for r in a.rejections if r.check == "aliasing" and "between" in r.reason]
    assert hits, [r.reason for r in a.rejections]
    assert all(f"mutates `.half()` (line {line + 1})" in r and "float_1" not in r
               for r in hits)
    assert any(f"(before `.float()` (line {line + 3}))" in r for r in hits)
