"""Unusual but valid inputs to `fusion-advisor`, and refusals around `--apply`.

The model file at write time must be the file imported; CRLF, tabs, form feeds, a symlinked
model and an existing `.bak` are applied; without Triton the report says how to install it;
piped and 80-column output reads whole. Refusals keep every user file as it was (see
cli_inputs.py).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_inputs import DEAD_CODE, ROOT, SHAPE, TINY, assert_refused, snapshot
from click.testing import CliRunner

from fusion_core import cli_apply as sm_steps
from fusion_core import cli_run
from fusion_core.cli import cli

# -- --apply: the file at write time must be the file imported ------------------------------

def _apply_args(path: Path) -> list[str]:
    return ["--model", str(path), *SHAPE, "--apply", "--yes"]


def test_a_file_saved_between_import_and_mapping_is_not_overwritten(tmp_path, monkeypatch):
    path = tmp_path / "model.py"
    path.write_text(TINY)
    edited = TINY.replace("y + 1.0", "y + 2.0")
    real = cli_run.map_clusters

    def save_then_map(analysis):  # the user saves the file while the analysis runs
        path.write_text(edited)
        return real(analysis)

    monkeypatch.setattr(cli_run, "map_clusters", save_then_map)
    result = CliRunner().invoke(cli, _apply_args(path))
    before = {"model.py": (edited.encode(), stat.S_IMODE(path.stat().st_mode))}
    assert_refused(result, before, tmp_path, "model.py changed since it was analyzed",
                   "run fusion-advisor again")


def test_a_file_changed_before_the_answer_is_not_overwritten(tmp_path, monkeypatch):
    path = tmp_path / "model.py"
    path.write_text(TINY)
    path.chmod(0o640)
    edited = TINY + "# saved while the question was on screen\n"

    def answer_after_saving(question: str) -> bool:
        path.write_text(edited)
        return True

    monkeypatch.setattr(sm_steps, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr(sm_steps, "terminal_prompt", lambda: answer_after_saving)
    result = CliRunner().invoke(cli, ["--model", str(path), *SHAPE, "--apply"])
    assert_refused(result, {"model.py": (edited.encode(), 0o640)}, tmp_path,
                   "changed since it was analyzed")


@pytest.mark.skipif(ROOT, reason="root writes to read-only folders")
def test_apply_in_a_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "model.py").write_text(TINY)
    before = snapshot(tmp_path)
    folder.chmod(0o555)
    try:
        result = CliRunner().invoke(cli, _apply_args(folder / "model.py"))
    finally:
        folder.chmod(0o755)
    before["ro"] = (b"<dir>", 0o755)
    assert_refused(result, before, tmp_path, "cannot write next to", "permissions")


WHITESPACE = (
    "import torch.nn as nn\r\n"
    "\x0c\r\n"
    "# a form feed \x0c and a vertical tab \x0b in a comment\r\n"
    "class Tiny(nn.Module):\r\n"
    "\tdef forward(self, x):\r\n"
    "\t\ty = x * 2.0\r\n"
    "\t\ty = y.relu()\r\n"
    "\t\treturn y + 1.0\r\n"
)


def test_crlf_tabs_and_form_feeds_are_applied(tmp_path):
    """Whitespace the tokenizer accepts (and str.splitlines would split on) changes
    nothing: the file is not taken for changed, and CRLF and tabs survive."""
    path = tmp_path / "model.py"
    path.write_bytes(WHITESPACE.encode())
    path.chmod(0o640)
    result = CliRunner().invoke(cli, _apply_args(path))
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output
    data = path.read_bytes()
    assert b"\t\treturn cluster0(x)\r\n" in data and data.count(b"\n") == data.count(b"\r\n")
    assert b"\x0c\r\n# a form feed \x0c and a vertical tab \x0b" in data
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert (tmp_path / "model.py.bak").read_bytes() == WHITESPACE.encode()


def test_symlinked_model_with_an_existing_bak(tmp_path):
    """The link's target is rewritten (the link stays a link) and a backup the user
    already has is kept: ours takes the next free name."""
    real = tmp_path / "src" / "model.py"
    real.parent.mkdir()
    real.write_text(TINY)
    (real.parent / "model.py.bak").write_text("the user's own backup\n")
    link = tmp_path / "model.py"
    link.symlink_to(real)
    result = CliRunner().invoke(cli, _apply_args(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "return cluster0(x)" in real.read_text()
    assert (real.parent / "model.py.bak").read_text() == "the user's own backup\n"
    assert (real.parent / "model.py.bak1").read_text() == TINY


# -- no triton -----------------------------------------------------------------------------

NO_TRITON = "import sys; sys.modules['triton'] = None; from fusion_core.cli import main; main()"


def run_without_triton(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-c", NO_TRITON, *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_without_triton_the_header_says_how_to_install_it(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(TINY)
    proc = run_without_triton("--model", str(path), *SHAPE, "--out-dir", str(tmp_path / "gen"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("triton is not installed")
    assert "pip install 'fusion-advisor[gpu]'" in lines[1]
    assert "cluster 0: skipped: triton not installed" in lines
    assert "FAILED" not in proc.stdout
    assert (tmp_path / "gen" / "cluster0.py").is_file()  # generating needs no triton
    assert path.read_text() == TINY


def test_without_triton_apply_is_refused(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(TINY)
    before = snapshot(tmp_path)
    proc = run_without_triton("--model", str(path), *SHAPE, "--apply", "--yes")
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --apply") and "triton is not installed" in line
    assert "pip install" in line
    assert snapshot(tmp_path) == before


# -- output width --------------------------------------------------------------------------

def test_piped_output_keeps_sentences_on_one_line(tmp_path):
    """Not a terminal: a line longer than 140 columns is printed whole, not broken."""
    folder = tmp_path / ("a_long_folder_name_" * 8)
    folder.mkdir()
    (folder / "model.py").write_text(DEAD_CODE)
    result = CliRunner().invoke(cli, ["--model", str(folder / "model.py"), *SHAPE,
                                      "--explain-rejections"])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if "dead-code" in line]
    assert len(line) > 140 and line.endswith(f"{folder}/model.py:6")


def test_at_80_columns_no_table_cell_is_cut(tmp_path):
    microgpt = Path(__file__).resolve().parents[1] / "examples" / "microgpt.py"
    result = CliRunner().invoke(cli, ["--model", str(microgpt), "--input-shape", "1,8",
                                      "--dtype", "int64"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    table = result.output[:result.output.index("Across ")]
    assert "…" not in table
    assert max(len(line) for line in table.splitlines()) <= 80
    for word in ("multi-", "output", "single-", "reduction-", "boundary", "masked_fill",
                 "layer_norm"):
        assert word in table
    # Prose is not wrapped: the recompute note stays one line though wider than 80.
    assert any(line.startswith("Cluster 3 recomputes") and line.endswith("store it.")
               for line in result.output.splitlines())


def test_a_reader_closing_the_pipe_is_not_called_a_model_exit(tmp_path):
    """`fusion-advisor ... | head -1`: rich ends the run with status 1, as it would anyway;
    stderr must not blame the model for calling sys.exit()."""
    (tmp_path / "model.py").write_text(TINY)
    cmd = [sys.executable, "-m", "fusion_core.cli", "--model", str(tmp_path / "model.py"),
           *SHAPE]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout.readline().startswith(b"Tiny")
        proc.stdout.close()  # the reader goes away before the report is written
        stderr = proc.stderr.read().decode()
    assert "sys.exit" not in stderr and "Traceback" not in stderr, stderr


LOG_OF_ZERO = """import torch
import torch.nn as nn


class LogZero(nn.Module):
    def forward(self, x):
        return (torch.log(torch.relu(x)) * 2.0).clamp(min=-5.0)
"""


def test_a_kernel_taking_log_of_zero_prints_no_numpy_warning(tmp_path):
    """Under Triton's interpreter numpy warns on log(0) = -inf, which eager torch computes
    silently (T5's relative-position buckets): the report must not carry numpy's lines.
    A subprocess, since pytest would record the warning instead of printing it."""
    (tmp_path / "model.py").write_text(LOG_OF_ZERO)
    done = subprocess.run([sys.executable, "-m", "fusion_core.cli", "--model",
                           str(tmp_path / "model.py"), "--input-shape", "8,16"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "cluster 0: verified" in done.stdout  # the kernel ran, on -inf too
    assert "RuntimeWarning" not in done.stderr, done.stderr
