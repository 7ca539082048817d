"""A constant written first (`1 + scale`, `2.0 * g`) under torch.export.

Export records the tensor first (`aten.add.Tensor(scale, 1)`); matched in source order, the
source edit passed the constant where the kernel takes the tensor (`cluster0(x, 1, shift)`,
with the note "built into the kernel: scale = 1") and `--apply` failed its check.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from fusion_core.pipeline import analyze
from fusion_core.sourcemap import map_clusters


class Modulate(nn.Module):  # DiT's adaLN modulation
    def forward(self, x, scale, shift):
        h = x * (1 + scale) + shift
        return torch.relu(h)


class Doubled(nn.Module):
    def forward(self, x):
        return torch.relu(2.0 * x)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_leading_constant_stays_a_constant_in_the_source_edit(capture):
    a = analyze(Modulate(), (4, 8), (4, 8), (4, 8), capture=capture)
    (m,) = map_clusters(a)
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(scale, x, shift)"
    assert m.baked == ()  # was `scale = 1`: the tensor taken for the constant


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_product_with_the_constant_first_maps_exactly(capture):
    (m,) = map_clusters(analyze(Doubled(), (4, 8), capture=capture))
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(x)"
