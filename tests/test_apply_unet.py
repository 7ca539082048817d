"""`--apply` on a diffusion UNet's residual block (GroupNorm → SiLU → conv, a time embedding
broadcast in with `[:, :, None, None]`, a residual add), two blocks in a row.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from apply_checks import apply_net, same_outputs

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters

RESBLOCK = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class ResBlock(nn.Module):
    def __init__(s, ch, temb):
        super().__init__()
        s.n1 = nn.GroupNorm(8, ch)
        s.c1 = nn.Conv2d(ch, ch, 3, padding=1)
        s.t = nn.Linear(temb, ch)
        s.n2 = nn.GroupNorm(8, ch)
        s.c2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(s, x, emb):
        h = s.c1(F.silu(s.n1(x)))
        h = h + s.t(emb)[:, :, None, None]
        h = s.c2(F.silu(s.n2(h)))
        return x + h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, 16, 1)
        self.emb = nn.Linear(16, 32)
        self.b1 = ResBlock(16, 32)
        self.b2 = ResBlock(16, 32)

    def forward(self, x):
        h = self.inp(x)
        emb = self.emb(h.mean((2, 3)))
        h = self.b1(h, emb)
        h = self.b2(h, emb)
        return h
"""


def _maps(path):
    return map_clusters(analyze_file(path, [InputSpec((2, 3, 8, 8))], class_name="Net"))


def test_time_embedding_add_into_the_next_norm_is_one_edit(tmp_path):
    # Before: `s.t(emb)[:, :, None, None]`, the add's other operand, was "not in the
    # cluster", so 0 of 5 clusters applied; now the two blocks' add → group_norm → silu
    # clusters are one exact edit that keeps the subscript as the kernel's argument.
    path = tmp_path / "unet.py"
    path.write_text(RESBLOCK)
    maps = _maps(path)
    exact = sorted(m.cluster_index for m in maps if m.exact)
    assert exact == [1, 3], [m.reason for m in maps]
    assert (maps[1].start, maps[1].end) == (17, 18)
    assert maps[1].replacement == (
        "        h = s.c2(cluster1(h, s.t(emb)[:, :, None, None], "
        "s.n2.weight.reshape(-1, 1, 1), s.n2.bias.reshape(-1, 1, 1)))")
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert "Not applied: clusters 0, 2, 4" in result.output, result.output
    rewritten = path.read_text()
    assert "h = h + s.t(emb)" not in rewritten and "        return x + h\n" in rewritten
    same_outputs(tmp_path, path, RESBLOCK)


def test_a_residual_add_fused_into_the_next_blocks_call_names_both_calls(tmp_path):
    # b1's `return x + h` joins b2's first norm (and, recomputed, b2's residual add): the
    # ops ran in two calls of `ResBlock.forward`, whose lines one edit cannot split.
    path = tmp_path / "unet.py"
    path.write_text(RESBLOCK)
    maps = _maps(path)
    for index, other in ((2, "`group_norm` (line 16)"), (4, "`add` (line 19)")):
        reason = maps[index].reason
        assert not maps[index].exact
        assert reason.startswith(
            "the cluster joins `add` (line 19) of the call at line 33 (`h = self.b1(h, emb)`) "
            f"with {other} of another call at line 34 (`h = self.b2(h, emb)`) of "
            "`ResBlock.forward`"), reason
        assert "write these ops in one function's lines" in reason, reason
