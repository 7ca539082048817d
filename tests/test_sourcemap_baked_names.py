"""A name the kernel would hold as a constant must hold that value in every call.

`s = 0.25` then `if h.shape[0] > 4: s = 0.5` above `return torch.relu(h * s) + 1.0`: the
traced call took one path, and `return cluster0(h)` held its 0.25 for batches where eager
multiplies by 0.5 (`--apply`'s own check, run at the traced shape, passed it). Such a line
stays a pointer naming the bindings (``sourcemap/baked_names.py``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from fusion_core.pipeline import analyze
from fusion_core.sourcemap import map_clusters

W = torch.full((8,), 3.0)


class Rebound(nn.Module):
    def forward(self, h):
        s = 0.25
        if h.shape[0] > 4:
            s = 0.5
        return torch.relu(h * s) + 1.0


class InTheLoop(nn.Module):
    def forward(self, h):
        out = h
        for s in (0.5,):
            out = torch.relu(h * s) + 1.0
        return out


class Chained(nn.Module):
    def forward(self, h):
        k = 0.5
        s = k * 2.0
        return torch.relu(h * s) + 1.0


class ChainedRebound(nn.Module):
    def forward(self, h):
        k = 0.5
        if h.shape[0] > 4:
            k = 1.0
        s = k * 2.0
        return torch.relu(h * s) + 1.0


class NestedScope(nn.Module):  # `W` of the nested function is not the module's tensor
    def forward(self, h):
        def unused():
            W = 2.0  # noqa: N806 - the nested binding of the same name is the point
            return W

        scale = h.shape[-1] ** -0.5
        return torch.relu(W * scale + h)


def _only(module: nn.Module, capture: str = "export"):
    (m,) = map_clusters(analyze(module, (4, 8), capture=capture))
    return m


def test_a_name_bound_twice_keeps_its_line_a_pointer_naming_both_lines():
    m = _only(Rebound())
    assert not m.exact
    assert m.reason.startswith("`s` is bound at lines ")
    assert "the kernel would hold the 0.25 of the traced call in every call" in m.reason


def test_a_loop_target_is_named_as_changing_from_pass_to_pass():
    m = _only(InTheLoop())
    assert not m.exact
    assert "changes from one pass of the loop to the next" in m.reason


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_names_bound_once_above_the_line_are_held_by_the_kernel(capture):
    m = _only(Chained(), capture)
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(h)"


def test_a_name_read_by_a_held_name_counts_too():
    m = _only(ChainedRebound())
    assert not m.exact
    assert m.reason.startswith("`k` is bound at lines ")


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_nested_functions_binding_is_not_the_modules_name(capture):
    """`W * scale`: the module's tensor times a number; the nested `W = 2.0` must not make
    `W` the number (that paired `scale` with the tensor, held `W = 0.35…` and called
    `cluster0(scale, h)`)."""
    m = _only(NestedScope(), capture)
    assert "W = " not in " ".join(m.baked)
    assert m.replacement is None or "scale" not in m.replacement
