"""The `fusion-advisor` command on the acceptance models: header, cluster rows, totals
line, the DRAM note, --explain-rejections, and the --json file (validated against the
shipped schema)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from model_sources import RUNTIME_SCALE
from rich.console import Console

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.report.console import print_analysis
from fusion_core.report.json_report import schema
from fusion_core.units import counted

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def example_net_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "analysis.json"
    result = CliRunner().invoke(cli, [
        "--model", str(EXAMPLES / "example_net.py"), "--input-shape", "16384,1024",
        "--json", str(out)])
    return result, out


def test_example_net_exit_code_and_header(example_net_run):
    result, _ = example_net_run
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (
        "ExampleNet (13 nodes, 3 fusable clusters, captured with FX tracing)")


@pytest.mark.parametrize("row", [
    ("0", "elementwise-chain", "mul → relu → add", "384.0 MB", "128.0 MB", "67%", "L15-17"),
    ("1", "elementwise-chain", "gelu → sigmoid → mul", "192.0 MB", "64.0 MB", "67%", "L20-22"),
    ("2", "single-reduction-boundary", "tanh → mul → softmax", "192.0 MB", "64.0 MB", "67%",
     "L25-27"),
])
def test_example_net_rows(example_net_run, row):
    result, _ = example_net_run
    rows = [[cell.strip() for cell in line.split("│")[1:-1]]
            for line in result.stdout.splitlines() if line.startswith("│")]
    assert any(all(cell in cells for cell in row) and cells[0] == row[0] for cells in rows)


def test_example_net_totals_and_note(example_net_run):
    result, _ = example_net_run
    assert ("Across 3 clusters: 512.0 MB of 768.0 MB cluster-local traffic avoided."
            in result.stdout.splitlines())
    assert "Estimates are a DRAM upper bound with no cache model." in result.stdout


def test_example_net_json_validates_and_matches(example_net_run):
    result, out = example_net_run
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 1 and doc["model"] == "ExampleNet"
    assert doc["inputs"] == [{"shape": [16384, 1024], "dtype": "float32"}]
    assert [c["ops"] for c in doc["clusters"]] == [
        ["mul", "relu", "add"], ["gelu", "sigmoid", "mul"], ["tanh", "mul", "softmax"]]
    assert doc["totals"] == {"unfused_bytes": 768 * 2**20, "fused_bytes": 256 * 2**20}
    assert f"Wrote {out}" in result.stdout
    pytest.importorskip("jsonschema").validate(doc, schema())  # last: it may skip


def test_json_leaves_no_temp_file(example_net_run):
    _, out = example_net_run
    assert [p.name for p in out.parent.iterdir()] == [out.name]


def render(analysis, **kw) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_analysis(analysis, console, **kw)
    return console.export_text()


def test_microgpt_report_lists_attention_clusters_and_rejection_section():
    a = analyze_file(EXAMPLES / "microgpt.py", [InputSpec((2, 128), torch.int64)])
    text = render(a, explain_rejections=True)
    assert text.count("mul → masked_fill → softmax → dropout") == 2
    header = (f"MicroGPT ({a.n_nodes} nodes, {counted(len(a.clusters), 'fusable cluster')}, "
              "captured with FX tracing)")
    assert text.splitlines()[0] == header
    assert "Rejected candidates" in text
    assert all(c.chain in text for c in a.clusters)


def test_explain_rejections_names_check_reason_and_dropped_nodes(tmp_path):
    model = tmp_path / "inplace.py"
    model.write_text(
        "import torch.nn as nn\n"
        "import torch.nn.functional as F\n\n"
        "class M(nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = x.mul_(2.0)\n"
        "        y = F.relu(y)\n"
        "        return y + 1.0\n")
    a = analyze_file(model, [InputSpec((4, 8))])
    text = render(a, explain_rejections=True)
    assert "Rejected candidates (1)" in text
    assert "aliasing" in text and "mutates its input in place" in text
    assert "inplace.py:6-8" in text
    assert "dropped `.mul_()` (line 6) and retried" in text
    assert "Rejected candidates" not in render(a)  # only with the flag


def test_explain_rejections_names_dropped_ops_as_written_not_by_node_name(tmp_path):
    """The dropped `h * s` is the graph's `mul_1`: the report says `mul` and its line."""
    model = tmp_path / "scale.py"
    model.write_text(RUNTIME_SCALE)
    a = analyze_file(model, [InputSpec((4, 8))])
    text = render(a, explain_rejections=True)
    assert "dropped `mul` (line 8) and retried" in text
    assert "mul_1" not in text


def test_multi_input_model_with_a_dtype_per_input(tmp_path):
    model = tmp_path / "masked.py"
    model.write_text(
        "import torch.nn as nn\n\n"
        "class Masked(nn.Module):\n"
        "    def forward(self, x, mask):\n"
        "        return (x * 2.0).masked_fill(mask, 0.0) + 1.0\n")
    result = CliRunner().invoke(cli, [
        "--model", str(model), "--input-shape", "4,8", "--input-shape", "4,8",
        "--dtype", "float32", "--dtype", "bool"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (
        "Masked (6 nodes, 1 fusable cluster, captured with FX tracing)")
    assert "mul → masked_fill → add" in result.stdout


# `e` would be held in registers over two index maps (`e + e.t()`): legal by the graph
# checks alone, so codegen raises LoweringError for that cluster alone.
MIXED = """import torch
import torch.nn as nn


class Mixed(nn.Module):
    def forward(self, x):
        a = (x * 2.0).relu() + 1.0
        e = torch.exp(torch.matmul(a, a) * 2.0)
        return e + e.t()
"""


def test_a_cluster_that_cannot_be_lowered_is_skipped_and_the_rest_written(tmp_path,
                                                                          monkeypatch):
    """The pipeline's checks end with a dry run of the code generator, so it normally rejects
    `mul → exp → t → add` here (test_legality). Without that check the code generator's own
    refusal must still reach the user as a skip."""
    from fusion_core import pipeline
    from fusion_core.codegen import LoweringError, generate

    monkeypatch.setattr(pipeline, "CHECKS", pipeline.CHECKS[:-1])
    model = tmp_path / "mixed.py"
    model.write_text(MIXED)
    a = analyze_file(model, [InputSpec((8, 8))])
    assert [c.ops for c in a.clusters] == [("mul", "relu", "add"), ("mul", "exp", "t", "add")]
    generate(a, a.clusters[0])
    with pytest.raises(LoweringError) as err:  # a real limit, not a test double
        generate(a, a.clusters[1])
    reason = str(err.value)

    out, gen = tmp_path / "a.json", tmp_path / "gen"
    result = CliRunner().invoke(cli, ["--model", str(model), "--input-shape", "8,8",
                                      "--out-dir", str(gen), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in gen.iterdir()) == ["cluster0.py"]
    assert f"Wrote 1 kernel to {gen}: cluster0.py" in result.stdout
    assert f"cluster 1: no kernel written, it cannot be lowered: {reason}" in (
        result.stdout.splitlines())
    assert "cluster 0: verified (" in result.stdout  # interpreter or cuda
    assert "model numerics: pass (1 kernel patched" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["kernels"] == {"out_dir": str(gen), "files": ["cluster0.py"],
                              "skipped": [{"cluster": 1, "reason": reason}]}
    assert [c["usable"] for c in doc["validation"]["clusters"]] == [True, False]
    pytest.importorskip("jsonschema").validate(doc, schema())  # last: it may skip


# Gates that read timings: on a GPU their verdicts, like the timings, vary between runs.
MEASURED_GATES = ("benchmark", "bandwidth")


def deterministic_part(output: str, doc: dict) -> tuple:
    """What repeats on every machine: the printed report up to the GPU's Measured section
    (all of it without CUDA) and, from the JSON, every verdict and error that no timing
    decides (the Measured section's numerics are there). With CUDA each kernel runs with
    the configuration its timing picked (codegen/tuning.py), and another pick sums a row in
    another order: the errors then differ in their last bits, so only the verdicts count."""
    def err(value):
        return None if torch.cuda.is_available() else value

    numerics = [(c["cluster"], err(c["max_abs_err"]),
                 [(g["gate"], g["passed"], err(g["max_abs_err"])) for g in c["gates"]
                  if g["gate"] not in MEASURED_GATES])
                for c in doc["validation"]["clusters"]]
    model = {k: doc["validation"]["model"][k] for k in ("passed", "patched")}
    return output.split("\nMeasured\n")[0], numerics, model, err(
        doc["validation"]["model"]["max_abs_err"])


def test_the_same_command_prints_the_same_report(example_net_run):
    """The model's random initial weights are seeded, so the numerics errors (and the whole
    report, as the README shows it, on a machine without CUDA) repeat from run to run;
    measured timings, which a GPU prints, are left out of the comparison."""
    torch.manual_seed(1234)  # whatever the global generator held before
    first, first_json = example_net_run
    again_json = first_json.with_name("again.json")
    again = CliRunner().invoke(cli, [
        "--model", str(EXAMPLES / "example_net.py"), "--input-shape", "16384,1024",
        "--json", str(again_json)])
    assert again.exit_code == 0
    assert "max abs err" in again.output
    output = again.output.replace("again.json", "analysis.json")
    assert deterministic_part(output, json.loads(again_json.read_text())) == (
        deterministic_part(first.output, json.loads(first_json.read_text())))
    if not torch.cuda.is_available():
        assert output == first.output


def test_no_timing_validates_numerics_only(tmp_path, monkeypatch):
    """`--no-timing` reaches validation as `timing=False`: the section is Numerics, never
    Measured (on a GPU it says the timings were not run), and the JSON says `timed: false`."""
    from fusion_core.validate import run as validate_run
    from fusion_core.validate.report import NO_GPU_LINE, NOT_TIMED_LINE

    asked, real = [], validate_run.validate
    monkeypatch.setattr(validate_run, "validate",
                        lambda *a, **kw: asked.append(kw.get("timing")) or real(*a, **kw))
    out = tmp_path / "a.json"
    result = CliRunner().invoke(cli, ["--model", str(EXAMPLES / "example_net.py"),
                                      "--input-shape", "64,1024", "--no-timing",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert asked == [False]
    assert "\nNumerics\n" in result.stdout and "\nMeasured\n" not in result.stdout
    assert (NOT_TIMED_LINE if torch.cuda.is_available() else NO_GPU_LINE) in result.stdout
    doc = json.loads(out.read_text())
    assert doc["validation"]["timed"] is False
    assert all(c["timing_us"] is None and c["usable"] for c in doc["validation"]["clusters"])
    pytest.importorskip("jsonschema").validate(doc, schema())  # last: it may skip
