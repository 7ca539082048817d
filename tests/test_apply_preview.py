"""The Source edits preview says every line `--apply` would write: the import lines it adds
at the top (from the function that writes them), and which edits it would leave out.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_apply import ONE_CLUSTER, every_kernel_off_by_one

from fusion_core import cli
from fusion_core import cli_apply as sm_steps
from fusion_core.report.json_report import schema

# A convolution whose bias a CUDA target adds in the kernel: the edit calls F.conv2d, which
# nothing the file imports reaches, so --apply adds `import torch.nn.functional as F` too.
NO_FUNCTIONAL = """\
from torch.nn import BatchNorm2d, Conv2d, Module, ReLU


class Net(Module):
    def __init__(self):
        super().__init__()
        self.conv1 = Conv2d(3, 8, 3, padding=1)
        self.bn1 = BatchNorm2d(8)
        self.act = ReLU()

    def forward(self, x):
        h = self.conv1(x)
        h = self.bn1(h)
        return self.act(h)
"""


def run_cli(model: str, shape: str, json_path: Path, *args: str, input: str | None = None):
    return CliRunner().invoke(cli.cli, ["--model", model, "--input-shape", shape,
                                        "--no-timing", "--json", str(json_path), *args],
                              input=input)


def section(output: str, start: str, end: str) -> list[str]:
    return output.split(start, 1)[1].split(end, 1)[0].splitlines()


def checked(json_path: Path) -> dict:
    """The `--json` document, checked against the shipped schema; its `apply` section."""
    doc = json.loads(json_path.read_text())
    jsonschema = pytest.importorskip("jsonschema")  # the GPU box's environment lacks it
    jsonschema.validate(doc, schema())
    broken = {**doc, "apply": {k: v for k, v in doc["apply"].items() if k != "imports"}}
    with pytest.raises(jsonschema.ValidationError):  # the schema really requires them
        jsonschema.validate(broken, schema())
    return doc["apply"]


def added(lines: list[str]) -> list[str]:
    return [line[1:] for line in lines if line.startswith("+") and not line.startswith("+++")]


def test_source_edits_show_the_import_lines_the_apply_prompt_writes(tmp_path, monkeypatch):
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    monkeypatch.setattr(sm_steps, "stdin_is_terminal", lambda: True)
    result = run_cli(str(path), "4,8", tmp_path / "r.json", "--apply", input="n\n")
    assert result.exit_code == 0, result.output
    preview = section(result.output, "imports --apply adds", "Wrote ")
    written = added(section(result.output, "Changes to ", "Rewrite "))
    # The whole-file diff asked about: the import hunk, then the edit's line.
    assert added(preview) == written[:-1] == [
        "if __package__:  # fused kernels written by fusion-advisor --apply",
        "    from .tiny_fused import cluster0", "else:", "    from tiny_fused import cluster0"]
    assert "tiny.py:3  imports --apply adds" in result.output
    assert "@@ -2,0 +3,4 @@" in preview  # the same hunk the prompt's diff shows
    assert checked(tmp_path / "r.json") == {"file": str(path.resolve()), "line": 3,
                                            "imports": written[:-1], "skipped": [],
                                            "refused": None, "refused_file": None,
                                            "other_files": []}
    assert "--apply skips" not in result.output


def test_an_import_the_edit_itself_needs_is_previewed_above_the_kernels(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "analysis_device", lambda: "cuda")  # the bias goes in the kernel
    path = tmp_path / "net.py"
    path.write_text(NO_FUNCTIONAL)
    result = run_cli(f"{path}:Net", "2,3,8,8", tmp_path / "r.json", "--apply", "--yes")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    preview = added(section(result.output, "imports --apply adds", "Wrote "))
    assert preview[:2] == ["import torch.nn.functional as F", "if __package__:  # fused "
                           "kernels written by fusion-advisor --apply"], preview
    new_lines = [line for line in path.read_text().splitlines()
                 if line not in NO_FUNCTIONAL.splitlines()]
    assert new_lines[:len(preview)] == preview  # exactly what was written at the top
    assert json.loads((tmp_path / "r.json").read_text())["apply"]["imports"] == preview


def test_an_edit_apply_would_skip_is_marked_in_the_preview(tmp_path, monkeypatch):
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    every_kernel_off_by_one(monkeypatch)
    result = run_cli(str(path), "4,8", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    shown = section(result.output, "Source edits", "Wrote ")
    assert "+        y = cluster0(x)" in shown  # the diff stays, marked
    marks = [line for line in shown if line.startswith("--apply skips this edit: ")]
    assert len(marks) == 1 and marks[0].startswith(
        "--apply skips this edit: cluster 0's kernel is not verified (FAILED cluster "
        "numerics"), shown
    assert "imports --apply adds" not in result.output  # nothing written: no imports
    doc = checked(tmp_path / "r.json")
    assert doc["line"] is None and doc["imports"] == []
    assert doc["skipped"] == [{"cluster": 0, "reason": marks[0].split(": ", 1)[1]}]
