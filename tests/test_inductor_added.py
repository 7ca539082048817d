"""Inductor's kernel doing the work of an opaque call of ours is not our "same group".

The match compared compute ops only: a UNet decoder's bilinear `F.interpolate` and skip
`torch.cat` lowered into the GroupNorm kernel, and a MoE router's `.scatter()` lowered into the
sum→div kernel, were invisible, and both clusters were called "same group". Two real CPU
compiles; the converse (a GroupNorm→SiLU Inductor adds nothing to stays "same group") is
tests/test_inductor_group_norm.py's, and a nearest upsample we read as a view is ours too.
"""

from __future__ import annotations

import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.inductor.capture import capture
from fusion_core.inductor.match import DIFFERENT, SAME, match
from fusion_core.pipeline import analyze


class Decoder(nn.Module):
    def forward(self, x, skip):
        h = torch.cat([F.interpolate(x, scale_factor=2), skip], 1)
        return F.silu(F.group_norm(h, 8))


class BilinearDecoder(nn.Module):
    def forward(self, x, skip):
        h = torch.cat([F.interpolate(x, scale_factor=2, mode="bilinear"), skip], 1)
        return F.silu(F.group_norm(h, 8))


class Router(nn.Module):
    def forward(self, idx, vals):
        w = torch.zeros(4, 16).scatter(1, idx, vals)
        return w / w.sum(-1, keepdim=True)


def test_a_decoder_bilinear_upsample_inside_the_norm_kernel_is_what_inductor_adds():
    torch.manual_seed(0)
    model = BilinearDecoder()
    inputs = [torch.randn(2, 8, 4, 4), torch.randn(2, 8, 8, 8)]
    analysis = analyze(model, *inputs, capture="fx")
    a = match(analysis, capture(model, inputs))
    (fed,) = a.clusters
    assert fed.verdict == DIFFERENT, str(fed)
    # the reason is the call's own: its mode, and the fix
    assert re.search(r"also computes `F\.interpolate` \(line \d+\) \(opaque to us: "
                     r"mode='bilinear' blends elements.*mode='nearest' with an integer "
                     r"scale_factor", fed.detail), fed.detail
    assert "`add` (line" not in fed.detail  # the upsample's index math is the upsample
    # the cat is ours now (whole channel groups for the GroupNorm): only the upsample is added
    assert analysis.clusters[0].ops == ("cat", "group_norm", "silu")
    assert "`cat`" not in fed.detail, fed.detail
    assert a.count("exact") == 0 and a.count("partial") == 1


def test_a_decoder_nearest_upsample_we_fuse_is_no_work_inductor_adds():
    # `F.interpolate(x, scale_factor=2)` is a view of ours now (``ir/upsample.py``): our
    # cluster reads it as Inductor's kernel does, so nothing is named as added.
    torch.manual_seed(0)
    model = Decoder()
    inputs = [torch.randn(2, 8, 4, 4), torch.randn(2, 8, 8, 8)]
    analysis = analyze(model, *inputs, capture="fx")
    a = match(analysis, capture(model, inputs))
    (fed,) = a.clusters
    assert analysis.clusters[0].ops == ("interpolate", "cat", "group_norm", "silu")
    assert "interpolate" not in fed.detail, fed.detail
    assert fed.verdict == SAME, str(fed)


def test_a_router_scatter_inside_the_sum_div_kernel_is_what_inductor_adds():
    model = Router()
    inputs = [torch.randint(0, 16, (4, 2)), torch.rand(4, 2)]
    analysis = analyze(model, *inputs, capture="fx")
    (v,) = match(analysis, capture(model, inputs)).clusters
    assert v.verdict == DIFFERENT, str(v)
    assert re.search(r"also computes `\.scatter\(\)` \(line \d+\) \(opaque to us", v.detail), \
        v.detail
