"""Writes into a tensor the registry has no op for: item assignment and in-place calls.

`a[:, 0] = 1.0` exports as `aten.fill_` on a `select` of `a`; `a[:, :2] = b` as `copy_`,
`a[mask] = 0.0` as `index_put_`; FX records `.fill_()`, `.copy_()`, `.zero_()`,
`.scatter_()` as methods. Each was an opaque call with no mark that it writes, so the
mutation check missed it and a cluster spanned the write, computing the ops after it from
the value before it (the apply fuzz's "FAILED model numerics"). Each is an in-place op now:
no kernel spans it, and the rejection names the statement the user wrote.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn as nn

from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze
from fusion_core.validate import validate


class SetItem(nn.Module):
    def forward(self, h):
        a = torch.relu(h) * 2.0
        a[:, 0] = 1.0
        a = a + 1.0
        return a


class SliceScaled(nn.Module):
    def forward(self, h):
        a = torch.relu(h) * 2.0
        a[..., :2] *= 0.5
        a = a + 1.0
        return a


class SliceCopied(nn.Module):
    def forward(self, h):
        a = torch.relu(h) * 2.0
        a[:, :2] = h[:, 2:4]
        a = a + 1.0
        return a


class MaskAssigned(nn.Module):
    def forward(self, h):
        a = torch.relu(h) * 2.0
        a[h > 0.5] = 0.0
        a = (a + 1.0).sigmoid()
        return a


class FilledView(nn.Module):
    def forward(self, h):
        a = torch.relu(h) * 2.0
        a[:, 0].fill_(1.0)
        a = a + 1.0
        return a


class CopiedView(nn.Module):
    def forward(self, h):
        a = torch.relu(h) * 2.0
        a[:, :2].copy_(h[:, 2:4])
        a = a + 1.0
        return a


class Zeroed(nn.Module):
    def forward(self, h):
        a = torch.relu(h) * 2.0
        b = a.sigmoid()
        a.zero_()
        return b + a


class Scattered(nn.Module):
    def forward(self, h):
        a = torch.relu(h) * 2.0
        a.scatter_(1, torch.zeros(4, 1, dtype=torch.long), 5.0)
        a = a + 1.0
        return a


# FX cannot trace an item assignment (a Proxy takes none): those models run under export.
# Each of these fused a kernel across the write, which then failed the model check.
SPANNED = [(SetItem, "export"), (SliceCopied, "export"), (FilledView, "fx"),
           (FilledView, "export"), (CopiedView, "fx"), (CopiedView, "export"), (Zeroed, "fx"),
           (Scattered, "fx")]
# These kernels happened to end before the write, but it was an opaque call all the same.
UNMARKED = [(MaskAssigned, "export"), (Zeroed, "export"), (Scattered, "export")]


def _spans(a, write: str) -> bool:
    where = a.graph.position(write)
    return any(min(ps) < where < max(ps)
               for c in a.clusters if (ps := [a.graph.position(n) for n in c.nodes]))


def _ids(cases):
    return [f"{m.__name__}-{c}" for m, c in cases]


@pytest.mark.parametrize("model, capture", SPANNED, ids=_ids(SPANNED))
def test_no_kernel_spans_a_write_and_every_kernel_verifies(model, capture):
    a = analyze(model(), (4, 8), capture=capture)
    writes = [n.name for n in a.graph.nodes if n.kind is OpKind.INPLACE]
    assert writes and not any(_spans(a, w) for w in writes)
    report = validate(a, timing=False)
    assert report.results and all(r.usable for r in report.results)
    assert report.model.passed


@pytest.mark.parametrize("model, capture", UNMARKED, ids=_ids(UNMARKED))
def test_a_write_the_registry_lacks_is_an_in_place_op(model, capture):
    a = analyze(model(), (4, 8), capture=capture)
    writes = [n for n in a.graph.nodes if n.kind is OpKind.INPLACE]
    assert [n.refs[0] for n in writes] == ["mul"]
    assert not any(_spans(a, n.name) for n in writes)


@pytest.mark.parametrize("capture", ["export", "auto"])
def test_an_item_assignment_is_an_in_place_write_named_as_written(capture):
    a = analyze(SetItem(), (4, 8), capture=capture)
    fill = next(n for n in a.graph.nodes if n.op == "fill_")
    assert fill.kind is OpKind.INPLACE
    line = inspect.getsourcelines(SetItem.forward)[1] + 2
    reasons = [r.reason for r in a.rejections if r.check == "aliasing"]
    assert any(f"`a[:, 0] = 1.0` (line {line}) mutates `mul` (line {line - 1}) through "
               f"`a[:, 0]` (line {line}) in place" in r for r in reasons), reasons


def test_an_augmented_item_assignment_is_named_as_written():
    a = analyze(SliceScaled(), (4, 8), capture="export")
    line = inspect.getsourcelines(SliceScaled.forward)[1] + 2
    assert any(f"`a[..., :2] *= 0.5` (line {line}) mutates" in r.reason
               for r in a.rejections if r.check == "aliasing")


def test_an_in_place_method_the_registry_lacks_is_named_by_its_call():
    a = analyze(FilledView(), (4, 8), capture="fx")
    assert any("`.fill_()` (line" in r.reason and "in place between" in r.reason
               for r in a.rejections if r.check == "aliasing")
