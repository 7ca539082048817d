"""`--apply` where a GPU target splits a layer's bias off: layers the edit must not spell as
a bias-free function call (hooks), and layers it may (a subclass, a layer under two names).

As in test_apply_split_bias.py, the CLI's target is replaced (`apply_target`,
tests/conftest.py) and the kernels run under the Triton interpreter at tiny shapes.
"""

from __future__ import annotations

import ast

import pytest
import torch
from apply_checks import DEVICE, apply_net, conv_apart, load_net, same_outputs
from torch import nn

from fusion_core.ir.bias_split import SPLIT_BIAS
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.unbiased import NotSpelled, functional_name, unbiased_call

HOOKED = """\
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.seen = []
        self.conv1.register_forward_hook(lambda m, args, out: self.seen.append(out.shape))

    def forward(self, x):
        return F.relu(self.conv1(x) * 2.0)
"""


def test_a_layer_with_a_hook_keeps_its_call_so_the_hook_still_runs(tmp_path, apply_target):
    # Calling F.conv2d in the layer's place would skip the hook: the GPU target leaves the
    # bias in the layer (ir/conv_bias.py), and the edit keeps the call, as on the CPU.
    path = tmp_path / "net.py"
    path.write_text(HOOKED)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert path.read_text().endswith("        return cluster0(self.conv1(x))\n"), path.read_text()
    net = load_net(path).eval().to(DEVICE)  # a GPU's kernel needs its memory
    with torch.no_grad():
        net(torch.randn(2, 3, 8, 8, device=DEVICE))
    assert net.seen == [(2, 8, 8, 8)]


@pytest.mark.parametrize("hook", ["register_forward_hook(lambda m, args, out: out * 2.0)",
                                  "register_forward_pre_hook(lambda m, args: None)"])
@pytest.mark.parametrize("layer, call, shape", [
    ("nn.Conv2d(3, 8, 3, padding=1)", "self.conv1(x)", (2, 3, 4, 4)),
    ("nn.Linear(4, 8)", "self.conv1(x.transpose(2, 3))", (2, 3, 4, 4)),  # ir/linear_bias.py
])
def test_a_hooked_layers_bias_is_not_split_off(tmp_path, hook, layer, call, shape):
    # The graph runs a module call's hooks (an output hook changes the result): a bias-free
    # function in its place would not, and the traced graph would differ from the model.
    path = tmp_path / "net.py"
    path.write_text(HOOKED.replace("        self.seen = []\n", "").replace(
        "self.conv1.register_forward_hook(lambda m, args, out: self.seen.append(out.shape))",
        f"self.conv1.{hook}").replace("nn.Conv2d(3, 8, 3, padding=1)", layer).replace(
        "self.conv1(x)", call))
    analysis = analyze_file(path, [InputSpec(shape)], class_name="Net", device="cuda")
    assert not any(n.meta.get(SPLIT_BIAS) for n in analysis.graph_module.graph.nodes)
    (m,) = map_clusters(analysis)
    assert m.exact and m.args == (call,), (m.reason, m.args)


def test_a_hooked_layer_is_not_spelled_without_its_bias():
    # torch.export splits the function its trace holds, hooks inlined: the edit must not
    # replace the call that runs them.
    layer = nn.Conv2d(3, 8, 3)
    layer.register_forward_hook(lambda m, args, out: None)
    with pytest.raises(NotSpelled) as e:
        unbiased_call(layer, "self.conv1", "x", "F")
    assert str(e.value) == ("`self.conv1` has a forward hook registered, which would not run "
                            "if an edit called `F.conv2d` in its place")


class OwnForward(nn.Conv2d):
    def forward(self, x):
        return super().forward(x) * 2.0


def test_a_subclass_is_spelled_by_its_base_function_unless_it_redefines_the_forward():
    spelled = ("F.conv2d(x, self.conv1.weight, None, self.conv1.stride, self.conv1.padding, "
               "self.conv1.dilation, self.conv1.groups)")
    # a parametrized layer's class is a subclass made at run time; `weight` computes it
    normed = nn.utils.parametrizations.weight_norm(nn.Conv2d(3, 8, 3))
    assert type(normed) is not nn.Conv2d
    assert unbiased_call(normed, "self.conv1", "x", "F") == spelled
    with pytest.raises(NotSpelled) as e:
        unbiased_call(OwnForward(3, 8, 3), "self.conv1", "x", "F")
    assert str(e.value) == ("`self.conv1` is a OwnForward, whose class defines its own "
                            "`forward`: an edit spells without its bias only a Conv1d, Conv2d, "
                            "Conv3d or Linear, or a subclass that keeps their forward")


SUBCLASS = """\
import torch.nn.functional as F
from torch import nn


class MyConv(nn.Conv2d):
    pass


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = MyConv(3, 8, 3, padding=1)

    def forward(self, x):
        return F.relu(self.conv1(x))
"""


def test_a_subclass_keeping_the_forward_is_applied(tmp_path, monkeypatch):
    # FX traces through a user's subclass: its F.conv2d's bias is split off on the GPU.
    from fusion_core import cli

    monkeypatch.setattr(cli, "analysis_device", lambda: "cuda")
    path = tmp_path / "net.py"
    path.write_text(SUBCLASS)
    result = apply_net(path, "2,3,4,4")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert path.read_text().endswith(
        f"        return cluster0({conv_apart('self.conv1', functional='F')})\n"), path.read_text()
    same_outputs(tmp_path, path, SUBCLASS, shape=(2, 3, 4, 4))


ALIASED = """\
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = self.conv1

    def forward(self, x):
        return F.relu(self.conv2(x) * 2.0)
"""


def test_a_layer_registered_under_two_names_is_matched_by_the_name_the_call_uses(
        tmp_path, apply_target):
    # FX names the layer `conv1`, its first name; the source calls it `self.conv2`.
    path = tmp_path / "net.py"
    path.write_text(ALIASED)
    result = apply_net(path, "2,3,4,4")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    args = {"cpu": "self.conv2(x)", "cuda": conv_apart("self.conv2", functional="F")}
    assert path.read_text().endswith(f"        return cluster0({args[apply_target]})\n"), (
        path.read_text())
    same_outputs(tmp_path, path, ALIASED, shape=(2, 3, 4, 4))


LOOP = """\
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, stride=2)])

    def forward(self, x):
        for conv in self.convs:
            x = F.relu(conv(x))
        return x
"""


@pytest.mark.parametrize("loop, layer", [("for conv in self.convs:", "conv"),
                                         ("for i in range(2):", "self.convs[i]")])
def test_a_layer_called_through_a_loop_variable_is_spelled_by_that_variable(
        tmp_path, monkeypatch, loop, layer):
    # One edit serves every pass: the text reads each pass's layer, its weight, settings
    # and bias, as its call does.
    from fusion_core import cli

    monkeypatch.setattr(cli, "analysis_device", lambda: "cuda")
    original = LOOP.replace("for conv in self.convs:", loop).replace("conv(x)", f"{layer}(x)")
    path = tmp_path / "net.py"
    path.write_text(original)
    result = apply_net(path, "2,3,6,6")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert f"            x = cluster0({conv_apart(layer, functional='F')})\n" in path.read_text(), (
        path.read_text())
    same_outputs(tmp_path, path, original, shape=(2, 3, 6, 6))


def test_a_loop_whose_other_layer_has_no_bias_is_not_edited(tmp_path):
    # The line's other pass runs a bias-free conv and a lone relu (no cluster): an edit of
    # the line would run it with `conv.bias` None.
    path = tmp_path / "net.py"
    path.write_text(LOOP.replace("stride=2)", "stride=2, bias=False)"))
    analysis = analyze_file(path, [InputSpec((2, 3, 6, 6))], class_name="Net", device="cuda")
    (m,) = map_clusters(analysis)
    assert not m.exact, m.replacement


LOCAL_F = """\
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv3d(3, 4, 3, padding=1)

    def forward(self, x):
        B, C, F, H, W = x.shape
        return torch.relu(self.conv1(x)) * F
"""


def test_a_name_the_function_binds_itself_is_not_used_to_spell_the_call(tmp_path, monkeypatch):
    # `F` is the clip's frame count in this forward: `F.conv3d` there is an int's attribute.
    from fusion_core import cli

    monkeypatch.setattr(cli, "analysis_device", lambda: "cuda")
    path = tmp_path / "net.py"
    path.write_text(LOCAL_F)
    result = apply_net(path, "1,3,2,4,4")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert "return cluster0(nn.functional.conv3d(x, self.conv1.weight, None, " in (
        path.read_text()), path.read_text()
    same_outputs(tmp_path, path, LOCAL_F, shape=(1, 3, 2, 4, 4))
    tree = ast.parse(LOCAL_F)
    assert functional_name(tree, {"F"}) == ("nn.functional", None)
    assert functional_name(tree, {"F", "nn"}) == ("torch.nn.functional", None)
    only_f = ast.parse("import torch.nn.functional as F\nfrom torch.nn import Conv3d\n")
    assert functional_name(only_f, {"F"}) == ("torch.nn.functional", "import torch")
