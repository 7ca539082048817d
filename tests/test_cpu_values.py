"""Ops on CPU values in a model whose kernels run elsewhere are no kernel's, with a reason
(fusion_core/analysis/devices.py); the model's own chain beside them still fuses.

No GPU here: a model held on the meta device makes `torch.arange(T)` on the CPU as a CUDA
model does on a GPU (as tests/test_device_moves.py does), and a model on the CPU analysed
for "cuda" is the CLI's case on a GPU (fusion_core/ir/run_devices.py; fake tensors only).
"""

from pathlib import Path

import pytest
import torch
from rich.console import Console

import fusion_core
from fusion_core.ir.shapes import InputSpec
from fusion_core.load import load_model_source
from fusion_core.pipeline import analyze
from fusion_core.report.console import print_analysis

_MODEL = """import torch
import torch.nn as nn

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        pos = torch.arange(x.shape[-1]{device})
        w = (pos * 0.5).exp().sin()
        h = (x * self.scale).relu()
        return h + w.to(x.device)
"""


def _analyze(tmp_path: Path, device: str, capture: str, target: str | None = None,
             pos_device: str = ""):
    path = tmp_path / "cpu_values.py"
    path.write_text(_MODEL.format(device=pos_device))
    model, _ = load_model_source(path, None, None)
    return analyze(model.to(device), InputSpec((4, 8)), capture=capture, device=target)


def _cli_text(a) -> str:
    console = Console(width=300, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_analysis(a, console, explain_rejections=True)
    return console.export_text()


def _says(run_on: str) -> str:
    return (f"`mul` (line 11) computes on the CPU (its inputs are CPU tensors) while the model "
            f"runs on {run_on}, where a Triton kernel runs: make its inputs there "
            "(`device=x.device`), or move them there first, to fuse it")


# FX takes `arange` of a traced size as an input of the chain; export makes it in the kernel.
@pytest.mark.parametrize("device", ["meta", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("capture, chain", [("fx", ("mul", "exp", "sin")),
                                            ("export", ("arange", "mul", "exp", "sin"))])
def test_a_chain_on_cpu_values_is_rejected_with_its_reason(tmp_path, device, capture, chain):
    a = _analyze(tmp_path, device, capture)
    assert [c.ops for c in a.clusters] == [("mul", "relu", "add")]
    (r,) = [r for r in a.rejections if r.check == "device"]
    assert r.ops == chain and r.culprits == r.nodes
    run_on = "cuda:0" if device == "cuda" else device
    if capture == "fx":
        assert r.reason == _says(run_on)
    else:
        assert r.reason == (f"`arange` (line 10) makes a CPU tensor (it names no device) while "
                            f"the model runs on {run_on}, where a Triton kernel runs: give it "
                            "`device=x.device` to fuse it")
    assert r.reason in _cli_text(a)


def test_a_cpu_model_analysed_for_cuda_rejects_its_cpu_chain(tmp_path):
    # The CLI on a GPU: the model loaded on the CPU, analysed for "cuda" (fake tensors only).
    a = _analyze(tmp_path, "cpu", "fx", target="cuda")
    assert [c.ops for c in a.clusters] == [("mul", "relu", "add")]
    (r,) = a.rejections
    assert (r.check, r.ops, r.reason) == ("device", ("mul", "exp", "sin"), _says("cuda:0"))


@pytest.mark.parametrize("device, target", [("meta", None), ("cpu", "cuda")])
@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_chain_made_on_the_model_device_still_fuses(tmp_path, device, target, capture):
    # Guards the fix against over-reach: `device=x.device` keeps the chain where the model is.
    a = _analyze(tmp_path, device, capture, target, pos_device=", device=x.device")
    assert len(a.clusters) == 1
    assert {"exp", "sin", "relu", "add"} <= set(a.clusters[0].ops)
    assert not [r for r in a.rejections if r.check == "device"]


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_cpu_values_of_a_model_analysed_on_the_cpu_fuse_as_before(tmp_path, capture):
    a = _analyze(tmp_path, "cpu", capture)
    assert len(a.clusters) == 1
    assert {"exp", "sin", "relu", "add"} <= set(a.clusters[0].ops)
    assert not a.rejections


def test_a_move_to_the_cpu_of_a_cpu_model_analysed_for_cuda_is_a_barrier(tmp_path):
    # On the GPU, `h.to("cpu")` moves the value off the device its kernels run on, and the
    # ops after it run on the CPU.
    path = tmp_path / "moved.py"
    path.write_text("import torch.nn as nn\n\nclass M(nn.Module):\n    def forward(self, x):\n"
                    "        h = (x * 2.0).relu().to('cpu')\n        return (h + 1.0).sigmoid()\n")
    model, _ = load_model_source(path, None, None)
    assert [c.ops for c in analyze(model, InputSpec((4, 8)), capture="fx").clusters] == [
        ("mul", "relu", "to", "add", "sigmoid")]
    a = analyze(model, InputSpec((4, 8)), capture="fx", device=torch.device("cuda"))
    assert [c.ops for c in a.clusters] == [("mul", "relu")]
    (b,) = fusion_core.find_barriers(a.graph, a.clusters)
    assert b.target == ".to('cpu')" and "from cuda:0 to cpu" in b.why
    assert [(r.check, r.ops) for r in a.rejections] == [("device", ("add", "sigmoid"))]


def test_the_cli_analysing_for_cuda_names_the_cpu_chain_and_validates_the_rest(tmp_path,
                                                                               monkeypatch):
    # The CLI on a GPU (its target replaced here): the CPU chain gets a reason, not a kernel
    # (on the GPU its kernel failed: "Pointer argument cannot be accessed from Triton").
    from click.testing import CliRunner

    from fusion_core import cli

    path = tmp_path / "cpu_values.py"
    path.write_text(_MODEL.format(device=""))
    monkeypatch.setattr(cli, "analysis_device", lambda: "cuda")
    result = CliRunner().invoke(cli.cli, ["--model", str(path), "--input-shape", "4,8",
                                          "--capture", "fx", "--no-timing",
                                          "--explain-rejections"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "1 fusable cluster" in text and "mul → relu → add" in text, text
    assert "device mul → exp → sin at " in text, text
    assert "computes on the CPU (its inputs are CPU tensors) while the model runs on cuda:0" \
        in text, text
