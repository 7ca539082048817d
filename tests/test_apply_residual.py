"""`--apply` on torchvision-style residual blocks written in a user's own file (issue 26.5).

MobileNetV3's and EfficientNet's `InvertedResidual`/`MBConv` add the skip in place under a
module setting (`if self.use_res_connect: result += input`); the capture makes the `+=` an
out-of-place add that fuses with the block's last BatchNorm. The edit rebinds `result` to
the kernel's result, which is what the in-place add left in it when `result` is a tensor
this forward made; where the add writes into a tensor the caller passed, rebinding would
leave that tensor unchanged, and the cluster stays a pointer saying so. A model class that
subclasses another one and keeps its parent's forward (`class Net(Base): pass`) maps the
parent's `self` to the instance. Kernels run under the Triton interpreter.
"""

from __future__ import annotations

import pytest
from apply_checks import apply_net, bn_args, conv_apart, same_outputs
from click.testing import CliRunner
from vision_libs import import_torchvision

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters

# torchvision's MobileNetV3 block, cut down: the residual only where the widths match.
MOBILENET = """\
import torch
from torch import nn


class ConvNormAct(nn.Sequential):
    def __init__(self, cin, cout, act=nn.Hardswish):
        layers = [nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.use_res_connect = cin == cout
        self.block = nn.Sequential(ConvNormAct(cin, 8), ConvNormAct(8, cout, None))

    def forward(self, input):
        result = self.block(input)
        if self.use_res_connect:
            result += input
        return result


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.one = InvertedResidual(4, 4)
        self.two = InvertedResidual(4, 6)
        self.head = nn.Conv2d(6, 6, 1)

    def forward(self, x):
        return self.head(self.two(self.one(self.stem(x))))
"""


def _mappings(path):
    analysis = analyze_file(path, (InputSpec((2, 3, 8, 8)),), class_name="Net")
    return analysis, map_clusters(analysis)


def _block_edit(flags: str = "", before_add: str = "") -> str:
    """The block forward's guarded edit: the BatchNorms' flags (and `flags`), the kernels
    under `if self.use_res_connect:`, the lines as written under `else:` (with `before_add`
    above the in-place add)."""
    bn = [bn_args(f"self.block[{i}][1]") for i in range(2)]
    inner = f"cluster0(self.block[0][0](input), {bn[0]})"
    return (f"        if not self.block[0][1].training and not self.block[1][1].training"
            f"{flags}:\n"
            f"            if self.use_res_connect:\n"
            f"                result = cluster1(self.block[1][0]({inner}), {bn[1]}, input)\n"
            f"            else:\n"
            f"                result = self.block[1]({inner})\n"
            f"        else:\n"
            f"            result = self.block(input)\n"
            f"            if self.use_res_connect:\n"
            f"{before_add}"
            f"                result += input\n"
            f"        return result\n")


def test_an_in_place_residual_under_a_module_setting_is_rebound_to_the_kernel(tmp_path):
    path = tmp_path / "mobilenet.py"
    path.write_text(MOBILENET)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    # Was a pointer: "line 21 is not an assignment or a `return` of one value".
    assert "Applied 1 edit to" in result.output, result.output
    # Where the widths differ (`self.two`) the `else` branch keeps the block's own kernel.
    # The BatchNorms run on their running statistics: the kernels in eval mode only, the
    # lines as written otherwise (sourcemap/train_mode.py). `self.two`'s call fuses no
    # `self.block[1][1]`, but has that layer: it reads its flag too.
    assert _block_edit() in path.read_text(), path.read_text()
    same_outputs(tmp_path, path, MOBILENET)


# EfficientNet's MBConv: the residual's `if` starts with a stochastic depth, an identity
# in eval mode that makes no op of the graph.
EFFICIENTNET = MOBILENET.replace(
    "        self.block = nn.Sequential(",
    "        self.stochastic_depth = nn.Identity()\n        self.block = nn.Sequential(",
).replace("            result += input\n",
          "            result = self.stochastic_depth(result)\n            result += input\n")


def _efficientnet_edit(flags: str = "") -> str:
    """The MBConv forward's edit: the in-place add (after the stochastic depth) only in the
    `else` branch that runs the lines as written when a deciding module is in train mode;
    `flags`: more of those after the BatchNorms'."""
    return _block_edit(flags, "                result = self.stochastic_depth(result)\n")


def test_a_stochastic_depth_line_before_the_in_place_residual_joins_the_edit(tmp_path):
    path = tmp_path / "efficientnet.py"
    path.write_text(EFFICIENTNET)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    # Was a pointer: "line 22 (`result = self.block(input)`) and line 25 (`result +=
    # input`) lie in different blocks (line 23: `if self.use_res_connect:`)".
    rewritten = path.read_text()
    assert _efficientnet_edit() in rewritten, rewritten
    assert rewritten.count("result += input") == 1, rewritten  # under `else:` only
    same_outputs(tmp_path, path, EFFICIENTNET)


# torchvision's own StochasticDepth (EfficientNet's MBConv, as a user copies it), which
# torch.export traces through: it returns its input in eval mode and makes no op.
TORCHVISION = EFFICIENTNET.replace(
    "from torch import nn\n", "from torch import nn\nfrom torchvision.ops import StochasticDepth\n"
).replace("nn.Identity()", "StochasticDepth(0.2, \"row\")")


def test_torchvisions_stochastic_depth_before_the_residual_joins_the_edit(tmp_path):
    if import_torchvision() is None:
        pytest.skip("torchvision is not installed")
    path = tmp_path / "efficientnet_tv.py"
    path.write_text(TORCHVISION)
    result = CliRunner().invoke(cli, ["--model", f"{path}:Net", "--input-shape", "2,3,8,8",
                                      "--capture", "export", "--no-timing", "--apply", "--yes"])
    assert result.exit_code == 0, result.output
    # Was a pointer: "line range also holds `result = self.stochastic_depth(result)`".
    assert "Applied 1 edit to" in result.output, result.output
    rewritten = path.read_text()
    # The stochastic depth the edit reads through draws in train mode: its flag decides too.
    assert _efficientnet_edit(" and not self.stochastic_depth.training") in rewritten, rewritten
    assert rewritten.count("result += input") == 1, rewritten  # under `else:` only
    same_outputs(tmp_path, path, TORCHVISION)


# The block adds into the tensor its caller passed: the caller's `h` changes too, which
# rebinding `input` would not do.
INTO_CALLERS = MOBILENET.replace(
    "            result += input\n        return result\n",
    "            input += result\n            return input\n        return result\n")


def test_an_in_place_add_into_the_callers_tensor_stays_a_pointer(tmp_path):
    path = tmp_path / "into_callers.py"
    path.write_text(INTO_CALLERS)
    analysis, maps = _mappings(path)
    adds = [m for m, c in zip(maps, analysis.clusters, strict=True) if "add" in c.ops]
    assert adds and all(not m.exact for m in adds), maps
    assert all("`input += result` (line 22) writes in place into `input`" in m.reason
               for m in adds), [m.reason for m in adds]
    assert all("write `input = input + result`" in m.reason for m in adds), adds


# A model class that reuses another's forward: ShuffleNet's `class Net(ShuffleNetV2)`.
INHERITED = """\
import torch
from torch import nn
import torch.nn.functional as F


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 1)
        self.bn1 = nn.BatchNorm2d(4)
        self.head = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(self.bn1(x))
        return self.head(x)


class Net(Base):
{body}
"""


def test_an_inherited_forward_maps_its_self_to_the_model(tmp_path, apply_target):
    # For the GPU the kernel adds the conv's bias: the edit takes in the conv's line. The
    # BatchNorm runs on its running statistics: the kernel in eval mode only, the lines as
    # written otherwise (sourcemap/train_mode.py).
    forward = {"cpu": "        x = self.conv1(x)\n"
                      "        if not self.bn1.training:\n"
                      f"            x = cluster0(x, {bn_args('self.bn1')})\n"
                      "        else:\n"
                      "            x = F.relu(self.bn1(x))\n",
               "cuda": "        if not self.bn1.training:\n"
                       f"            x = cluster0({conv_apart('self.conv1', functional='F')}, "
                       f"{bn_args('self.bn1')})\n"
                       "        else:\n"
                       "            x = self.conv1(x)\n"
                       "            x = F.relu(self.bn1(x))\n"}[apply_target]
    for body in ("    pass\n",
                 "    def __init__(self):\n        super().__init__()\n"
                 "        self.extra = nn.Identity()\n"):
        source = INHERITED.format(body=body)
        path = tmp_path / f"inherited{len(body)}.py"
        path.write_text(source)
        result = apply_net(path)
        assert result.exit_code == 0, result.output
        # Was a pointer: "`self.bn1(...)` at line 15 calls `self.bn1` (line 15) through a
        # variable, another module on each pass" (no module stood for Base's `self`).
        assert "Applied 1 edit to" in result.output, result.output
        assert (f"    def forward(self, x):\n{forward}        return self.head(x)\n"
                in path.read_text()), path.read_text()
        same_outputs(tmp_path, path, source)


# A block class without the skip that only sets its parent's constructor arguments: the
# parent's `if self.has_skip:` fails there, so those calls run the lines as written.
SUBCLASSED_BLOCK = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c, has_skip=True):
        super().__init__()
        self.has_skip = has_skip
        self.conv = nn.Conv2d(c, c, 1)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        shortcut = x
        x = self.bn(self.conv(x))
        if self.has_skip:
            x = x + shortcut
        return x


class Plain(Block):
    def __init__(self, c):
        super().__init__(c, has_skip=False)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.one = Block(4)
        self.two = Plain(4)

    def forward(self, x):
        return torch.relu(self.two(self.one(self.stem(x))))
"""


def test_a_subclass_of_the_block_runs_the_else_branch_where_its_setting_fails(tmp_path,
                                                                              apply_target):
    path = tmp_path / "subclassed.py"
    path.write_text(SUBCLASSED_BLOCK)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    # Was a pointer: "line range also holds `self.conv(x)` (line 14), which is not in the
    # cluster" (`Plain`'s calls were taken to run the guarded lines).
    assert "Applied 1 edit to" in result.output, result.output
    conv = {"cpu": "self.conv(x)", "cuda": conv_apart("self.conv")}[apply_target]
    # The BatchNorm runs on its running statistics: the kernel in eval mode only, the lines
    # as written otherwise (sourcemap/train_mode.py).
    assert (f"        if not self.bn.training:\n"
            f"            if self.has_skip:\n"
            f"                x = cluster0({conv}, {bn_args('self.bn')}, shortcut)\n"
            f"            else:\n"
            f"                x = self.bn(self.conv(x))\n"
            f"        else:\n"
            f"            x = self.bn(self.conv(x))\n"
            f"            if self.has_skip:\n"
            f"                x = x + shortcut\n"
            f"        return x\n" in path.read_text()), path.read_text()
    same_outputs(tmp_path, path, SUBCLASSED_BLOCK)


SHUFFLENET = """\
from torchvision.models.shufflenetv2 import ShuffleNetV2


class Net(ShuffleNetV2):
    def __init__(self):
        super().__init__([4, 8, 4], [24, 48, 96, 192, 1024], num_classes=10)
"""


def test_a_library_model_subclassed_in_the_users_file_maps_its_forwards_self(tmp_path):
    if import_torchvision() is None:
        pytest.skip("torchvision is not installed")
    path = tmp_path / "shufflenet.py"
    path.write_text(SHUFFLENET)
    analysis = analyze_file(path, (InputSpec((1, 3, 32, 32)),), class_name="Net")
    maps = map_clusters(analysis)
    # Were pointers: "`self.conv1(...)` at line 155 is not `relu` (line 155)", and the
    # same for `self.conv5`: ShuffleNetV2.forward's `self` stood for no module. (Where
    # torchvision is installed, its lines are a library's and every mapping says so.)
    assert all(m.exact or "installed library" in (m.reason or "") for m in maps), [
        m.reason for m in maps if not m.exact]
