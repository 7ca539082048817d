"""Inductor's GroupNorm (`aten.native_group_norm`) is our `group_norm`.

Unmapped, its nodes counted as no compute: `--vs-inductor` said a diffusion block's
`GroupNorm → SiLU` was "not fused by Inductor: each op is its own kernel" and that a
`group_norm` was "not in any Inductor kernel", while Inductor fused both. A UNet decoder's
GroupNorm after the skip `torch.cat` reads the concatenation Inductor computes in the same
kernel; it was said to be "written into `cat`'s output". Two real compiles on CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.agreement import agreement
from fusion_core.inductor.op_names import is_compute, op_name, ops_from_name
from fusion_core.pipeline import analyze


class NormActBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(4, 16)
        self.conv = nn.Conv2d(16, 16, 3, padding=1)
        self.norm2 = nn.GroupNorm(4, 16)

    def forward(self, x, emb):
        h = self.norm1(x)
        h = F.silu(h)
        h = self.conv(h)
        h = h + emb[:, :, None, None]
        return self.norm2(h)


class SkipCatNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(4, 16)

    def forward(self, x, skip):
        h = torch.cat([x * 2.0, skip], dim=1)
        return F.silu(self.norm(h))


@pytest.fixture(scope="module")
def compared():
    return agreement(analyze(NormActBlock(), (2, 16, 8, 8), (2, 16)))


def test_native_group_norm_is_our_group_norm():
    assert op_name("native_group_norm") == "group_norm" and is_compute("group_norm")
    assert ops_from_name("cpp_fused_add_native_group_norm_3") == ("add", "group_norm")


def test_group_norm_clusters_are_the_same_group_as_inductors(compared):
    assert [v.verdict for v in compared.clusters] == ["same group", "same group"], [
        str(v) for v in compared.clusters]
    assert compared.count("exact") == 2 and compared.not_fused == ()


def test_a_norm_reading_a_fused_cat_is_not_written_into_it():
    a = agreement(analyze(SkipCatNorm(), (2, 8, 4, 4), (2, 8, 4, 4)))
    # Once our `mul → cat` wrote the cat (a cat was read through no channel groups), and the
    # norm read it; now, as in Inductor, all four are one kernel.
    (v,) = a.clusters
    assert v.verdict == "same group", str(v)
    assert "written into" not in v.detail, v.detail


def test_a_norm_reading_a_cat_whose_groups_straddle_its_operands_is_inductors_group():
    # 6 + 10 channels in groups of 4: a group holds channels of both operands. Inductor does
    # all four in one kernel; ours too (each element selects its operand by its channel),
    # where once they wrote the cat, then normalized it.
    a = agreement(analyze(SkipCatNorm(), (2, 6, 4, 4), (2, 10, 4, 4)))
    (v,) = a.clusters
    assert v.verdict == "same group", str(v)
    assert "written into" not in v.detail, v.detail
