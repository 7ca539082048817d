"""Bad and unusual inputs to `fusion-advisor`, as a user would make them.

Every refusal is exit code 2 and one line on stderr (no traceback), and leaves every file
in the user's folder as it was: same bytes, same mode, nothing added. The unusual but
valid inputs (CRLF, tabs, form feeds, a symlinked model, an existing `.bak`, dead code)
work. Models are tiny and most cases fail before any kernel runs.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from fusion_core import cli_apply as sm_steps
from fusion_core import cli_run
from fusion_core.cli import cli
from fusion_core.codegen.kernel import GENERATED_MARK

TINY = """\
import torch.nn as nn


class Tiny(nn.Module):
    def forward(self, x):
        y = x * 2.0
        y = y.relu()
        return y + 1.0
"""

DATA_DEPENDENT = """\
import torch.nn as nn


class M(nn.Module):
    def forward(self, x):
        if (x * 2.0).sum() > 0:
            return x
        return -x
"""

DEAD_CODE = """\
import torch.nn as nn


class M(nn.Module):
    def forward(self, x):
        unused = (x * 2.0).relu() + 1.0
        return x.tanh()
"""

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every entry under `folder`: content (a link's target for a symlink) and mode."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        st = p.lstat()
        if p.is_symlink():
            data = os.readlink(p).encode()
        elif p.is_file():
            data = p.read_bytes()
        else:
            data = b"<dir>"
        out[str(p.relative_to(folder))] = (data, stat.S_IMODE(st.st_mode))
    return out


def assert_refused(result, before: dict, folder: Path, *needles: str) -> str:
    """Exit 2, one stderr line naming the problem, no traceback, no file touched."""
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert snapshot(folder) == before
    return lines[0]


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # `{d}` is the user's folder
    needles: tuple[str, ...]
    files: dict[str, str | bytes] = field(default_factory=lambda: {"model.py": TINY})
    skip_as_root: bool = False


M = ("--model", "{d}/model.py")
SHAPE = ("--input-shape", "4,8")

CASES = [
    Case("missing file", ("--model", "{d}/absent.py", *SHAPE), ("model file not found",)),
    Case("model is a folder", ("--model", "{d}", *SHAPE), ("model file not found",)),
    Case("not a .py file", ("--model", "{d}/notes.txt", *SHAPE), ("not a Python file",),
         files={"notes.txt": "hello\n"}),
    Case("syntax error", (*M, *SHAPE), ("model.py:1", "syntax error"),
         files={"model.py": "def f(:\n"}),
    Case("null byte", (*M, *SHAPE), ("syntax error", "null bytes"),
         files={"model.py": b"import torch\x00\n"}),
    Case("not utf-8", (*M, *SHAPE), ("syntax error", "utf-8"),
         files={"model.py": b"x = '\xff'\n"}),
    Case("missing import", (*M, *SHAPE), ("model.py:1", "No module named", "install"),
         files={"model.py": "import fusion_advisor_no_such_pkg\n"}),
    Case("no module class", (*M, *SHAPE), ("no nn.Module subclass",),
         files={"model.py": "def forward(x):\n    return x\n"}),
    Case("several roots", (*M, *SHAPE), ("several nn.Module classes (A, B)", "--model-class"),
         files={"model.py": "import torch.nn as nn\n\nclass A(nn.Module):\n    pass\n\n"
                            "class B(nn.Module):\n    pass\n"}),
    Case("unknown class", (*M, "--model-class", "Nope", *SHAPE), ("no nn.Module class 'Nope'",)),
    Case("sys.exit(3) at import", (*M, *SHAPE),
         ("model file", "model.py:2 exited with status 3 while importing it", "__main__"),
         files={"model.py": "import sys\nsys.exit(3)\n" + TINY}),
    Case("sys.exit(0) at import", (*M, *SHAPE), ("exited with status 0 while importing it",),
         files={"model.py": "import sys\nsys.exit(0)\n" + TINY}),
    Case("sys.exit() at import", (*M, *SHAPE), ("exited with status 0 while importing it",),
         files={"model.py": "import sys\nsys.exit()\n" + TINY}),
    Case("sys.exit(4) in the constructor", (*M, *SHAPE),
         ("M() (model.py:7) called sys.exit() (status 4)", "constructor"),
         files={"model.py": "import sys\n\nimport torch.nn as nn\n\nclass M(nn.Module):\n"
                            "    def __init__(self):\n        sys.exit(4)\n"}),
    Case("sys.exit(5) in forward", (*M, *SHAPE),
         ("model.py:7 called sys.exit() (status 5)", "forward"),
         files={"model.py": "import sys\n\nimport torch.nn as nn\n\nclass M(nn.Module):\n"
                            "    def forward(self, x):\n        sys.exit(5)\n"}),
    Case("sys.exit(6) in a helper module forward calls", (*M, *SHAPE),
         ("helper.py:5 called sys.exit() (status 6)", "forward"),
         files={"model.py": "import torch.nn as nn\n\nfrom helper import stop\n\n"
                            "class M(nn.Module):\n    def forward(self, x):\n"
                            "        return stop(x)\n",
                "helper.py": "import sys\n\n\ndef stop(x):\n    sys.exit(6)\n"}),
    Case("constructor needs args", (*M, *SHAPE), ("needs arguments (width)", "defaults"),
         files={"model.py": "import torch.nn as nn\n\nclass M(nn.Module):\n"
                            "    def __init__(self, width):\n        super().__init__()\n"}),
    Case("capture error", (*M, *SHAPE), ("cannot capture M", "model.py:6", "torch.where"),
         files={"model.py": DATA_DEPENDENT}),
    Case("no input shape", M, ("missing --input-shape",)),
    Case("malformed shape", (*M, "--input-shape", "4x8"), ("malformed --input-shape",)),
    Case("empty dim", (*M, "--input-shape", "4,,8"), ("malformed --input-shape",)),
    Case("negative dim", (*M, "--input-shape", "-4,8"), ("malformed --input-shape",)),
    Case("zero dim", (*M, "--input-shape", "0,8"), ("zero dimension",)),
    Case("dim beyond int64", (*M, "--input-shape", "99999999999999999999,64"),
         ("more than torch can address", "smaller shape")),
    Case("bytes beyond int64", (*M, "--input-shape", "4611686018427387904,4"),
         ("more than torch can address",)),
    Case("65 dims", (*M, "--input-shape", ",".join(["1"] * 65)),
         ("65 dimensions", "at most 64")),
    Case("shape the model rejects", (*M, "--input-shape", "4,8", "--input-shape", "4,8"),
         ("takes 1 input(s) (x) but 2 --input-shape given",)),
    Case("unknown dtype", (*M, *SHAPE, "--dtype", "float64"), ("unknown --dtype 'float64'",)),
    Case("dtype count", (*M, *SHAPE, "--dtype", "float16", "--dtype", "int64"),
         ("2 --dtype for 1 --input-shape",)),
    Case("unknown option", (*M, *SHAPE, "--fast"), ("No such option '--fast'", "--help")),
    Case("no --model", SHAPE, ("Missing option '--model'",)),
    Case("bad --capture", (*M, *SHAPE, "--capture", "jit"), ("--capture",)),
    Case("--json in a missing folder", (*M, *SHAPE, "--json", "{d}/no/such/a.json"),
         ("cannot write --json",)),
    Case("--json is a folder", (*M, *SHAPE, "--json", "{d}"), ("cannot write --json",)),
    Case("--out-dir is a file", (*M, *SHAPE, "--out-dir", "{d}/model.py"),
         ("cannot write --out-dir", "is a file")),
    Case("--out-dir under a file", (*M, *SHAPE, "--out-dir", "{d}/model.py/gen"),
         ("cannot create --out-dir", "is a file, not a folder")),
    Case("--out-dir read-only", (*M, *SHAPE, "--out-dir", "{d}/ro/gen"),
         ("cannot write --out-dir", "not writable"), skip_as_root=True,
         files={"model.py": TINY, "ro/keep.txt": "mine\n"}),
    Case("--out-dir holds the user's cluster0.py", (*M, *SHAPE, "--out-dir", "{d}/gen"),
         ("gen already holds cluster0.py", "did not write", "--force"),
         files={"model.py": TINY, "gen/cluster0.py": "# my own kernel\n"}),
    Case("--out-dir holds a folder named cluster0.py", (*M, *SHAPE, "--out-dir", "{d}/gen"),
         ("already holds cluster0.py", "--force"),
         files={"model.py": TINY, "gen/cluster0.py/x": "mine\n"}),
    Case("--force without --out-dir", (*M, *SHAPE, "--force"), ("pass --out-dir too",)),
    Case("--apply without a terminal", (*M, *SHAPE, "--apply"),
         ("stdin is not a terminal", "--yes")),
    Case("--yes without --apply", (*M, *SHAPE, "--yes"), ("pass --apply too",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_refused_with_one_line(tmp_path, case: Case):
    if case.skip_as_root and ROOT:
        pytest.skip("root writes to read-only folders")
    for name, body in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
    if case.skip_as_root:
        (tmp_path / "ro").chmod(0o555)
    before = snapshot(tmp_path)
    try:
        result = CliRunner().invoke(cli, [a.format(d=tmp_path) for a in case.args])
    finally:
        if case.skip_as_root:
            (tmp_path / "ro").chmod(0o755)
    if case.skip_as_root:
        before = {k: v if k != "ro" else (v[0], 0o755) for k, v in before.items()}
    assert_refused(result, before, tmp_path, *case.needles)


def test_debug_shows_the_chain_of_a_capture_error(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(DATA_DEPENDENT)
    result = CliRunner().invoke(cli, ["--model", str(model), *SHAPE, "--debug"])
    assert result.exception is not None and result.exception.__cause__ is not None


def test_debug_shows_a_model_exit(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("import sys\nsys.exit(3)\n")
    result = CliRunner().invoke(cli, ["--model", str(model), *SHAPE, "--debug"])
    assert isinstance(result.exception.__cause__, SystemExit)


def test_version():
    from importlib.metadata import PackageNotFoundError, version

    import fusion_core

    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"fusion-advisor {fusion_core.__version__}\n"
    try:  # installed: the package metadata says the same (pyproject reads __version__)
        assert version("fusion-advisor") == fusion_core.__version__
    except PackageNotFoundError:  # a source checkout on PYTHONPATH
        pass


def test_a_write_failing_after_the_checks_is_one_line(tmp_path, monkeypatch):
    """A full disk is found only when writing: one line naming the file, nothing left."""
    import errno

    from fusion_core import fileio

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "model.py").write_text(TINY)
    before = snapshot(tmp_path)
    monkeypatch.setattr(fileio.os, "fsync", full_disk)
    result = CliRunner().invoke(cli, ["--model", str(tmp_path / "model.py"), *SHAPE,
                                      "--json", str(tmp_path / "out.json")])
    assert_refused(result, before, tmp_path, "out.json: No space left on device")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_out_dir_in_proc_is_one_line(tmp_path):
    """Writable to root by permission bits, yet nothing can be created there."""
    (tmp_path / "model.py").write_text(TINY)
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["--model", str(tmp_path / "model.py"), *SHAPE,
                                      "--out-dir", "/proc/fusion-advisor-gen"])
    assert_refused(result, before, tmp_path, "/proc/fusion-advisor-gen")


# -- --out-dir: our own files are replaced, the user's only with --force -------------------

def test_out_dir_replaces_a_file_it_generated(tmp_path):
    (tmp_path / "model.py").write_text(TINY)
    gen = tmp_path / "gen"
    args = ["--model", str(tmp_path / "model.py"), *SHAPE, "--out-dir", str(gen)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    first = (gen / "cluster0.py").read_text()
    assert first.startswith(GENERATED_MARK)
    (gen / "cluster0.py").write_text(first + "# an old run's kernel\n")
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert (gen / "cluster0.py").read_text() == first


def test_force_overwrites_the_users_file(tmp_path):
    (tmp_path / "model.py").write_text(TINY)
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "cluster0.py").write_text("# my own kernel\n")
    result = CliRunner().invoke(cli, ["--model", str(tmp_path / "model.py"), *SHAPE,
                                      "--out-dir", str(tmp_path / "gen"), "--force"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "gen" / "cluster0.py").read_text().startswith(GENERATED_MARK)


def test_unwritable_out_dir_is_refused_before_the_analysis(tmp_path):
    """The check runs first: a model that would fail to capture is not even imported."""
    (tmp_path / "model.py").write_text("raise RuntimeError('imported')\n")
    (tmp_path / "file").write_text("")
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["--model", str(tmp_path / "model.py"), *SHAPE,
                                      "--out-dir", str(tmp_path / "file" / "gen")])
    assert_refused(result, before, tmp_path, "cannot create --out-dir")


# -- dead code -----------------------------------------------------------------------------

def test_dead_code_forms_no_cluster_and_is_named_once(tmp_path):
    (tmp_path / "model.py").write_text(DEAD_CODE)
    result = CliRunner().invoke(cli, ["--model", str(tmp_path / "model.py"), *SHAPE,
                                      "--explain-rejections"])
    assert result.exit_code == 0, result.output
    assert "M (6 nodes, 0 fusable cluster(s)" in result.output
    assert result.output.count("dead code: result unused") == 1
    assert "mul → relu → add at " in result.output and "model.py:6" in result.output
    assert "--explain-rejections says" not in result.output


def test_without_explain_rejections_the_report_says_a_reason_exists(tmp_path):
    (tmp_path / "model.py").write_text(DEAD_CODE)
    result = CliRunner().invoke(cli, ["--model", str(tmp_path / "model.py"), *SHAPE])
    assert result.exit_code == 0, result.output
    assert ("1 candidate group(s) failed a legality check: --explain-rejections says which "
            "and why.") in result.output
    assert "dead code: result unused" not in result.output


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
    assert "Applied 1 edit(s)" in result.output
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
