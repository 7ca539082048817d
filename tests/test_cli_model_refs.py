"""How `fusion-advisor --model` names a model (issue 29): `FILE.py:NAME` (a class or a
factory), `package.module:NAME`, a file inside a package (its relative imports resolve),
and `--model-kwargs` (JSON) for a constructor's arguments. Each bad form is one line, exit
status 2, and leaves every file of the user's as it was."""

from __future__ import annotations

import sys

import pytest
from cli_inputs import NEEDS_ARGS as NEEDS_ARGS_CLASS
from cli_inputs import SHAPE, assert_refused, snapshot
from click.testing import CliRunner

from fusion_core.cli import cli

NEEDS_ARGS = NEEDS_ARGS_CLASS + """


def make():
    return NeedsArgs(8)


def not_a_model():
    return 3
"""

# mypkg_<tag>/models/net.py imports a helper two levels up, relatively
LAYERS = "def act(x):\n    return (x * 2.0).relu()\n"
PACKAGED = """\
import torch.nn as nn

from ..layers import act


class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return act(x) + 1.0
"""


def _write(folder, files: dict[str, str]) -> None:
    for name, body in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package in the current folder, named after the test's folder (a name imported
    from another test's folder would be refused as another package of that name)."""
    name = f"pkg_{tmp_path.name}"
    _write(
        tmp_path,
        {
            f"{name}/__init__.py": "",
            f"{name}/layers.py": LAYERS,
            f"{name}/models/__init__.py": "",
            f"{name}/models/net.py": PACKAGED,
        },
    )
    monkeypatch.chdir(tmp_path)
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def _invoke(*args: str):
    return CliRunner().invoke(cli, [*args, *SHAPE, "--no-timing"])


def _analysed(result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    assert "mul → relu → add" in result.stdout
    return result.stdout


# ---------------------------------------------------------------- accepted forms


def test_model_kwargs_build_a_class_that_needs_arguments(tmp_path):
    _write(tmp_path, {"needs.py": NEEDS_ARGS})
    out = _analysed(
        _invoke("--model", str(tmp_path / "needs.py"), "--model-kwargs", '{"dim": 8, "scale": 3.0}')
    )
    assert out.startswith("NeedsArgs (")


def test_a_factory_named_after_the_file(tmp_path):
    _write(tmp_path, {"needs.py": NEEDS_ARGS})
    out = _analysed(_invoke("--model", f"{tmp_path / 'needs.py'}:make"))
    assert out.startswith("NeedsArgs (")


def test_a_file_inside_a_package_imports_relatively(package, tmp_path):
    _analysed(_invoke("--model", f"{package}/models/net.py", "--model-kwargs", '{"dim": 8}'))


def test_a_module_path_and_class(package):
    _analysed(_invoke("--model", f"{package}.models.net:Net", "--model-kwargs", '{"dim": 8}'))


# ---------------------------------------------------------------- refused forms

REFUSED = [
    (
        "no arguments",
        ("--model", "{d}/needs.py"),
        (
            "NeedsArgs() needs arguments (dim)",
            """--model-kwargs '{"dim": ...}'""",
            "--model FILE.py:FUNCTION",
            "give them defaults",
        ),
    ),
    (
        "unknown argument",
        ("--model", "{d}/needs.py", "--model-kwargs", '{"dim": 8, "depth": 2}'),
        (
            "NeedsArgs() takes no argument 'depth' (its arguments: dim, scale)",
            "check the names given in --model-kwargs",
        ),
    ),
    (
        "not JSON",
        ("--model", "{d}/needs.py", "--model-kwargs", "dim=8"),
        ("--model-kwargs is not valid JSON", "write a JSON object", """'{"dim": 64"""),
    ),
    (
        "a JSON array",
        ("--model", "{d}/needs.py", "--model-kwargs", "[8]"),
        ("--model-kwargs must be a JSON object of keyword arguments, got an array",),
    ),
    (
        "a factory returning no model",
        ("--model", "{d}/needs.py:not_a_model"),
        ("not_a_model() returned int, not an nn.Module",),
    ),
    (
        "unknown name",
        ("--model", "{d}/needs.py:Nope"),
        ("no nn.Module class 'Nope' in", "nor a function", "classes found: NeedsArgs"),
    ),
    (
        "two names",
        ("--model", "{d}/needs.py:make", "--model-class", "NeedsArgs"),
        ("the model is named twice", "give the name once"),
    ),
    (
        "a module that is not there",
        ("--model", "no_such_pkg_xyz.net:Net"),
        (
            "cannot import no_such_pkg_xyz.net",
            "No module named 'no_such_pkg_xyz'",
            "importable from the current folder",
        ),
    ),
    (
        "a package whose __init__ raises",
        ("--model", "{d}/broken/net.py"),
        ("is in package broken", "ValueError: no config", "fix its __init__.py"),
    ),
]


@pytest.mark.parametrize("args, needles", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_with_one_line(tmp_path, monkeypatch, args, needles):
    _write(
        tmp_path,
        {
            "needs.py": NEEDS_ARGS,
            "broken/__init__.py": "raise ValueError('no config')\n",
            "broken/net.py": NEEDS_ARGS,
        },
    )
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    try:
        result = _invoke(*(a.replace("{d}", str(tmp_path)) for a in args))
    finally:
        sys.modules.pop("broken", None)
    assert_refused(result, before, tmp_path, *needles)


# ---------------------------------------------------------------- --apply


@pytest.mark.parametrize(
    "ref, kwargs",
    [("needs.py:make", ()), ("needs.py", ("--model-kwargs", '{"dim": 8}'))],
    ids=["factory", "model kwargs"],
)
def test_apply_rebuilds_the_model_as_it_was_built(package, tmp_path, ref, kwargs):
    """The rewritten file's model is built by the same factory or with the same arguments,
    and, inside a package, imports its fused kernels relatively."""
    path = tmp_path / package / "models" / "needs.py"
    path.write_text(NEEDS_ARGS)
    result = CliRunner().invoke(
        cli, ["--model", f"{package}/models/{ref}", *kwargs, *SHAPE, "--apply", "--yes"]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    assert "Applied 1 edit" in result.output
    assert "from .needs_fused import cluster0" in path.read_text()
    assert (path.parent / "needs.py.bak").read_text() == NEEDS_ARGS


def test_a_second_package_of_the_same_name_is_refused(tmp_path, monkeypatch):
    """Relative imports would resolve into the package already imported: refused."""
    name = f"pkg_{tmp_path.name}"
    for side in ("a", "b"):
        _write(
            tmp_path / side,
            {
                f"{name}/__init__.py": "",
                f"{name}/layers.py": LAYERS,
                f"{name}/models/__init__.py": "",
                f"{name}/models/net.py": PACKAGED,
            },
        )
    try:
        _analysed(
            _invoke("--model", f"{tmp_path}/a/{name}/models/net.py", "--model-kwargs", '{"dim": 8}')
        )
        before = snapshot(tmp_path)
        result = _invoke(
            "--model", f"{tmp_path}/b/{name}/models/net.py", "--model-kwargs", '{"dim": 8}'
        )
    finally:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]
    assert_refused(
        result,
        before,
        tmp_path,
        f"is in package {name} ({tmp_path}/b/{name})",
        f"another package of that name is already imported (from {tmp_path}/a/{name})",
        "rename one of them",
    )
