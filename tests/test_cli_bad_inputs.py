"""Bad inputs to `fusion-advisor`, as a user would make them.

Every refusal is exit code 2 and one line on stderr (no traceback), and leaves every file
in the user's folder as it was: same bytes, same mode, nothing added. Dead code is named,
not refused. Models are tiny and most cases fail before any kernel runs. `--apply`, a missing
Triton and the output's width: test_cli_unusual_inputs.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_inputs import DATA_DEPENDENT, DEAD_CODE, ROOT, SHAPE, TINY, assert_refused, snapshot
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.codegen.kernel import GENERATED_MARK


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # `{d}` is the user's folder
    needles: tuple[str, ...]
    files: dict[str, str | bytes] = field(default_factory=lambda: {"model.py": TINY})
    skip_as_root: bool = False


M = ("--model", "{d}/model.py")
KEYWORD_ONLY = ("import torch.nn as nn\n\n\nclass M(nn.Module):\n"
                "    def forward(self, x, *, mask):\n"
                "        return (x * 2.0).relu().masked_fill(mask, 0.0)\n")

# int8 weights dequantized to float32: the float16 input meets them at `@`.
MIXED_PRODUCT = ("import torch\nimport torch.nn as nn\n\n\nclass M(nn.Module):\n"
                 "    def __init__(self):\n        super().__init__()\n"
                 "        self.register_buffer('w', torch.ones(8, 8, dtype=torch.int8))\n\n"
                 "    def forward(self, x):\n        return (x @ self.w.float()).relu()\n")

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
    Case("malformed shape", (*M, "--input-shape", "4x8"), ("malformed input shape",)),
    Case("empty dim", (*M, "--input-shape", "4,,8"), ("malformed input shape",)),
    Case("negative dim", (*M, "--input-shape", "-4,8"), ("malformed input shape",)),
    Case("zero dim", (*M, "--input-shape", "0,8"), ("zero dimension",)),
    # a memory order after the shape's colon (test_shape_memory_order.py)
    Case("unknown memory order", (*M, "--input-shape", "2,3,4,5:channel_last"),
         ("unknown memory order 'channel_last' after ':' in input shape "
          "'2,3,4,5:channel_last'", "channels_last, channels_last_3d")),
    Case("channels_last on 2 dims", (*M, "--input-shape", "4,8:channels_last"),
         ("channels_last is a memory order of 4-d shapes and input shape '4,8:channels_last' "
          "has 2 dims: drop ':channels_last'",)),
    Case("channels_last on 5 dims", (*M, "--input-shape", "2,3,4,5,6:channels_last"),
         ("input shape '2,3,4,5,6:channels_last' has 5 dims: write :channels_last_3d for a "
          "5-d shape",)),
    Case("channels_last_3d on 4 dims", (*M, "--input-shape", "2,3,4,5:channels_last_3d"),
         ("channels_last_3d is a memory order of 5-d shapes", "write :channels_last for a "
          "4-d shape")),
    Case("empty memory order", (*M, "--input-shape", "4,8:"),
         ("no memory order after ':' in input shape '4,8:'",)),
    Case("order no permutation", (*M, "--input-shape", "4,8:0,0"),
         ("memory order '0,0' in input shape '4,8:0,0' is no permutation of its 2 dims",
          "give each of 0, 1 once")),
    Case("dim beyond int64", (*M, "--input-shape", "99999999999999999999,64"),
         ("more than torch can address", "smaller shape")),
    Case("bytes beyond int64", (*M, "--input-shape", "4611686018427387904,4"),
         ("more than torch can address",)),
    Case("65 dims", (*M, "--input-shape", ",".join(["1"] * 65)),
         ("65 dimensions", "at most 64")),
    Case("shape the model rejects", (*M, "--input-shape", "4,8", "--input-shape", "4,8"),
         ("takes 1 input (x) but 2 were given", "repeat --input-shape")),
    # FX gave `mask` a positional placeholder: the analysis ran, then the model check
    # called the model by position and --apply failed; export said "repeat --input-shape".
    *(Case(f"keyword-only input ({how})", (*M, *SHAPE, *SHAPE, "--dtype", "float32",
                                          "--dtype", "bool", "--capture", how),
           ("M.forward (", "model.py:5) takes `mask` as keyword-only", "drop the `*`"),
           files={"model.py": KEYWORD_ONLY}) for how in ("fx", "export", "auto")),
    # Fake kernels let float16 @ float32 through: the report printed, every kernel FAILED.
    *(Case(f"float16 input against float32 weights ({how})",
           (*M, "--input-shape", "4,8", "--dtype", "float16", "--capture", how),
           ("the example input does not fit the model", "model.py:11",
            "a matrix product's operands must share one dtype, got float16 and float32"),
           files={"model.py": MIXED_PRODUCT}) for how in ("fx", "export")),
    Case("unknown dtype", (*M, *SHAPE, "--dtype", "float64"), ("unknown dtype 'float64'",)),
    Case("dtype count", (*M, *SHAPE, "--dtype", "float16", "--dtype", "int64"),
         ("2 --dtype for 1 --input-shape",)),
    Case("unknown option", (*M, *SHAPE, "--fast"), ("No such option '--fast'", "--help")),
    Case("no --model", SHAPE, ("Missing option '--model'",)),
    Case("bad --capture", (*M, *SHAPE, "--capture", "jit"), ("--capture",)),
    Case("--json in a missing folder", (*M, *SHAPE, "--json", "{d}/no/such/a.json"),
         ("cannot write --json",)),
    Case("--json is a folder", (*M, *SHAPE, "--json", "{d}"),
         ("cannot write --json", "it is a folder", "analysis.json")),
    Case("--json is the model file", (*M, *SHAPE, "--json", "{d}/model.py"),
         ("cannot write --json", "it is Python source", "--json {d}/model.json")),
    Case("--html is the model file", (*M, *SHAPE, "--html", "{d}/model.py"),
         ("cannot write --html", "it is Python source", "--html {d}/model.html")),
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
    Case("--peak-gbps with --no-timing", (*M, *SHAPE, "--no-timing", "--peak-gbps", "3000"),
         ("--no-timing skips", "drop one of them")),
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
    assert_refused(result, before, tmp_path, *(n.format(d=tmp_path) for n in case.needles))


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
    assert "M (6 nodes, 0 fusable clusters" in result.output
    assert result.output.count("dead code: result unused") == 1
    assert "mul → relu → add at " in result.output and "model.py:6" in result.output
    assert "--explain-rejections says" not in result.output


def test_without_explain_rejections_the_report_says_a_reason_exists(tmp_path):
    (tmp_path / "model.py").write_text(DEAD_CODE)
    result = CliRunner().invoke(cli, ["--model", str(tmp_path / "model.py"), *SHAPE])
    assert result.exit_code == 0, result.output
    assert ("1 candidate group failed a legality check: --explain-rejections says which "
            "and why.") in result.output
    assert "dead code: result unused" not in result.output
