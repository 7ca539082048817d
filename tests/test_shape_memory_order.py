"""A shape given as text names its memory layout after a colon (`8,64,56,56:channels_last`),
one spelling for `--input-shape` and the plugin's shape strings: it is analysed, and its
kernels generated, as a tensor example of that layout would be, instead of as contiguous
(kernels that copy the channels-last input into NCHW at every call). Bad spellings:
test_cli_bad_inputs.py."""

from __future__ import annotations

import json

import pytest
import torch
from cli_inputs import TINY
from click.testing import CliRunner
from fusion_plugin_helpers import baselines, make_proj, model_source, run

import fusion_core
from fusion_core.cli import cli
from fusion_core.codegen import generate, write_kernels
from fusion_core.ir.shapes import InputSpec

CL, CL3 = torch.channels_last, torch.channels_last_3d


@pytest.mark.parametrize(("text", "tensor"), [
    ("2,3,4,5:channels_last", torch.empty(2, 3, 4, 5, memory_format=CL)),
    ("2,3,4,5:channels-last", torch.empty(2, 3, 4, 5, memory_format=CL)),  # as reports say it
    ("2,3,4,5,6:channels_last_3d", torch.empty(2, 3, 4, 5, 6, memory_format=CL3)),
    (" 2, 3, 4, 5 : channels_last ", torch.empty(2, 3, 4, 5, memory_format=CL)),
    # one pixel: the same memory as a contiguous tensor, analysed as one (as the tensor is)
    ("2,3,1,1:channels_last", torch.empty(2, 3, 1, 1, memory_format=CL)),
    # one row: torch's format, whatever the size-1 dim's place
    ("2,3,1,4:channels_last", torch.empty(2, 3, 1, 4, memory_format=CL)),
    ("2,3,4,5:contiguous", torch.empty(2, 3, 4, 5)),
    # the dims outermost first, as a transposed example lies
    ("5,3:1,0", torch.empty(3, 5).t()),
    ("4,3,5:0,2,1", torch.empty(4, 5, 3).permute(0, 2, 1)),
])
def test_a_shape_names_its_memory_order_as_a_tensor_example_gives_it(text, tensor):
    spec = InputSpec.parse(text)
    assert spec == InputSpec.of(tensor)
    assert str(spec) == str(InputSpec.of(tensor))


def test_the_cli_analyses_a_channels_last_shape_as_a_channels_last_tensor(tmp_path):
    """Same JSON inputs and same kernel file as the analysis of a channels-last tensor of
    that shape; not the contiguous one's."""
    model = tmp_path / "model.py"
    model.write_text(TINY)
    gen, report = tmp_path / "gen", tmp_path / "out.json"
    result = CliRunner().invoke(cli, ["--model", str(model), "--input-shape",
                                      "2,3,5,6:channels_last", "--out-dir", str(gen),
                                      "--json", str(report)])
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())["inputs"] == [
        {"shape": [2, 3, 5, 6], "dtype": "float32", "memory_order": [0, 2, 3, 1]}]

    def kernel_of(x: torch.Tensor, folder: str) -> str:
        analysis = fusion_core.analyze(fusion_core.load_model(model), x)
        (cluster,) = analysis.clusters
        return write_kernels([generate(analysis, cluster)], tmp_path / folder)[0].read_text()

    written = (gen / "cluster0.py").read_text()
    assert written == kernel_of(torch.randn(2, 3, 5, 6).to(memory_format=CL), "tensor")
    assert written != kernel_of(torch.randn(2, 3, 5, 6), "contiguous")


def test_the_cli_help_names_the_suffix():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "N,M,...[:ORDER]" in result.output and ":channels_last" in result.output


PLUGIN_TESTS = """\
import pytest
import torch

import model


@pytest.mark.fusion_check(model.Net, "2,3,5,8:channels_last")
def test_shape():
    pass


@pytest.mark.fusion_check(model.Net, torch.randn(2, 3, 5, 8).to(memory_format=torch.channels_last))
def test_tensor():
    pass


@pytest.mark.fusion_check(model.Net, "2,3,5,8:channel_last")
def test_typo():
    pass
"""


@pytest.mark.usefixtures("torch_warm")
def test_the_plugin_takes_the_same_spelling(pytester, monkeypatch):
    """A marker's shape string with the suffix records the baseline a channels-last tensor
    records; a misspelt order fails its test in one line."""
    import yaml

    proj = make_proj(pytester, monkeypatch, PLUGIN_TESTS)
    (proj.path / "model.py").write_text(model_source("base"))
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(passed=2, failed=1)
    r.stdout.fnmatch_lines([
        "fusion analysis failed: unknown memory order 'channel_last' after ':' in input shape "
        "'2,3,5,8:channel_last': name one of contiguous, channels_last, channels_last_3d, or "
        "the dims outermost first (e.g. 8,64,56,56:channels_last or 8,64,56,56:0,2,3,1)"])
    saved = {test: yaml.safe_load(path.read_text()) for test, path in baselines(proj.path).items()}
    shape, tensor = saved["test_net.py::test_shape"], saved["test_net.py::test_tensor"]
    assert shape["inputs"] == ["2×3×5×8 float32 channels-last"]
    # Timings (recorded only where there is a GPU) differ run to run; their inputs must not.
    kept = ("test", "measured")
    assert {k: v for k, v in shape.items() if k not in kept} == {
        k: v for k, v in tensor.items() if k not in kept}
    assert [m["inputs"] for m in shape.get("measured", {}).values()] == [
        m["inputs"] for m in tensor.get("measured", {}).values()]
