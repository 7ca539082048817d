"""`--apply` on patterns of torchvision's and timm's model code copied into a user's file.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from apply_checks import apply_net, bn_args, same_outputs
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters

# timm's BasicBlock: optional layers it was built without are `nn.Identity()` placeholders,
# called between the layers the cluster fuses.
PLACEHOLDERS = """\
import torch
import torch.nn as nn


class BasicBlock(nn.Module):
    def __init__(self, planes, drop_block=None, aa_layer=None):
        super().__init__()
        self.conv1 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.drop_block = drop_block() if drop_block is not None else nn.Identity()
        self.act1 = nn.ReLU(inplace=True)
        self.aa = aa_layer() if aa_layer is not None else nn.Identity()
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.drop_block(x)
        x = self.act1(x)
        x = self.aa(x)
        x = self.conv2(x)
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(BasicBlock(3), BasicBlock(3))

    def forward(self, x):
        return self.layers(x)
"""


def test_identity_placeholders_between_fused_layers_are_dropped_by_the_edit(tmp_path):
    path = tmp_path / "block.py"
    path.write_text(PLACEHOLDERS)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    rewritten = path.read_text()
    # bn1 → drop_block → act1 became one call, run while `self.bn1` is in eval mode (the
    # placeholder `nn.Identity()` is no dropout: no flag of its own); in train mode the lines
    # as written, and only there. `self.aa(x)` after the cluster stays.
    assert ("        x = self.conv1(x)\n"
            "        if not self.bn1.training:\n"
            f"            x = cluster0(x, {bn_args('self.bn1')})\n"
            "        else:\n"
            "            x = self.bn1(x)\n"
            "            x = self.drop_block(x)\n"
            "            x = self.act1(x)\n"
            "        x = self.aa(x)\n") in rewritten, rewritten
    assert rewritten.count("x = self.bn1(x)") == rewritten.count("self.drop_block(x)") == 1
    same_outputs(tmp_path, path, PLACEHOLDERS)


# torchvision's MobileNet/EfficientNet/ShuffleNet: conv → bn → act layers in an nn.Sequential,
# called on one line of the block's forward.
SEQUENTIAL = """\
import torch
import torch.nn as nn


class InvertedResidual(nn.Module):
    def __init__(self, c=3):
        super().__init__()
        self.block = nn.Sequential(
            nn.Sequential(nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()),
            nn.Conv2d(c, c, 3, padding=1, bias=False),
        )

    def forward(self, input):
        result = self.block(input)
        return result
"""


def test_layers_fused_inside_a_nested_sequential_are_spelled_layer_by_layer(tmp_path):
    path = tmp_path / "mbv3.py"
    path.write_text(SEQUENTIAL)
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))], class_name="InvertedResidual")
    (m,) = map_clusters(analysis)
    # Was a pointer: "line 14 calls `self.block(input)`, a `Sequential` whose forward
    # (`Sequential.forward`, not in this file) runs the cluster's layers ... To apply, make
    # `self.block[0]` (`Sequential`) a module of your file ..."; nn.Sequential's layers are
    # reached by index (sourcemap/sequential.py), the library subclass case is in
    # test_apply_sequential.py.
    assert m.exact, m.reason
    bn = "self.block[0][1]"
    assert m.replacement == (
        f"        if not {bn}.training:\n"
        f"            result = self.block[1](cluster0(self.block[0][0](input), "
        f"{bn}.running_mean.reshape(-1, 1, 1), {bn}.running_var.reshape(-1, 1, 1), "
        f"{bn}.weight.reshape(-1, 1, 1), {bn}.bias.reshape(-1, 1, 1)))\n"
        "        else:\n"
        "            result = self.block(input)"), m.replacement


# timm's InvertedResidual / torchvision's MobileNet block: the residual add only in blocks
# whose input and output shapes match.
SKIP = """\
import torch
import torch.nn as nn


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.has_skip = cin == cout and stride == 1
        self.conv_pwl = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.drop_path = nn.Identity()
        self.post = nn.Conv2d(cout, cout, 1, bias=False)

    def forward(self, x):
        shortcut = x
        x = self.conv_pwl(x)
        # project
        x = self.bn3(x)
        if self.has_skip:
            x = self.drop_path(x) + shortcut
            x = self.post(x)
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(InvertedResidual(3, 4), InvertedResidual(4, 4),
                                    InvertedResidual(4, 4, 2), InvertedResidual(4, 4))

    def forward(self, x):
        return self.blocks(x)
"""


def test_a_residual_add_under_an_if_on_a_module_setting_keeps_the_if(tmp_path):
    path = tmp_path / "skip.py"
    path.write_text(SKIP)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert "Not applied" not in result.output, result.output
    rewritten = path.read_text()
    # The blocks with the skip run the kernel; the others run the lines as written. The
    # kernel computes `self.bn3` as eval mode does: in train mode every block runs the lines
    # as written.
    assert (
        "        # project\n"
        "        if not self.bn3.training:\n"
        "            if self.has_skip:\n"
        "                x = cluster0(x, self.bn3.running_mean.reshape(-1, 1, 1), "
        "self.bn3.running_var.reshape(-1, 1, 1), self.bn3.weight.reshape(-1, 1, 1), "
        "self.bn3.bias.reshape(-1, 1, 1), shortcut)\n"
        "                x = self.post(x)\n"
        "            else:\n"
        "                x = self.bn3(x)\n"
        "        else:\n"
        "            x = self.bn3(x)\n"
        "            if self.has_skip:\n"
        "                x = self.drop_path(x) + shortcut\n"
        "                x = self.post(x)\n"
        "        return x\n") in rewritten, rewritten
    same_outputs(tmp_path, path, SKIP)


def test_an_if_on_a_value_of_the_run_is_refused_naming_the_lines_and_the_if(tmp_path):
    # `shortcut` is a value of the call, not a module setting fixed per block.
    path = tmp_path / "value_if.py"
    path.write_text(SKIP.replace("        shortcut = x\n",
                                 "        shortcut = x if self.has_skip else None\n")
                    .replace("if self.has_skip:", "if shortcut is not None:"))
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))], class_name="Net")
    (m,) = {m.reason: m for m in map_clusters(analysis)}.values()  # one reason for both calls
    assert not m.exact
    assert m.reason == (
        "line 18 (`x = self.bn3(x)`) and line 20 (`x = self.drop_path(x) + shortcut`) lie in "
        "different blocks (line 19: `if shortcut is not None:`); an edit replaces "
        "statements of one block, or crosses the edge of an `if` that only reads the module's "
        "attributes (`if self.has_skip:`): the statements right above it with the first ones "
        "of its body, or the last ones of its body with those right below it"), m.reason


# torchvision's SqueezeExcitation: the gate is the last call of `_scale`, the product is in
# `forward`, so the cluster `hardsigmoid → mul` lies in two functions.
SQUEEZE = """\
import torch
import torch.nn as nn


class SqueezeExcitation(nn.Module):
    def __init__(self, c=4, squeeze=2):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.activation = nn.ReLU()
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.scale_activation = nn.Hardsigmoid()

    def _scale(self, input):
        scale = self.avgpool(input)
        scale = self.fc1(scale)
        scale = self.activation(scale)
        scale = self.fc2(scale)
        return self.scale_activation(scale)

    def forward(self, input):
        scale = self._scale(input)
        return scale * input
"""


def test_a_gate_returned_by_a_helper_names_the_move_that_makes_it_applicable(tmp_path,
                                                                              monkeypatch):
    # A CPU target's edit, also where the CLI runs on a GPU: for a GPU, `self.fc2`'s bias
    # joins the gate's kernel and the cluster starts back in `_scale` (not yet applicable).
    import fusion_core.cli as cli_module

    monkeypatch.setattr(cli_module, "analysis_device", lambda: None)
    path = tmp_path / "se.py"
    path.write_text(SQUEEZE)
    analysis = analyze_file(path, [InputSpec((2, 4, 6, 6))], class_name="SqueezeExcitation")
    (gate,) = [m for m in map_clusters(analysis) if m.start == 22]
    assert gate.reason.endswith(
        "; the cluster's part of it is only `self.scale_activation(scale)` (line 19): to "
        "apply, `return scale` there and call `self.scale_activation` on the result of line 22 "
        "in a statement of its own below it, so one function holds the whole cluster"), gate.reason
    # Done as it says, the gate and the product are one edit.
    moved = (SQUEEZE.replace("return self.scale_activation(scale)", "return scale")
             .replace("scale = self._scale(input)\n", "scale = self._scale(input)\n"
                      "        scale = self.scale_activation(scale)\n"))
    path.write_text(moved)
    result = CliRunner().invoke(cli, ["--model", f"{path}:SqueezeExcitation", "--input-shape",
                                      "2,4,6,6", "--no-timing", "--apply", "--yes"])
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert "        scale = self._scale(input)\n        return cluster0(scale, input)\n" in (
        path.read_text())
