"""Diffs of exact clusters: text, colours on a terminal only, the table column and JSON."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from rich.console import Console

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.report.json_report import schema
from fusion_core.sourcemap import map_clusters, print_diffs, render

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RED, GREEN = "\x1b[31m", "\x1b[32m"


@pytest.fixture(scope="module")
def example_net_maps():
    return map_clusters(analyze_file(EXAMPLES / "example_net.py", [InputSpec((2, 1024))]))


@pytest.fixture(scope="module")
def microgpt_maps():
    analysis = analyze_file(EXAMPLES / "microgpt.py", [InputSpec((1, 8), torch.int64)])
    return map_clusters(analysis)


def test_example_net_diff_text(example_net_maps):
    text = render(example_net_maps)
    block = text.split("\n\n")[0].splitlines()
    assert block[0].endswith("example_net.py:15-17  cluster 0")
    assert block[1].startswith("--- a/") and block[2].startswith("+++ b/")
    assert block[3] == "@@ -15,3 +15 @@"
    assert block[4:] == ["-        x = x * 2.0", "-        x = F.relu(x)",
                         "-        x = x + 1.0", "+        x = cluster0(x)"]
    assert text.count("@@") == 6  # three hunks
    assert "+        return cluster2(x)" in text


def test_a_model_outside_the_working_folder_gets_absolute_diff_names(tmp_path):
    model = tmp_path / "example_net.py"
    shutil.copy(EXAMPLES / "example_net.py", model)
    block = render(map_clusters(analyze_file(model, [InputSpec((2, 1024))]))).splitlines()
    assert block[1] == f"--- {model.as_posix()}" and block[2] == f"+++ {model.as_posix()}"


def test_shared_lines_show_one_diff_naming_both_clusters(microgpt_maps):
    exact = [m for m in microgpt_maps if m.exact]
    text = render(microgpt_maps)
    assert text.count("@@ -") == 1
    names = ", ".join(str(m.cluster_index) for m in exact)
    assert f"clusters {names}" in text.splitlines()[0]
    call = exact[0].call
    assert (
        "@@ -31,4 +31,7 @@\n"
        "-        scores = scores * self.scale\n"
        "-        scores = scores.masked_fill(self.causal_mask[:T, :T], float(\"-inf\"))\n"
        "-        probs = F.softmax(scores, dim=-1)\n"
        "-        probs = self.attn_drop(probs)\n"
        "+        if not self.attn_drop.training:\n"
        f"+            probs = {call}(scores, self.causal_mask[:T, :T])\n"
        "+        else:\n"
        "+            scores = scores * self.scale\n"
        "+            scores = scores.masked_fill(self.causal_mask[:T, :T], float(\"-inf\"))\n"
        "+            probs = F.softmax(scores, dim=-1)\n"
        "+            probs = self.attn_drop(probs)") in text, text


def _printed(maps, terminal: bool) -> str:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=terminal, color_system="standard" if terminal
                      else None, width=200)
    print_diffs(maps, console)
    return buf.getvalue()


def test_colours_on_a_terminal_plain_when_piped(example_net_maps, microgpt_maps):
    coloured = _printed(example_net_maps, terminal=True)
    assert RED + "-        x = x * 2.0" in coloured
    assert GREEN + "+        x = cluster0(x)" in coloured
    plain = _printed(example_net_maps, terminal=False)
    assert "\x1b[" not in plain
    assert "-        x = x * 2.0\n" in plain and "+        x = cluster0(x)\n" in plain
    # Brackets in code are printed as written, not read as markup.
    assert "self.causal_mask[:T, :T]" in _printed(microgpt_maps, terminal=True)
    pointers = _printed(microgpt_maps, terminal=False)
    assert "pointer to" in pointers and "no diff: only part of the call" in pointers


def test_cli_fills_the_map_column_and_json(tmp_path):
    model = tmp_path / "microgpt.py"
    shutil.copy(EXAMPLES / "microgpt.py", model)
    out = tmp_path / "out.json"
    result = CliRunner().invoke(cli, ["--model", str(model), "--input-shape", "1,8",
                                      "--dtype", "int64", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│")]
    assert len(rows) == 7
    assert sum(" exact " in r for r in rows) == 2 and sum(" pointer " in r for r in rows) == 5
    assert "Source edits" in result.output
    assert ("+        if not self.attn_drop.training:\n"
            "+            probs = cluster1(scores, self.causal_mask[:T, :T])\n"
            "+        else:\n"
            "+            scores = scores * self.scale\n") in result.output, result.output
    assert "\x1b[" not in result.output  # piped: no colour codes
    doc = json.loads(out.read_text())
    entries = {e["cluster"]: e for e in doc["source_map"]}
    assert len(entries) == len(doc["clusters"]) == 7
    exact = [e for e in entries.values() if e["map"] == "exact"]
    assert len(exact) == 2 and all(e["reason"] is None for e in exact)
    assert exact[0]["function"] == "CausalSelfAttention.forward"
    # JSON holds the replacement dedented (cli_run.py): the first line at no indentation,
    # the others where they stand relative to it.
    assert exact[0]["replacement"] == (
        "if not self.attn_drop.training:\n"
        f"    probs = cluster{exact[0]['cluster']}(scores, self.causal_mask[:T, :T])\n"
        "else:\n"
        "    scores = scores * self.scale\n"
        "    scores = scores.masked_fill(self.causal_mask[:T, :T], float(\"-inf\"))\n"
        "    probs = F.softmax(scores, dim=-1)\n"
        "    probs = self.attn_drop(probs)")
    assert exact[0]["shared_with"] == [exact[1]["cluster"]]
    pointers = [e for e in entries.values() if e["map"] == "pointer"]
    assert all(e["reason"] and e["lines"]["start"] >= 1 for e in pointers)
    pytest.importorskip("jsonschema").validate(doc, schema())  # last: it may skip


def test_the_lines_column_shows_whole_statements(tmp_path):
    from fusion_core.cli_run import lines_column, map_column
    from fusion_core.report.console import cluster_table

    path = tmp_path / "model.py"
    path.write_text("import torch\n\n\nclass M(torch.nn.Module):\n"
                    "    def forward(self, x):\n"
                    "        y = torch.sigmoid(\n"
                    "            x * 2.0\n"
                    "        )\n"
                    "        return y\n")
    analysis = analyze_file(path, [InputSpec((4, 8))])
    maps = map_clusters(analysis)
    assert (analysis.clusters[0].lines.start, analysis.clusters[0].lines.end) == (6, 7)
    assert (maps[0].start, maps[0].end) == (6, 8)  # the closing parenthesis too
    buf = io.StringIO()
    Console(file=buf, width=200).print(cluster_table(analysis, map_column(maps),
                                                     lines_column(maps)))
    row = next(line for line in buf.getvalue().splitlines() if line.startswith("│ 0"))
    assert "│ exact │ L6-8" in row
