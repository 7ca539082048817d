"""`--apply` where the analysis split a layer's bias off into the next kernel.

For a GPU target a biased convolution adds its bias in the kernel after it, as Inductor
does (ir/conv_bias.py; a Linear on a transposed input on any target, ir/linear_bias.py).
The edit then calls the layer without its bias (`F.conv2d(x, self.conv1.weight, None, ...)`)
and passes the bias to the kernel (sourcemap/unbiased.py). The CLI's analysis target is
replaced (`cli.analysis_device`), so these run on the CPU either way: the kernels run under
the Triton interpreter at tiny shapes, on the bias-split graph a GPU would get
(`apply_target`, tests/conftest.py).
"""

from __future__ import annotations

import ast

import pytest
from apply_checks import apply_net, bn_args, conv_apart, same_outputs
from torch import nn

from fusion_core import cli
from fusion_core.cli_run import mapping_dict
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.unbiased import NotSpelled, functional_name, unbiased_call

CONV_BN_RELU = """\
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)

    def forward(self, x):
        h = self.conv1(x)
        h = self.bn1(h)
        return F.relu(h)
"""

BN = bn_args("self.bn1")


def forward(target: str, act: str = "F.relu(h)", layer: str = "self.conv1", arg: str = "x"
            ) -> str:
    """The forward each target's edit writes: the convolution's line kept on the CPU, where
    mkldnn adds the bias inside it; for the GPU, whose kernel adds the bias, the edit's lines
    take in the convolution's and call it without its bias. The kernel computes BatchNorm as
    eval mode does: it runs while `self.bn1` is in eval mode, the lines as written otherwise
    (sourcemap/train_mode.py)."""
    as_written = f"            h = self.bn1(h)\n            return {act}\n"
    if target == "cpu":
        return (f"        h = {layer}({arg})\n"
                "        if not self.bn1.training:\n"
                f"            return cluster0(h, {BN})\n"
                "        else:\n" + as_written)
    return ("        if not self.bn1.training:\n"
            f"            return cluster0({conv_apart(layer, arg, 'F')}, {BN})\n"
            "        else:\n"
            f"            h = {layer}({arg})\n" + as_written)


def test_a_biased_conv_before_norm_and_activation_is_applied(tmp_path, apply_target):
    path = tmp_path / "net.py"
    path.write_text(CONV_BN_RELU)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    rewritten = path.read_text()
    assert rewritten.endswith(f"    def forward(self, x):\n{forward(apply_target)}"), rewritten
    # the file imports it already: the edit adds no second import (`in` could not fail)
    assert rewritten.count("import torch.nn.functional as F\n") == 1, rewritten
    same_outputs(tmp_path, path, CONV_BN_RELU)


def test_a_file_without_torch_nn_functional_gets_its_import(tmp_path, apply_target):
    # Nothing the file imports reaches `torch.nn.functional`: the edit adds the import.
    original = CONV_BN_RELU.replace(
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n",
        "from torch.nn import BatchNorm2d, Conv2d, Module, ReLU\n").replace(
        "nn.Module", "Module").replace("nn.Conv2d", "Conv2d").replace(
        "nn.BatchNorm2d", "BatchNorm2d").replace(
        "self.bn1 = BatchNorm2d(8)", "self.bn1 = BatchNorm2d(8)\n        self.act = ReLU()"
    ).replace("F.relu(h)", "self.act(h)")
    path = tmp_path / "net.py"
    path.write_text(original)
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))], class_name="Net",
                            device=apply_target)
    needed = ["import torch.nn.functional as F"] if apply_target == "cuda" else []
    assert [mapping_dict(m)["imports"] for m in map_clusters(analysis)] == [needed]  # --json
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    rewritten = path.read_text()
    assert rewritten.endswith(
        f"    def forward(self, x):\n{forward(apply_target, act='self.act(h)')}"), rewritten
    assert rewritten.startswith("from torch.nn import BatchNorm2d, Conv2d, Module, ReLU\n"
                                + ("import torch.nn.functional as F\n" if apply_target == "cuda"
                                   else "") + "if __package__:"), rewritten
    same_outputs(tmp_path, path, original)


@pytest.mark.parametrize("layer, norm, shape, function", [
    ("nn.Conv1d(3, 8, 3, padding=1)", "nn.BatchNorm1d(8)", (2, 3, 8), "conv1d"),
    ("nn.Conv3d(3, 8, 3, padding=1)", "nn.BatchNorm3d(8)", (2, 3, 4, 4, 4), "conv3d"),
])
def test_each_convolution_is_spelled_by_its_function(tmp_path, layer, norm, shape, function):
    path = tmp_path / "net.py"
    path.write_text(CONV_BN_RELU.replace("nn.Conv2d(3, 8, 3, padding=1)", layer).replace(
        "nn.BatchNorm2d(8)", norm))
    analysis = analyze_file(path, [InputSpec(shape)], class_name="Net", device="cuda")
    (m,) = map_clusters(analysis)
    assert m.exact, m.reason
    ones = ", ".join(["1"] * (len(shape) - 2))
    bn = ", ".join(f"self.bn1.{name}.reshape(-1, {ones})"
                   for name in ("running_mean", "running_var", "weight", "bias"))
    assert m.replacement == (
        "        if not self.bn1.training:\n"
        f"            return cluster0(F.{function}(x, self.conv1.weight, None, "
        "self.conv1.stride, self.conv1.padding, self.conv1.dilation, self.conv1.groups), "
        f"self.conv1.bias.reshape(-1, {ones}), {bn})\n"
        "        else:\n"
        "            h = self.conv1(x)\n"
        "            h = self.bn1(h)\n"
        "            return F.relu(h)"), m.replacement


def test_a_sequentials_layer_is_spelled_as_the_call_indexes_it(tmp_path, apply_target):
    # `self.stem[-1]`: the weight, settings and bias are read through the call's own text.
    original = CONV_BN_RELU.replace(
        "self.conv1 = nn.Conv2d(3, 8, 3, padding=1)",
        "self.stem = nn.Sequential(nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 3, padding=1))").replace(
        "h = self.conv1(x)", "h = self.stem[-1](self.stem[0](x))")
    path = tmp_path / "net.py"
    path.write_text(original)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    written = forward(apply_target, layer="self.stem[-1]", arg="self.stem[0](x)")
    assert path.read_text().endswith(f"    def forward(self, x):\n{written}"), path.read_text()
    same_outputs(tmp_path, path, original)


TRANSPOSED_APART = ("F.conv_transpose2d(x, self.conv1.weight, None, self.conv1.stride, "
                    "self.conv1.padding, self.conv1.output_padding, self.conv1.groups, "
                    "self.conv1.dilation) + self.conv1.bias.reshape(-1, 1, 1)")
FUNCTIONAL_APART = (
    "F.conv2d(x, self.conv1.weight, None, padding=1) + self.conv1.bias.reshape(-1, 1, 1)")


@pytest.mark.parametrize("layer, call, reason, apart", [
    ("nn.ConvTranspose2d(3, 8, 2, stride=2)", "self.conv1(x)",
     "`self.conv1` is a ConvTranspose2d, and an edit spells a call without its bias only for "
     "a Conv1d, Conv2d, Conv3d or Linear", TRANSPOSED_APART),
    ("nn.Conv2d(3, 8, 3, padding=1)", "F.conv2d(x, self.conv1.weight, self.conv1.bias, padding=1)",
     "an edit spells a call without its bias only for a layer called by name", FUNCTIONAL_APART),
], ids=["transposed", "functional"])
def test_a_call_the_edit_cannot_spell_apart_names_the_spelling_that_applies(
        tmp_path, monkeypatch, layer, call, reason, apart):
    original = CONV_BN_RELU.replace("nn.Conv2d(3, 8, 3, padding=1)", layer).replace(
        "self.conv1(x)", call)
    path = tmp_path / "net.py"
    path.write_text(original)
    analysis = analyze_file(path, [InputSpec((2, 3, 4, 4))], class_name="Net", device="cuda")
    (m,) = map_clusters(analysis)
    assert not m.exact
    assert m.reason == (
        f"`{call}` at line 13 adds the layer's bias itself, which the analysis split off into "
        f"this kernel (as Inductor does on the GPU): {reason}; to apply, add the bias in your "
        f"code: `{apart}`"), m.reason
    # Done as it says, the GPU's edit applies and computes the same.
    moved = original.replace(call, apart)
    path.write_text(moved)
    monkeypatch.setattr(cli, "analysis_device", lambda: "cuda")
    result = apply_net(path, "2,3,4,4")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert apart.replace(" + ", ", ") in path.read_text(), path.read_text()
    same_outputs(tmp_path, path, moved, shape=(2, 3, 4, 4))


TOKEN_MIX = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.fc1(x.transpose(1, 2))).sum(-1)
"""


def test_a_linear_on_a_transposed_input_is_applied_with_its_bias_in_the_kernel(
        tmp_path, apply_target):
    # eager adds this Linear's bias in a pass of its own on either device (ir/linear_bias.py)
    path = tmp_path / "net.py"
    path.write_text(TOKEN_MIX)
    result = apply_net(path, "2,8,8")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert ("        return cluster0(nn.functional.linear(x.transpose(1, 2), self.fc1.weight), "
            "self.fc1.bias)\n") in path.read_text(), path.read_text()
    same_outputs(tmp_path, path, TOKEN_MIX, shape=(2, 8, 8))


def test_a_linear_function_given_a_computed_bias_names_the_spelling_that_applies(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(TOKEN_MIX.replace("self.fc1(x.transpose(1, 2))", "nn.functional.linear("
                                      "x.transpose(1, 2), self.fc1.weight, self.fc1.bias * 2.0)"))
    analysis = analyze_file(path, [InputSpec((2, 8, 8))], class_name="Net")
    (m,) = map_clusters(analysis)
    assert not m.exact
    assert m.reason.endswith(
        "an edit spells a call without its bias only for a layer called by name; to apply, "
        "add the bias in your code: `nn.functional.linear(x.transpose(1, 2), self.fc1.weight, "
        "None) + "
        "(self.fc1.bias * 2.0)`"), m.reason


def test_a_padding_mode_other_than_zeros_is_named_as_why_no_spelling_computes_it():
    # F.conv2d pads with zeros alone; such a layer's forward pads first. (The analysis
    # splits no such layer's bias today, ir/conv_bias.py: the rule must still not spell it.)
    layer = nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect")
    with pytest.raises(NotSpelled) as e:
        unbiased_call(layer, "self.conv1", "x", "F")
    assert str(e.value) == ("`self.conv1` pads with padding_mode='reflect', which `F.conv2d` "
                            "does not: an edit spells without its bias only a convolution "
                            "with padding_mode='zeros'")


def test_the_file_names_torch_nn_functional_as_it_imports_it():
    def spelled(text: str) -> tuple[str, str | None]:
        return functional_name(ast.parse(text))

    assert spelled("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
                   ) == ("F", None)
    assert spelled("from torch.nn import functional as fn\nimport torch\n") == ("fn", None)
    assert spelled("import torch\nfrom torch import nn\n") == ("nn.functional", None)
    assert spelled("import torch\n") == ("torch.nn.functional", None)
    assert spelled("from torch.nn import Conv2d\n") == ("F", "import torch.nn.functional as F")
    for taken in ("F = 3\n", "def F():\n    pass\n", "from other import F\n"):
        assert spelled(f"from torch.nn import Conv2d\n{taken}") == ("torch.nn.functional",
                                                                   "import torch")
