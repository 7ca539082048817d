"""`--apply` across the model's own files: a cluster that lies in a file the model file
imports (`layers.py` beside it, or a module of the same package) is rewritten there, with
that file's own backup and `<stem>_fused/` package; a file outside the model's project
folder is left alone with a reason; a failed check restores every file. Kernels run under
the Triton interpreter on CPU.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch
from apply_checks import DEVICE
from click.testing import CliRunner
from rich.console import Console

from fusion_core.cli import cli
from fusion_core.codegen import generate
from fusion_core.ir.shapes import InputSpec
from fusion_core.load import import_model_file, instantiate, pick_class
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import apply as apply_module
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.apply import ApplyError, apply, forget_package
from fusion_core.sourcemap.apply_plan import plan_apply, project_root
from fusion_core.sourcemap.fused import package_name

LAYERS = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return torch.relu(x * self.scale) + 1.0
"""

MODEL = """\
import torch
from torch import nn

from {module} import Block


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.block = Block()
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        x = self.block(self.proj(x))
        x = self.out(x)
        return torch.tanh(x) * 2.0
"""

LAYERS_EDIT = "        return cluster0(x, self.scale)\n"


def _forget(*names: str) -> None:
    for name in names:
        sys.modules.pop(name, None)
        forget_package(package_name(name.rpartition(".")[2]))


@pytest.fixture
def flat(tmp_path):
    """model.py and layers.py side by side, no package; `layers` forgotten after."""
    (tmp_path / "layers.py").write_text(LAYERS)
    (tmp_path / "model.py").write_text(MODEL.format(module="layers"))
    _forget("layers")
    yield tmp_path
    _forget("layers")


def _run(path, *extra):
    return CliRunner().invoke(cli, ["--model", f"{path}:Net", "--input-shape", "4,8",
                                    "--no-timing", *extra])


def _net(path, original_weights=None):
    _forget("layers")
    net = instantiate(pick_class(import_model_file(path), path, "Net"), path)
    if original_weights is not None:
        net.load_state_dict(original_weights)
    return net.eval()


def test_a_cluster_in_a_file_the_model_imports_is_applied_there(flat):
    model, layers = flat / "model.py", flat / "layers.py"
    before = _net(model)
    with torch.no_grad():
        before.block.scale.uniform_(0.5, 1.5)
    weights = before.state_dict()
    result = _run(model, "--apply", "--yes")
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert f"Applied 2 edits to {model} and {layers}; kernels in {flat / 'model_fused'}/ and " \
           f"{flat / 'layers_fused'}/; originals saved as {model}.bak and {layers}.bak" in said
    assert LAYERS_EDIT in layers.read_text()
    assert "from layers_fused import cluster0" in layers.read_text()
    assert "from model_fused import cluster1" in model.read_text()
    assert (flat / "layers_fused" / "__init__.py").is_file()
    assert (flat / "layers.py.bak").read_text() == LAYERS
    assert (flat / "model.py.bak").read_text() == MODEL.format(module="layers")
    after = _net(model, weights).to(DEVICE)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(after(x.to(DEVICE)).cpu(), before(x), atol=1e-5, rtol=1e-4)


def test_the_preview_shows_each_files_imports(flat):
    result = _run(flat / "model.py", "--json", str(flat / "r.json"))
    assert result.exit_code == 0, result.output
    assert f"{flat / 'layers.py'}:3  imports --apply adds" in result.output
    doc = json.loads((flat / "r.json").read_text())["apply"]
    assert doc["file"] == str((flat / "model.py").resolve())
    assert [f["file"] for f in doc["other_files"]] == [str((flat / "layers.py").resolve())]
    assert "    from layers_fused import cluster0" in doc["other_files"][0]["imports"]
    assert (flat / "layers.py").read_text() == LAYERS  # a preview writes nothing


def test_a_module_of_the_same_package_is_applied_with_a_relative_import(tmp_path):
    package = tmp_path / "proj"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nn").mkdir()
    (package / "nn" / "__init__.py").write_text("")
    (package / "nn" / "layers.py").write_text(LAYERS)
    (package / "model.py").write_text(MODEL.format(module=".nn.layers"))
    assert project_root(package / "model.py") == package.resolve()
    try:
        result = _run(package / "model.py", "--apply", "--yes")
        assert result.exit_code == 0, result.output
        assert "Applied 2 edits" in result.output
        text = (package / "nn" / "layers.py").read_text()
        assert LAYERS_EDIT in text and "    from .layers_fused import cluster0" in text
        assert (package / "nn" / "layers_fused" / "__init__.py").is_file()
    finally:
        for name in [n for n in sys.modules if n == "proj" or n.startswith("proj.")]:
            del sys.modules[name]


def test_a_file_outside_the_models_folder_is_left_with_a_reason(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "layers_elsewhere.py").write_text(LAYERS)
    app = tmp_path / "app"
    app.mkdir()
    model = app / "model.py"
    model.write_text(f"import sys\nsys.path.insert(0, {str(shared)!r})\n"
                     + MODEL.format(module="layers_elsewhere"))
    try:
        result = _run(model, "--apply", "--yes")
    finally:
        _forget("layers_elsewhere")
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert (f"cluster 0: not applied, lies in {(shared / 'layers_elsewhere.py').resolve()}, "
            f"outside the model's project folder {app.resolve()}") in said
    assert (shared / "layers_elsewhere.py").read_text() == LAYERS
    assert sorted(p.name for p in shared.iterdir() if p.name != "__pycache__") == [
        "layers_elsewhere.py"]
    assert "cluster1" in model.read_text()  # the model file's own edit is still written


def _plan(model, kernel_edit=None):
    analysis = analyze_file(model, [InputSpec((4, 8))], class_name="Net")
    kernels = {c.index: generate(analysis, c) for c in analysis.clusters}
    if kernel_edit is not None:
        kernels = {i: dataclasses.replace(k, source=kernel_edit(i, k)) for i, k in kernels.items()}
    return analysis, plan_apply(analysis, map_clusters(analysis), model, kernels,
                                {c.index: (True, "verified") for c in analysis.clusters})


def test_the_check_runs_the_rewritten_helper_file_not_the_one_imported_before(flat):
    """A wrong kernel in layers.py only: the check must import layers.py again (the model
    file's `from layers import Block` would reuse the module cached by the analysis)."""
    analysis, plan = _plan(flat / "model.py", _wrong_in_layers)
    with pytest.raises(ApplyError, match="failed its check.*restored the originals"):
        apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert (flat / "layers.py").read_text() == LAYERS
    assert sorted(p.name for p in flat.iterdir() if p.name != "__pycache__") == [
        "layers.py", "model.py"]


def test_the_check_fails_a_rewritten_model_whose_output_dtype_changed(flat, monkeypatch):
    """Equal numbers in another dtype: a caller would meet float64 where the model gave
    float32 (an `out += y.double()` the trace read as `out + y` made such a kernel). The
    rewritten model's outputs (the second read) are widened here."""
    real, seen = apply_module._tensors, []

    def widened(out):
        seen.append(out)
        tensors = real(out)
        return [t.double() for t in tensors] if len(seen) == 2 else tensors

    monkeypatch.setattr(apply_module, "_tensors", widened)
    analysis, plan = _plan(flat / "model.py")
    with pytest.raises(ApplyError, match="output 0 is float64, the original's float32"):
        apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert (flat / "layers.py").read_text() == LAYERS


def test_a_failed_check_restores_every_file(flat, monkeypatch):
    model, layers = flat / "model.py", flat / "layers.py"
    analysis, plan = _plan(model)
    assert [f.path.name for f in plan.files] == ["model.py", "layers.py"]

    def wrong(*args, **kwargs):
        raise ApplyError("its output differs from the original's: made up for the test")

    monkeypatch.setattr(apply_module, "verify", wrong)
    with pytest.raises(ApplyError, match=r"rewritten model \(.*model.py and .*layers.py\) "
                                         r"failed its check.*restored the originals"):
        apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert layers.read_text() == LAYERS and model.read_text() == MODEL.format(module="layers")
    assert sorted(p.name for p in flat.iterdir() if p.name != "__pycache__") == [
        "layers.py", "model.py"]


def test_a_write_failing_in_the_second_file_leaves_the_first_as_it_was(flat, monkeypatch):
    model, layers = flat / "model.py", flat / "layers.py"
    analysis, plan = _plan(model)
    real = apply_module.write_atomic

    def refuse_layers(path, text, **kwargs):
        if path == layers:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, text, **kwargs)

    monkeypatch.setattr(apply_module, "write_atomic", refuse_layers)
    with pytest.raises(ApplyError, match="cannot write next to .*layers.py"):
        apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert model.read_text() == MODEL.format(module="layers") and layers.read_text() == LAYERS
    assert sorted(p.name for p in flat.iterdir() if p.name != "__pycache__") == [
        "layers.py", "model.py"]


def _wrong_in_layers(index, k):
    # `_base`, not `_launch`: the generated file has a `_launch` of its own
    off_by_one = "\n\n_base = {name}\n\n\ndef {name}(*args):\n    return _base(*args) + 1.0\n"
    return k.source + off_by_one.format(name=k.name) if index == 0 else k.source


NET_OF = """\
import torch
from torch import nn

{imports}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.block = {block}
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        x = self.block(self.proj(x))
        x = self.out(x)
        return torch.tanh(x) * 2.0
"""


@pytest.mark.parametrize("how", ["package attribute", "re-exported"])
def test_the_check_runs_a_helper_reached_through_another_module(tmp_path, how):
    """The model reaches layers.py through its package (`from . import layers`) or through a
    module that re-exports its class (`from blocks import Block`): those keep the module the
    analysis imported, so they are imported again too, and a wrong kernel there is caught."""
    if how == "package attribute":
        folder = tmp_path / "proj"
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        model = folder / "model.py"
        model.write_text(NET_OF.format(imports="from . import layers", block="layers.Block()"))
        modules = ("proj", "proj.layers", "proj.model")
    else:
        folder = tmp_path
        (folder / "blocks.py").write_text("from layers import Block\n")
        model = folder / "model.py"
        model.write_text(NET_OF.format(imports="from blocks import Block", block="Block()"))
        modules = ("layers", "blocks")
    (folder / "layers.py").write_text(LAYERS)
    try:
        analysis, plan = _plan(model, _wrong_in_layers)
        assert [f.path.name for f in plan.files] == ["model.py", "layers.py"]
        with pytest.raises(ApplyError, match="failed its check.*restored the originals"):
            apply(plan, analysis, Console(), assume_yes=True, ask=None)
        assert (folder / "layers.py").read_text() == LAYERS
    finally:
        _forget(*modules)
