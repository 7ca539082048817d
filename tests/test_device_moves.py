"""A `to` that moves its value to another device stays a call of its own, with a reason
(fusion_core/ir/device_moves.py); one on the same device fuses as a cast, as before.

No GPU here: `.to("meta")` of CPU values (or `.to("cpu")` of a model held on the meta device)
is a device move shape propagation follows on the CPU, as `.to("cpu")` of CUDA values is on a
GPU (the gpu test at the end)."""

from pathlib import Path

import pytest
import torch
import torch.nn as nn
from rich.console import Console

import fusion_core
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze, analyze_file
from fusion_core.report.console import print_analysis

_MODEL = """import torch
import torch.nn as nn

class M(nn.Module):
    def forward(self, x):
        h = (x * 2.0).relu()
        h = {move}
        return (h + 1.0).sigmoid()
"""


def _model(tmp_path: Path, move: str) -> Path:
    path = tmp_path / "moved.py"
    path.write_text(_MODEL.format(move=move))
    return path


def _cli_text(a) -> str:
    console = Console(width=250, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_analysis(a, console, explain_rejections=True)
    return console.export_text()


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("move", ['h.to("meta")', 'h.to(torch.device("meta"), torch.float16)',
                                  'h.to(device="meta")'])
def test_a_move_to_another_device_splits_the_chain_and_says_why(tmp_path, capture, move):
    a = analyze_file(_model(tmp_path, move), [InputSpec((4, 8))], capture=capture)
    assert [c.ops for c in a.clusters] == [("mul", "relu"), ("add", "sigmoid")]
    (b,) = fusion_core.find_barriers(a.graph, a.clusters)
    spelled = move.removeprefix("h")
    assert b.target == spelled
    text = b.describe(a.graph)
    assert (f"`{spelled}` at {tmp_path}/moved.py:7 sits between `relu` (line 6) and `add` "
            "(line 8): it moves the value from cpu to meta, and a kernel writes on the device "
            "it reads; move the copy before or after the ops you want in one kernel") == text
    cli = _cli_text(a)
    assert "Fusion barriers (1)" in cli
    assert f"  `{spelled}` at " in cli and "moved.py:7 sits between `relu` (line 6)" in cli
    assert "it moves the value from cpu to meta" in cli


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_move_after_a_cluster_says_why_it_stays_out(tmp_path, capture):
    # Compute on one side only: the CLI still names it, with the device, not "no rule".
    path = tmp_path / "last.py"
    path.write_text("import torch.nn as nn\n\nclass M(nn.Module):\n    def forward(self, x):\n"
                    "        return (x * 2.0 + 1.0).to('meta')\n")
    a = analyze_file(path, [InputSpec((4, 8))], capture=capture)
    assert [c.ops for c in a.clusters] == [("mul", "add")]
    cli = _cli_text(a)
    assert ("last.py:5 reads `add` (line 5), which fuse without it: it moves the value from "
            "cpu to meta") in cli, cli
    assert "`.to('meta')` at " in cli


_SAME_DEVICE = ['h.to("cpu")', "h.to(x.device)", "h.to(torch.float16)"]


# FX binds no `to` of two positional arguments and no `.cpu()` (they stay calls, as before).
@pytest.mark.parametrize("capture, move", [
    *(("fx", m) for m in _SAME_DEVICE),
    *(("export", m) for m in (*_SAME_DEVICE, 'h.to("cpu", torch.float64)', "h.cpu()"))])
def test_a_conversion_on_the_same_device_still_fuses(tmp_path, capture, move):
    # Guards the fix against over-reach: these fused before it and must still.
    a = analyze_file(_model(tmp_path, move), [InputSpec((4, 8))], capture=capture)
    assert len(a.clusters) == 1
    assert a.clusters[0].ops in (("mul", "relu", "to", "add", "sigmoid"),
                                 ("mul", "relu", "add", "sigmoid"))
    assert fusion_core.find_barriers(a.graph, a.clusters) == ()


class _Moves(nn.Module):
    def __init__(self, method: bool) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))
        self.method = method

    def forward(self, x):
        h = (x * self.scale).relu()
        if self.method:
            h = h.cpu()
        else:
            h = h.to("cpu")
        return (h + 1.0).sigmoid()


# A model held on the meta device moves its values to the CPU here as a CUDA model does on a
# GPU; FX binds no `.cpu()` as a `to`, export records it as one. The ops after the move run on
# the CPU, where no Triton kernel runs (fusion_core/analysis/devices.py).
@pytest.mark.parametrize("device", ["meta", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("method", [False, True], ids=["to", "cpu"])
def test_a_value_moved_to_the_cpu_is_no_kernel_of_the_chain(device, capture, method):
    a = analyze(_Moves(method).to(device), (4, 8), capture=capture)
    assert [c.ops for c in a.clusters] == [("mul", "relu")]
    assert [(r.check, r.ops) for r in a.rejections] == [("device", ("add", "sigmoid"))]
    (b,) = fusion_core.find_barriers(a.graph, a.clusters)
    assert b.target == (".cpu()" if method else '.to("cpu")')
    moved = f"it moves the value from {'cuda:0' if device == 'cuda' else device} to cpu"
    assert moved in b.describe(a.graph)
