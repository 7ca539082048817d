"""Sizes read from a tensor's value (`n = t.max().item(); h = y[:n]`): torch.export captures
them as unbacked symbols; the analysis leaves what they size unfused and says which line."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.ir.data_dependent import UNSIZED
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.report.console import header

SLICED = """import torch
import torch.nn as nn


class Sliced(nn.Module):
    def forward(self, x, t):
        y = torch.sigmoid(x * 3) - 1
        n = t.max().item()
        torch._check(n >= 0)
        torch._check(n <= x.shape[0])
        h = {view}
        return torch.relu(h * 2) + 1
"""
VIEWS = ["y[:n]", "y[:n].reshape(n, -1)"]
SPECS = [InputSpec((4, 8)), InputSpec((2,), torch.int64)]


@pytest.mark.parametrize("view", VIEWS)
def test_export_leaves_a_value_sized_slice_unfused_and_names_its_lines(tmp_path, view):
    path = tmp_path / "sliced.py"
    path.write_text(SLICED.format(view=view))
    a = analyze_file(path, SPECS, capture="export")  # raised GuardOnDataDependentSymNode
    assert [c.ops for c in a.clusters] == [("mul", "sigmoid", "sub")]
    assert {n.source.line for n in a.graph.nodes if n.op == UNSIZED} == {11, 12}
    line = header(a)[1]
    assert line.startswith(f"Left unfused: `h = {view}` at ")
    assert ":11 (and " in line
    assert "a number read from a tensor at line 8 (`n = t.max().item()`)" in line
    assert "compute the size from shapes" in line


def test_cli_analyses_it_and_prints_the_line(tmp_path):
    path = tmp_path / "sliced.py"
    path.write_text(SLICED.format(view=VIEWS[0]))
    result = CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "4,8",
                                      "--input-shape", "2", "--dtype", "float32",
                                      "--dtype", "int64", "--capture", "export"])
    assert result.exit_code == 0, result.output
    assert "Left unfused: `h = y[:n]` at " in result.stdout


def test_fx_stops_at_the_item_in_one_line(tmp_path):
    path = tmp_path / "item.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\n"
                    "class Item(nn.Module):\n"
                    "    def forward(self, x, mask):\n"
                    "        n = mask.sum().item()\n"
                    "        return torch.relu((x * 2).reshape(n, -1)) + 1\n")
    result = CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "4,8",
                                      "--input-shape", "4", "--capture", "fx"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert f"{path}:7 (`n = mask.sum().item()`)" in result.output
