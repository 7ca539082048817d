"""The convolution bias split: on a CUDA target the bias add joins the kernel after the
convolution, as Inductor does; on a CPU target the graph is left as captured.

No GPU is needed: the pass reads the device the shape pass gave the convolution's result,
so a model on the `meta` device stands in for one on CUDA (both are "not the CPU" to
Inductor's lowering), and patching `conv_bias.bias_added_apart` forces the split on a
CPU model whose numbers can be checked.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from click.testing import CliRunner

from fusion_core import cli, pipeline
from fusion_core.errors import FusionAdvisorError
from fusion_core.ir import conv_bias
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze, analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.validate import validate

CONVNEXT_SHAPE = (1, 8, 4, 4)


class ConvNeXtStyle(nn.Module):
    """Depthwise conv -> channels last -> LayerNorm -> Linear -> GELU -> Linear -> layer
    scale -> channels first -> residual add."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.fc1 = nn.Linear(channels, 2 * channels)
        self.fc2 = nn.Linear(2 * channels, channels)
        self.gamma = nn.Parameter(torch.rand(channels) + 0.5)

    def forward(self, x):
        y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        y = self.gamma * self.fc2(F.gelu(self.fc1(y)))
        return x + y.permute(0, 3, 1, 2)


class ConvBnRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class FunctionalConv(nn.Module):
    """F.conv1d with the bias by keyword, then a SiLU."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4, 3))
        self.b = nn.Parameter(torch.randn(6))

    def forward(self, x):
        return F.silu(F.conv1d(x, self.w, bias=self.b, padding=1))


class TransposedConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 2, stride=2)

    def forward(self, x):
        return torch.sigmoid(self.up(x)) * 2.0


def convnext() -> nn.Module:
    torch.manual_seed(0)
    return ConvNeXtStyle().eval()


def conv_bn_relu() -> nn.Module:
    torch.manual_seed(0)
    model = ConvBnRelu().eval()
    with torch.no_grad():  # statistics other than the defaults, so the BatchNorm matters
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    return model


CASES = {
    "convnext": (convnext, CONVNEXT_SHAPE, "self.dwconv",
                 [("add", "permute", "layer_norm"), ("mul", "permute", "add")]),
    "conv_bn_relu": (conv_bn_relu, (1, 4, 4, 4), "self.conv", [("add", "batch_norm", "relu")]),
}
CPU_CLUSTERS = {
    "convnext": [("permute", "layer_norm"), ("mul", "permute", "add")],
    "conv_bn_relu": [("batch_norm", "relu")],
}


def ops(a):
    return [c.ops for c in a.clusters]


def split_nodes(a):
    return [n.name for n in a.graph_module.graph.nodes
            if n.name.endswith(("_conv", "_add_bias"))]


@pytest.fixture
def split_everywhere(monkeypatch):
    """Split on every device, the CPU included (the hook the pass reads)."""
    monkeypatch.setattr(conv_bias, "bias_added_apart", lambda device: True)


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_target_fuses_the_bias_add_into_the_kernel_after_the_conv(case, capture):
    build, shape, layer, clusters = CASES[case]
    a = analyze(build().to("meta"), shape, capture=capture)
    assert ops(a) == clusters
    first = a.clusters[0]
    add = a.graph[first.nodes[0]]
    assert add.name.endswith("_add_bias")
    conv, shaped = (a.graph[r] for r in add.refs)
    # The convolution stays opaque, outside the kernel, and keeps the user's layer name.
    assert conv.name in first.inputs and conv.kind.value == "opaque"
    assert conv.name.endswith("_conv") and conv.label == layer and conv.op == "Conv2d"
    # The bias, a (C,) parameter, is read as (C, 1, 1).
    assert shaped.kind.value == "view" and shaped.meta.shape == (8, 1, 1)
    assert [a.graph[r].meta.shape for r in shaped.refs] == [(8,)]


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_target_leaves_the_graph_as_captured(case, capture, monkeypatch):
    build, shape, _, _ = CASES[case]
    a = analyze(build(), shape, capture=capture)
    assert ops(a) == CPU_CLUSTERS[case] and split_nodes(a) == []
    monkeypatch.setattr(pipeline, "split_conv_bias", lambda gm, device: gm)
    without = analyze(build(), shape, capture=capture)
    assert [n.format_node() for n in a.graph_module.graph.nodes] == \
        [n.format_node() for n in without.graph_module.graph.nodes]
    assert a.clusters == without.clusters


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forced_split_computes_what_the_model_does(case, capture, split_everywhere):
    build, shape, _, clusters = CASES[case]
    model = build()
    a = analyze(model, shape, capture=capture)
    assert ops(a) == clusters
    x = torch.randn(shape)
    with torch.no_grad():
        torch.testing.assert_close(a.graph_module(x), model(x))


@pytest.mark.parametrize("case", sorted(CASES))
def test_forced_split_kernels_and_patched_model_verify(case, split_everywhere):
    build, shape, _, clusters = CASES[case]
    a = analyze(build(), shape)
    assert ops(a) == clusters
    report = validate(a, timing=False)
    assert all(r.status.startswith("verified") and r.usable for r in report.results)
    assert len(report.results) == len(clusters)
    assert report.model.passed and report.model.patched == tuple(range(len(clusters)))


@pytest.mark.parametrize("model, shape, first", [
    (FunctionalConv(), (1, 4, 5), ("add", "silu")),
    (TransposedConv(), (1, 4, 3, 3), ("add", "sigmoid", "mul")),
], ids=["functional_conv1d_bias_keyword", "conv_transpose2d"])
@pytest.mark.parametrize("capture", ["fx", "export"])
def test_other_convolution_forms_are_split_too(model, shape, first, capture, split_everywhere):
    model.eval()
    a = analyze(model, shape, capture=capture)
    assert ops(a) == [first]
    x = torch.randn(shape)
    with torch.no_grad():
        torch.testing.assert_close(a.graph_module(x), model(x))


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_named_device_overrides_where_the_parameters_are(capture):
    # A CPU model analyzed for CUDA (the CLI on a GPU machine loads the model on the CPU):
    # split, and the graph still runs on the CPU and computes what the model does.
    model = conv_bn_relu()
    a = analyze(model, (1, 4, 4, 4), capture=capture, device="cuda")
    assert ops(a) == [("add", "batch_norm", "relu")]
    x = torch.randn(1, 4, 4, 4)
    with torch.no_grad():
        torch.testing.assert_close(a.graph_module(x), model(x))
    # ...and a model elsewhere analyzed for the CPU is not split.
    on_cpu = analyze(conv_bn_relu().to("meta"), (1, 4, 4, 4), capture=capture, device="cpu")
    assert ops(on_cpu) == CPU_CLUSTERS["conv_bn_relu"] and split_nodes(on_cpu) == []


def test_no_split_without_a_pointwise_or_reduction_reader():
    class TwoConvs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(4, 4, 3, padding=1)
            self.b = nn.Conv2d(4, 4, 1, bias=False)

        def forward(self, x):
            return self.b(self.a(x).flatten(2).unflatten(2, (4, 4)))

    a = analyze(TwoConvs().eval().to("meta"), (1, 4, 4, 4))
    assert split_nodes(a) == [] and ops(a) == []


def test_conv_without_bias_or_with_padding_mode_is_left_alone():
    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.nobias = nn.Conv2d(4, 4, 3, padding=1, bias=False)
            self.reflect = nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect")

        def forward(self, x):
            return torch.relu(self.reflect(torch.relu(self.nobias(x))))

    a = analyze(Plain().eval().to("meta"), (1, 4, 4, 4))
    assert split_nodes(a) == []


def test_cluster_taking_a_split_bias_spells_the_conv_without_it(tmp_path, split_everywhere):
    # The bias add has no source of its own: it sits on the convolution's line. The edit
    # calls the convolution without its bias and hands the kernel the bias to add.
    path = tmp_path / "model.py"
    path.write_text(
        "import torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(4, 8, 3, padding=1)\n"
        "        self.bn = nn.BatchNorm2d(8)\n\n"
        "    def forward(self, x):\n"
        "        y = self.conv(x)\n"
        "        y = self.bn(y)\n"
        "        return F.relu(y)\n")
    a = analyze_file(path, [InputSpec((1, 4, 4, 4))])
    assert ops(a) == [("add", "batch_norm", "relu")]
    (m,) = map_clusters(a)
    assert m.exact, m.reason
    assert (m.start, m.end) == (12, 14)
    # The kernel computes BatchNorm as in eval mode: the lines as written run in train mode.
    assert m.replacement == (
        "        if not self.bn.training:\n"
        "            return cluster0(F.conv2d(x, self.conv.weight, None, self.conv.stride, "
        "self.conv.padding, self.conv.dilation, self.conv.groups), "
        "self.conv.bias.reshape(-1, 1, 1), self.bn.running_mean.reshape(-1, 1, 1), "
        "self.bn.running_var.reshape(-1, 1, 1), self.bn.weight.reshape(-1, 1, 1), "
        "self.bn.bias.reshape(-1, 1, 1))\n"
        "        else:\n"
        "            y = self.conv(x)\n"
        "            y = self.bn(y)\n"
        "            return F.relu(y)"), m.replacement


@pytest.mark.parametrize("cuda, device", [(True, "cuda"), (False, None)])
def test_cli_analyzes_for_the_gpu_it_validates_on(tmp_path, monkeypatch, cuda, device):
    # The CLI loads the model on the CPU and runs its kernels (and Inductor) on the GPU
    # when there is one: the analysis must be made for that GPU.
    seen = []

    def record(*args, **kwargs):
        seen.append(kwargs.get("device"))
        raise FusionAdvisorError("stop after the analysis call")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    # Without CUDA the CLI turns the interpreter on for the process: undone after the test,
    # or a GPU machine's later tests would decorate their kernels for the interpreter.
    # delenv records nothing for a variable that is not set (a GPU machine), so its undo
    # would keep the CLI's; setenv first records "unset" for the undo.
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(cli, "analyze_file", record)
    path = tmp_path / "model.py"
    path.write_text("import torch.nn as nn\n\n\nclass M(nn.Module):\n"
                    "    def forward(self, x):\n        return x.relu() + 1.0\n")
    result = CliRunner().invoke(cli.cli, ["--model", str(path), "--input-shape", "2,4"])
    assert result.exit_code == 2 and "stop after the analysis call" in result.output
    assert seen == [device]
