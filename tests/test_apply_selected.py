"""Lines other calls run unfused (sourcemap/selected.py): a norm-and-activation module whose
activation is a SiLU in some blocks, where the analysis fuses both ops, and an identity in
others, where the norm runs alone (timm's BatchNormAct2d; 16 clusters of efficientnet_b0).
The edit used to stay a pointer ("serving that call with this kernel is not supported
yet"); it now runs the kernel where the layer's class is the one the fused calls had.
Kernels run under the Triton interpreter (natively with CUDA)."""

from __future__ import annotations

import types

import torch
import torch.nn as nn
from apply_checks import (
    DEVICE,
    applied_file,
    apply_net,
    original_and_rewritten,
    refused_untouched,
    same_in_train_mode,
    same_outputs,
)
from test_apply import _plan

from fusion_core.sourcemap.apply import rewrite
from fusion_core.sourcemap.selected import class_spelling

NORM_ACT = """\
import torch
import torch.nn.functional as F
from torch import nn


class NormAct(nn.BatchNorm2d):
    def __init__(self, channels, act=True):
        super().__init__(channels)
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x):
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                         False, 0.1, self.eps)
        x = self.act(x)
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = NormAct(8)
        self.conv2 = nn.Conv2d(8, 8, 1, bias=False)
        self.bn2 = NormAct(8, act=False)
        self.conv3 = nn.Conv2d(8, 8, 1, bias=False)
        self.bn3 = NormAct(8)

    def forward(self, x):
        x = self.bn1(self.conv1(x))
        x = self.bn2(self.conv2(x))
        return self.bn3(self.conv3(x)) * 2
"""


def test_the_kernel_runs_where_the_activation_is_the_fused_one(tmp_path):
    path = applied_file(tmp_path, NORM_ACT)
    text = path.read_text()
    assert "        if isinstance(self.act, nn.SiLU) and not self.training:\n" in text, text
    assert ("        else:\n"
            "            x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, "
            "self.bias,\n") in text, text
    same_outputs(tmp_path, path, NORM_ACT)
    before, after = original_and_rewritten(tmp_path, path, NORM_ACT)
    before, after = before.to(DEVICE).train(), after.to(DEVICE).train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(after(x), before(x))
    torch.testing.assert_close(after.bn2.running_mean, before.bn2.running_mean)


def test_the_unfused_call_is_the_one_the_condition_leaves_as_written(tmp_path):
    """The rewritten model with the kernel's function swapped for one that fails: only the
    SiLU blocks call it."""
    path = tmp_path / "net.py"
    path.write_text(NORM_ACT)
    assert "Applied 1 edit to" in apply_net(path).output
    _, after = original_and_rewritten(tmp_path, path, NORM_ACT)
    fused = __import__("sys").modules[type(after).__module__]
    called: list[int] = []
    real = fused.cluster0

    def counting(x, *args):
        called.append(x.shape[1])
        return real(x, *args)

    fused.cluster0 = counting
    try:
        with torch.no_grad():
            after.to(DEVICE)(torch.randn(2, 3, 8, 8, device=DEVICE))
    finally:
        fused.cluster0 = real
    assert len(called) == 2  # bn1 and bn3; bn2's identity runs the lines as written


# The identity block's norm fuses with the residual add of its caller: that cluster runs
# on into other code, so it is no edit of these lines, and its call keeps them as written.
RESIDUAL = NORM_ACT.replace(
    "        x = self.bn2(self.conv2(x))\n",
    "        x = self.bn2(self.conv2(x)) + x\n").replace(
    "        return self.bn3(self.conv3(x)) * 2\n",
    "        return self.conv3(self.bn3(x))\n")
assert "self.conv3(self.bn3(x))" in RESIDUAL


def test_a_call_whose_norm_joins_a_cluster_elsewhere_keeps_the_lines_as_written(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(RESIDUAL)
    result = apply_net(path)
    assert "Applied 1 edit to" in result.output, result.output
    assert "if isinstance(self.act, nn.SiLU) and not self.training:" in path.read_text()
    same_outputs(tmp_path, path, RESIDUAL)


# Each block's activation fused, a ReLU in two blocks and a Hardswish in one: the lines form
# two kernels, no one kernel serves both calls. One edit runs each kernel under its own
# condition (MobileNetV3's BatchNormAct2d, where a ReLU, a Hardswish and an identity follow).
TWO_ACTS = NORM_ACT.replace("nn.SiLU() if act else nn.Identity()",
                            "nn.ReLU() if act else nn.Hardswish()").replace(
    "        return self.bn3(self.conv3(x)) * 2\n",
    "        return self.conv3(self.bn3(self.conv3(x)))\n")
assert "nn.Hardswish()" in TWO_ACTS and "self.conv3(self.bn3(self.conv3(x)))" in TWO_ACTS


def test_lines_forming_a_kernel_per_activation_call_each_under_its_class(tmp_path):
    path = applied_file(tmp_path, TWO_ACTS)
    text = path.read_text()
    assert ("        if isinstance(self.act, nn.ReLU) and not self.training:\n"
            "            x = cluster0(") in text, text
    assert ("        elif isinstance(self.act, nn.Hardswish) and not self.training:\n"
            "            x = cluster1(") in text, text
    same_outputs(tmp_path, path, TWO_ACTS)
    same_in_train_mode(tmp_path, path, TWO_ACTS)


def test_a_class_is_spelled_as_the_file_can_read_it():
    module = types.ModuleType("m")
    module.nn = nn
    assert class_spelling(nn.SiLU, module) == "nn.SiLU"
    module = types.ModuleType("m")
    module.torch = torch
    assert class_spelling(nn.SiLU, module) == "torch.nn.SiLU"
    module.SiLU = nn.SiLU
    assert class_spelling(nn.SiLU, module) == "SiLU"
    assert class_spelling(nn.SiLU, types.ModuleType("bare")) is None


def test_a_class_the_file_cannot_name_is_said_to_be_the_cause(tmp_path):
    """The fused calls' activation comes from a factory in another file: no name in the
    model's file spells its class, and the reason says that no condition could be written."""
    (tmp_path / "acts.py").write_text(
        "from torch import nn\n\n\nclass Swish(nn.Module):\n"
        "    def forward(self, x):\n        return x * x.sigmoid()\n\n\n"
        "def make_act(on):\n    return Swish() if on else nn.Identity()\n")
    source = NORM_ACT.replace("from torch import nn\n", "from torch import nn\n\n"
                              "from acts import make_act\n").replace(
        "nn.SiLU() if act else nn.Identity()", "make_act(act)")
    out = " ".join(refused_untouched(tmp_path / "net.py", source, "2,3,8,8").split())
    assert "where it runs unfused" in out, out
    assert "no layer of `NormAct` has a class (named in the file)" in out, out


def test_the_line_recorded_for_a_guarded_edit_is_its_kernel_call(tmp_path):
    """`ApplyResult.new_lines` named the guard's `if` line."""
    path = tmp_path / "net.py"
    path.write_text(NORM_ACT)
    _, plan = _plan(path, (2, 3, 8, 8))
    text, new_lines = rewrite(path.read_text(), plan.files[0])
    lines = text.splitlines()
    assert {lines[n - 1].strip().split("(")[0] for n in new_lines.values()} == {"x = cluster0"}


CHAINED = """\
import torch
from torch import nn


class ConvBNAct(nn.Module):
    def __init__(self, cin, cout, act):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = act

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(ConvBNAct(3, 8, nn.ReLU()), ConvBNAct(8, 8, nn.ReLU6()),
                                    ConvBNAct(8, 8, nn.ReLU()))

    def forward(self, x):
        return self.blocks(x)
"""


def test_one_kernels_edit_of_chained_blocks_is_told_apart_from_the_others(tmp_path):
    """Blocks chained on one line: mapped alone, the ReLU kernel's clusters saw no stray
    op of the ReLU6 block, and the edit ran BN+ReLU there too, dropping the clamp at 6
    (the check passed: its activations stayed below 6). Each kernel now runs under its
    activation's class, the ReLU6 one too (its lines held the other blocks' convs)."""
    path = applied_file(tmp_path, CHAINED)
    text = path.read_text()
    assert "if isinstance(self.act, nn.ReLU) and not self.bn.training:" in text, text
    assert "elif isinstance(self.act, nn.ReLU6) and not self.bn.training:" in text, text
    before, after = original_and_rewritten(tmp_path, path, CHAINED)
    x = torch.randn(2, 3, 8, 8, device=DEVICE) * 100
    with torch.no_grad():
        torch.testing.assert_close(after.to(DEVICE)(x), before.to(DEVICE)(x))
