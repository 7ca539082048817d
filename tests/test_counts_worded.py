"""Counts in messages agree with their noun: `1 input`, `2 inputs`, `1 was given`, never
`input(s)` or `1 were given` (fusion_core/units.py `counted`)."""

from __future__ import annotations

import io

from cli_inputs import assert_one_line
from click.testing import CliRunner
from rich.console import Console

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.report.console import print_analysis
from fusion_core.units import counted, plural, was

TWO_INPUTS = """\
import torch.nn as nn


class Two(nn.Module):
    def forward(self, x, y):
        return (x * 2.0).relu() + y
"""

OPTIONAL = """\
import torch.nn as nn


class Opt(nn.Module):
    def forward(self, x, y=None):
        return (x * 2.0).relu() + 1.0
"""


def test_counted_agrees_with_the_count():
    assert [counted(n, "kernel") for n in (0, 1, 2)] == ["0 kernels", "1 kernel", "2 kernels"]
    assert counted(1, "match", "matches") == "1 match"
    assert counted(3, "match", "matches") == "3 matches"
    assert plural(1, "cluster") == "cluster" and plural(4, "cluster") == "clusters"
    assert (was(1), was(2)) == ("was", "were")


def test_one_input_given_to_a_forward_of_two(tmp_path):
    path = tmp_path / "two.py"
    path.write_text(TWO_INPUTS)
    result = CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "4,8"])
    line = assert_one_line(result, "Two.forward takes 2 inputs (x, y) but 1 was given",
                           "repeat --input-shape once per input")
    assert "(s)" not in line


def test_a_default_argument_makes_a_range(tmp_path):
    path = tmp_path / "opt.py"
    path.write_text(OPTIONAL)
    result = CliRunner().invoke(cli, ["--model", str(path), *["--input-shape", "4,8"] * 3])
    assert_one_line(result, "Opt.forward takes 1 to 2 inputs (x, y) but 3 were given")


def test_the_console_header_and_totals_say_one_cluster(tmp_path):
    path = tmp_path / "opt.py"
    path.write_text(OPTIONAL)
    analysis = analyze_file(path, [InputSpec((4, 8))])
    buf = io.StringIO()
    print_analysis(analysis, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "(6 nodes, 1 fusable cluster, captured with FX tracing)" in text, text
    assert "Across 1 cluster:" in text
    assert "(s)" not in text
