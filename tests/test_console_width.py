"""The cluster table on consoles of fixed widths: a long chain wraps inside the ops column
while the borders and the one-word category stay; slimmer consoles lose the borders, then
get a paragraph per cluster; no cell is ever cut ("…") or a column dropped."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.report.console import print_analysis

LONG = """\
import torch
import torch.nn as nn


class Long(nn.Module):
    def forward(self, x):
        h = torch.relu(x * 2.0) + 1.0
        h = torch.sigmoid(h) * 3.0
        h = torch.tanh(h) - 0.5
        h = torch.abs(h).exp()
        h = torch.nn.functional.gelu(h) * torch.sigmoid(h)
        return torch.clamp(h, min=0.0, max=4.0).sqrt()
"""
OPS = ("mul", "relu", "add", "sigmoid", "tanh", "sub", "abs", "exp", "gelu", "clamp", "sqrt")


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    path = tmp_path_factory.mktemp("long") / "long.py"
    path.write_text(LONG)
    a = analyze_file(path, [InputSpec((4, 8))])
    assert [c.category for c in a.clusters] == ["elementwise-dag"]
    assert len(a.clusters[0].ops) == 14
    return a


def _table(analysis, width: int) -> str:
    buf = io.StringIO()
    print_analysis(analysis, Console(file=buf, width=width), maps={0: "exact"},
                   lines={0: "L7-12"})
    out = buf.getvalue()
    return out[out.index("Fusable clusters"):out.index("Across ")]


def _whole(table: str) -> None:
    assert "…" not in table
    words = set(re.findall(r"[\w.%-]+", table))
    assert set(OPS) <= words, words
    assert {"3.6", "256", "93%", "exact", "L7-12"} <= words


def test_a_long_chain_wraps_inside_a_bordered_table(analysis):
    table = _table(analysis, 100)
    _whole(table)
    assert "┏" in table and "│ 0 │ elementwise-dag │ mul → " in table, table
    assert max(map(len, table.splitlines())) <= 100
    assert len(table.splitlines()) > 7  # the chain took several lines of its column


def test_a_slimmer_console_drops_the_borders_not_the_category(analysis):
    table = _table(analysis, 72)
    _whole(table)
    assert "┏" not in table and "elementwise-dag" in table
    assert max(map(len, table.splitlines())) <= 72


def test_a_console_too_slim_for_a_table_gets_a_paragraph(analysis):
    table = _table(analysis, 50)
    _whole(table)
    assert "0. elementwise-dag: mul → relu" in table
    assert max(map(len, table.splitlines())) <= 50
