"""`--apply` on lines a model runs once per stage, at each stage's own sizes.

A ResNet's `BasicBlock.forward` runs in every stage: its `bn1 → relu` is one cluster per call,
64 channels in one stage and 512 at 1×1 in the last. One edit of those lines calls one kernel
for every stage (fusion_core/sourcemap/serves.py asks the kernel's launcher whether it runs
each stage's shapes); before, any other size made the lines a pointer.
"""

from __future__ import annotations

import textwrap

import pytest
from apply_checks import apply_net, bn_args, same_outputs

from fusion_core import codegen
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.apply_plan import plan_apply

STAGES = """\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.conv(x)
        out = self.bn(out)
        out = self.relu(out)
        return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        # 4 channels at 8x8, 8 at 4x4, 16 at 1x1: the last stage has no spatial broadcast
        self.stages = nn.Sequential(Block(3, 4, 1), Block(4, 8, 2), Block(8, 16, 4))

    def forward(self, x):
        return self.stages(x)
"""

WIDTHS = """\
import torch
import torch.nn as nn


class Soft(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2.0, dim=-1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Soft()
        self.b = Soft()

    def forward(self, x, z):
        return self.a(x), self.b(z)
"""


def test_one_edit_of_a_block_serves_every_stage_at_its_own_size(tmp_path):
    path = tmp_path / "stages.py"
    path.write_text(STAGES)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert "Not applied" not in result.output, result.output
    rewritten = path.read_text()
    # the kernel computes BatchNorm as eval mode does: the lines as written stay for a block
    # in train mode, under `else:` only (sourcemap/train_mode.py)
    assert ("        out = self.conv(x)\n"
            "        if not self.bn.training:\n"
            f"            out = cluster0(out, {bn_args('self.bn')})\n"
            "        else:\n"
            "            out = self.bn(out)\n"
            "            out = self.relu(out)\n"
            "        return out\n") in rewritten, rewritten
    assert rewritten.count("out = self.bn(out)") == 1, rewritten
    # one call for the three stages: `-1` keeps the parameters' text the same at any width
    assert rewritten.count("cluster0(") == 1 and "cluster1" not in rewritten
    assert "self.bn.weight.reshape(-1, 1, 1)" in rewritten

    same_outputs(tmp_path, path, STAGES)


def test_lines_whose_kernel_cannot_run_another_calls_size_are_left_naming_it(tmp_path):
    path = tmp_path / "widths.py"
    path.write_text(WIDTHS)
    # 16 columns fit one block; 40000 need the column loop the first kernel was not made with
    analysis = analyze_file(path, [InputSpec((4, 16)), InputSpec((2, 40000))],
                            class_name="Net")
    mappings = map_clusters(analysis)
    assert [m.exact for m in mappings] == [True, True]  # one range, both calls
    kernels = {c.index: codegen.generate(analysis, c) for c in analysis.clusters}
    verified = {i: (True, "verified") for i in kernels}
    plan = plan_apply(analysis, mappings, path, kernels, verified)
    assert plan.edits == ()
    reasons = {s.cluster: s.reason for s in plan.skipped}
    assert set(reasons) == {0, 1}
    assert reasons[0] == reasons[1]
    assert reasons[0].startswith("the same lines run as cluster 0 and as cluster 1 (at "
                                 "2×40000), which `cluster0`'s kernel cannot run: ")
    assert "40000 columns" in reasons[0]


def test_a_stage_at_other_sizes_is_checked_through_the_launcher_not_refused(tmp_path):
    # The mapping itself no longer refuses other sizes; ranks and dtypes must still match.
    path = tmp_path / "stages.py"
    path.write_text(textwrap.dedent(STAGES))
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))], class_name="Net")
    mappings = map_clusters(analysis)
    assert len(mappings) == 3 and all(m.exact for m in mappings), [m.reason for m in mappings]
    # The call goes to the stage with the fewest size-1 dims (not the 1x1 one).
    assert {m.call for m in mappings} == {"cluster0"}


PASS_THROUGH = """\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, drop):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.drop_block = nn.Identity()
        self.act = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        x = self.drop_block(x)
        x = self.act(x)
        x = self.drop(x)
        return self.conv(x)


class Net(nn.Module):
    def __init__(self, drop=0.0):
        super().__init__()
        self.block = Block(drop)

    def forward(self, x):
        return self.block(x)
"""


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_modules_that_return_their_input_are_read_through_as_timm_blocks_use_them(
        tmp_path, capture):
    # timm's BasicBlock calls `self.drop_block(x)` and `self.aa(x)`, nn.Identity by default;
    # the capture has no op for them (export has none for an eval dropout either), so the
    # lines did not match the graph.
    path = tmp_path / "passes.py"
    path.write_text(PASS_THROUGH)
    mappings = map_clusters(analyze_file(path, [InputSpec((2, 4, 8, 8))], class_name="Net",
                                         capture=capture))
    (m,) = mappings
    assert m.exact, m.reason
    assert m.original.splitlines() == ["        x = self.bn(x)", "        x = self.drop_block(x)",
                                       "        x = self.act(x)", "        x = self.drop(x)"]
    assert m.replacement == (
        "        if not self.bn.training and not self.drop.training:\n"
        f"            x = cluster0(x, {bn_args('self.bn')})\n"
        "        else:\n"
        "            x = self.bn(x)\n"
        "            x = self.drop_block(x)\n"
        "            x = self.act(x)\n"
        "            x = self.drop(x)"), m.replacement
