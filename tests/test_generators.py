"""Generators (`arange`): values made from their own index, fused with what reads them.

A decoder makes its positions once (`arange(n) + past`) and reads them in several places;
Inductor recomputes them inside each kernel that reads them. These tests check the op
class, the copies each reader gets (`ir/generators.py`), kernels that compute the values
from the index (with and without tensor inputs, through slices, in a reduction), the
validation gates, and that no source edit is offered for such a kernel.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
from codegen_harness import check_model

from fusion_core.ir.graph import OpKind
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze
from fusion_core.sourcemap import POINTER, map_clusters
from fusion_core.validate import validate


class PositionsAdded(nn.Module):
    """Positions broadcast along the hidden dim, added to the activations."""

    def forward(self, x):
        pos = torch.arange(x.shape[1], device=x.device) + 0
        return torch.sin(x * 2 + pos.float().unsqueeze(-1))


class PositionsOnly(nn.Module):
    """The rotary embedding's positions: made, cast and fed to a matmul (no tensor input)."""

    def forward(self, x):
        pos = torch.arange(x.shape[1], device=x.device) + 0
        freqs = pos[None, :, None].float()
        return torch.matmul(x.new_ones(1, 8, 1), freqs.transpose(1, 2))


class SharedPositions(nn.Module):
    """One position tensor read by two kernels apart (an opaque op between) and by an
    opaque op: each kernel gets its own copy, the opaque reader the original."""

    def forward(self, x):
        pos = torch.arange(x.shape[-1], device=x.device) + 1
        a = torch.relu(x * pos)
        b = torch.cumprod(a, dim=-1)  # opaque to us: a kernel boundary
        return torch.exp(b - pos) + torch.flip(pos, [0])  # flip: opaque


class TwoReadersOneKernel(nn.Module):
    """Positions read by two ops that end in one kernel (after an opaque cumsum): the
    kernel computes them once, not once per reader."""

    def forward(self, x):
        pos = torch.arange(x.shape[-1], device=x.device) * 2 + 1
        return torch.cumsum(x, -1).sin() + pos + x.cos() * pos


class SlicedRange(nn.Module):
    """A strided slice of a range, inside the group: the offset and step are literals."""

    def forward(self, x):
        steps = torch.arange(40, device=x.device)[4:36:2]
        return x * steps.float() + 1


class FloatRange(nn.Module):
    def forward(self, x):
        return torch.tanh(x * torch.arange(0.0, 8.0, 0.5, device=x.device) - 1)


class IntRangeFloatBounds(nn.Module):
    """An integer range with a float start and step: torch truncates both first
    (0, 1, 2, 3, 4), not 0.5 + 1.5 i."""

    def forward(self, x):
        return torch.sin(x + torch.arange(0.5, 5, 1.5, dtype=torch.int64, device=x.device))


class HalfRange(nn.Module):
    """A float16 range past 2048 holds rounded values (2049 is 2048): the kernel rounds too."""

    def forward(self, x):
        return x + torch.arange(2100, dtype=torch.float16, device=x.device).float()


class SoftmaxBias(nn.Module):
    """A generated bias inside a reduction kernel's row."""

    def forward(self, x):
        return torch.softmax(x - torch.arange(x.shape[-1], device=x.device) * 0.1, dim=-1)


class FirstPositionPerRow(nn.Module):
    """transformers' masking_utils: `position_ids[:, :1] - 1` of positions expanded over the
    batch. The narrowed column has strides (0, 1) over (B, 1): the kernel's step along the
    batch is the expanded 0, not the size-1 column's 1 (every row's value is -1)."""

    def forward(self, x):
        pos = (torch.arange(x.shape[1], device=x.device) + 0).unsqueeze(0)
        first = pos.expand(x.shape[0], -1)[:, :1] - 1
        return x[:, :1] * first  # the iteration shape is (B, 1): the column itself


def _cluster_with(analysis, op: str):
    return next(c for c in analysis.clusters if op in c.ops)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_arange_is_a_generator_under_both_captures(capture: str) -> None:
    analysis = analyze(PositionsAdded(), InputSpec((2, 16, 8)), capture=capture)
    gens = [n for n in analysis.graph.nodes if "arange" in n.target]
    if capture == "fx":  # FX passes the length as a node (`x.shape[1]`): not generated
        assert gens and all(n.kind is OpKind.OPAQUE for n in gens)
        return
    assert [n.kind for n in gens] == [OpKind.GENERATOR]
    assert not gens[0].refs  # no operands: nothing to load
    cluster = _cluster_with(analysis, "arange")
    assert cluster.inputs == ("x",)
    assert {"arange", "add", "to", "sin"} <= set(cluster.ops)


def test_fx_arange_with_constant_length_and_device_of_a_tensor_is_generated() -> None:
    class Fixed(nn.Module):
        def forward(self, x):
            return torch.sin(x + torch.arange(8, device=x.device))

    analysis = analyze(Fixed(), InputSpec((4, 8)), capture="fx")
    (gen,) = [n for n in analysis.graph.nodes if n.op == "arange"]
    assert gen.kind is OpKind.GENERATOR
    assert "arange" in _cluster_with(analysis, "arange").ops


@pytest.mark.parametrize("model, shape", [
    (PositionsAdded(), (2, 16, 8)), (PositionsOnly(), (2, 16, 8)), (SlicedRange(), (3, 16)),
    (FloatRange(), (3, 16)), (SoftmaxBias(), (4, 24)), (SharedPositions(), (3, 10)),
    (IntRangeFloatBounds(), (2, 5)), (HalfRange(), (1, 2100)), (FirstPositionPerRow(), (3, 16)),
], ids=["with-input", "no-input", "sliced", "float", "softmax", "shared", "int-float-bounds",
        "float16", "expanded-then-narrowed"])
def test_generated_kernels_match_eager(model: nn.Module, shape, tmp_path: Path) -> None:
    # check_model runs every cluster's kernel against its eager subgraph (poisoned outputs)
    x = torch.randn(shape)
    checked = check_model(model, (x,), tmp_path, capture="export")
    assert any("arange" in c.ops for c in checked.analysis.clusters)


def test_a_kernel_without_inputs_takes_the_device(tmp_path: Path) -> None:
    analysis = analyze(PositionsOnly(), InputSpec((2, 16, 8)), capture="export")
    cluster = _cluster_with(analysis, "arange")
    assert cluster.inputs == ()
    assert cluster.ops[:2] == ("arange", "add") and cluster.ops[-1] == "to"
    from fusion_core.codegen import generate

    source = generate(analysis, cluster).source
    assert f"def cluster{cluster.index}(device):" in source
    assert "Inputs: none." in source and "Generated from the index" in source


def test_a_kernel_without_inputs_takes_the_device_by_name(tmp_path: Path) -> None:
    from codegen_harness import DEVICE

    from fusion_core.codegen import generate, load_kernel, write_kernels

    analysis = analyze(PositionsOnly(), InputSpec((2, 16, 8)), capture="export")
    kernel = generate(analysis, _cluster_with(analysis, "arange"))
    launch = getattr(load_kernel(write_kernels([kernel], tmp_path)[0]), kernel.name)
    want = torch.arange(16, dtype=torch.float32)
    # a string as the docstring's `device` (what `torch.arange(n, device="cuda")` passes)
    for device in (DEVICE, torch.device(DEVICE)):
        got = launch(device)
        assert got.device.type == DEVICE and torch.equal(got.cpu().flatten(), want)


def test_each_computing_reader_gets_its_own_copy() -> None:
    analysis = analyze(SharedPositions(), InputSpec((3, 10)), capture="export")
    g = analysis.graph
    ranges = [n for n in g.nodes if n.op == "arange"]
    original = next(n for n in ranges if not n.copy_of)
    copies = [n for n in ranges if n.copy_of]
    assert len(copies) == 2 and all(n.copy_of == original.name for n in copies)
    made = {n.name for n in g.nodes if n.op in ("arange", "add")}
    for op in ("relu", "exp"):  # each kernel makes the positions itself, reads none of them
        cluster = _cluster_with(analysis, op)
        assert "arange" in cluster.ops and original.name not in cluster.nodes
        assert not set(cluster.inputs) & made, cluster.inputs
    # the opaque flip still reads the original, so the model computes it once there
    flip = next(n for n in g.nodes if "flip" in n.target)
    assert g[flip.refs[0]].copy_of == "" and g[g[flip.refs[0]].refs[0]] is original


def test_validation_passes_with_and_without_inputs() -> None:
    for model, shape in ((PositionsAdded(), (2, 16, 8)), (PositionsOnly(), (2, 16, 8))):
        analysis = analyze(model, InputSpec(shape), capture="export")
        report = validate(analysis, timing=False)
        assert report.model.passed, report.model.detail
        assert report.results and all(r.mode != "skipped" for r in report.results)
        assert all(g.passed for r in report.results for g in r.gates), report.results


def test_no_source_edit_is_offered_for_a_generated_kernel(tmp_path: Path) -> None:
    analysis = analyze(PositionsAdded(), InputSpec((2, 16, 8)), capture="export")
    cluster = _cluster_with(analysis, "arange")
    mapping = next(m for m in map_clusters(analysis) if m.cluster_index == cluster.index)
    assert mapping.quality == POINTER
    assert "makes its values from the index" in mapping.reason
    assert "(16,)" in mapping.reason


def test_a_copy_in_its_originals_kernel_is_taken_back(tmp_path: Path) -> None:
    checked = check_model(TwoReadersOneKernel(), (torch.randn(3, 8),), tmp_path,
                          capture="export")
    (cluster,) = [c for c in checked.analysis.clusters if "arange" in c.ops]
    assert cluster.ops.count("arange") == 1 and {"sin", "cos"} <= set(cluster.ops)
    assert not any(checked.analysis.graph[n].copy_of for n in cluster.nodes)


def test_a_copy_that_joined_no_reader_is_taken_back() -> None:
    from fusion_core.ir.generators import stray_copies

    analysis = analyze(SharedPositions(), InputSpec((3, 10)), capture="export")
    g = analysis.graph
    copies = [n.name for n in g.nodes if n.copy_of and n.op in ("arange", "add")]
    relu = _cluster_with(analysis, "relu")
    mine = [c for c in copies if c in relu.nodes]
    assert mine and stray_copies(g, [c.nodes for c in analysis.clusters], copies) == []
    # The same copies in a kernel of their own (their reader's kernel refused them): stray,
    # the chain's tail first so that undoing it leaves no reader of an erased node.
    alone = [tuple(mine)] + [c.nodes for c in analysis.clusters if c is not relu]
    stray = stray_copies(g, alone, copies)
    assert set(stray) == set(mine) and [g[n].op for n in stray] == ["add", "arange"]
