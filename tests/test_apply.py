"""`--apply` on temporary copies of the examples: rewrite, verify, refuse, roll back.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import dataclasses
import shutil
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from model_sources import RES_NORM
from rich.console import Console

from fusion_core import cli_apply as sm_steps
from fusion_core.cli import cli
from fusion_core.codegen import generate
from fusion_core.ir.shapes import InputSpec
from fusion_core.load import import_model_file, instantiate, pick_class
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import apply as apply_module
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.apply import ApplyError, apply, forget_package, rewrite
from fusion_core.sourcemap.apply_plan import plan_apply
from fusion_core.sourcemap.fused import package_name
from fusion_core.validate import run as validate_run

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ONE_CLUSTER = """\
import torch
import torch.nn as nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        x = self.proj(x)
        y = x * 2.0
        y = torch.relu(y)
        return self.proj(y)
"""



def copy_example(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copy(EXAMPLES / name, dst)
    return dst


def run_cli(path: Path, *args: str, input: str | None = None):
    return CliRunner().invoke(cli, ["--model", str(path), *args], input=input)


def load(path: Path, class_name: str) -> torch.nn.Module:
    # A fused package of the same name may linger in sys.modules from another test.
    forget_package(package_name(path.stem))
    return instantiate(pick_class(import_model_file(path), path, class_name), path)


def call_lines(path: Path) -> list[int]:
    return [i for i, line in enumerate(path.read_text().splitlines(), 1)
            if "= cluster" in line or "return cluster" in line]


# Kernels run on the GPU where there is one (Triton's interpreter takes CPU tensors otherwise).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def assert_same_outputs(original: Path, rewritten: Path, class_name: str, x: torch.Tensor):
    before = load(original, class_name).to(DEVICE)
    after = load(rewritten, class_name).to(DEVICE)
    after.load_state_dict(before.state_dict())
    x = x.to(DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(after(x), before(x), atol=1e-4, rtol=1e-3)


def test_apply_example_net_with_yes(tmp_path):
    path = copy_example(tmp_path, "example_net.py")
    original = path.read_bytes()
    result = run_cli(path, "--input-shape", "2,1024", "--apply", "--yes")
    assert result.exit_code == 0, result.output
    assert "Applied 3 edits" in result.output
    text = path.read_text()
    assert "x = cluster0(x)" in text and "return cluster2(x)" in text
    assert "x = F.relu(x)" not in text
    # The backup holds the original, byte for byte, and the output says where it is.
    backup = path.with_name("example_net.py.bak")
    assert backup.read_bytes() == original and "example_net.py.bak" in result.output
    assert (tmp_path / "example_net_fused" / "__init__.py").is_file()
    # The rewritten file imports, runs, and matches the original on a fresh input.
    assert_same_outputs(backup_as_py(backup), path, "ExampleNet", torch.randn(3, 1024))
    # Re-analysis finds no cluster left where the edits went.
    applied = set(call_lines(path))
    assert len(applied) == 3
    again = analyze_file(path, [InputSpec((2, 1024))])
    assert not [c for c in again.clusters if c.lines and set(
        range(c.lines.start, c.lines.end + 1)) & applied]
    assert again.clusters == ()


def backup_as_py(backup: Path) -> Path:
    """The backup under a .py name of its own (importable, and not the rewritten module)."""
    dst = backup.with_name("original_" + backup.name.removesuffix(".bak"))
    dst.write_bytes(backup.read_bytes())
    return dst


def test_apply_microgpt_with_yes(tmp_path):
    path = copy_example(tmp_path, "microgpt.py")
    result = run_cli(path, "--input-shape", "1,8", "--dtype", "int64", "--apply", "--yes")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output
    text = path.read_text()
    assert ("        if not self.attn_drop.training:\n"
            "            probs = cluster1(scores, self.causal_mask[:T, :T])\n"
            "        else:\n"
            "            scores = scores * self.scale\n"
            "            scores = scores.masked_fill(self.causal_mask[:T, :T], float(\"-inf\"))\n"
            "            probs = F.softmax(scores, dim=-1)\n"
            "            probs = self.attn_drop(probs)\n"
            "        out = probs @ v\n") in text, text
    assert text.count("scores = scores.masked_fill") == 1  # only under `else:`
    (line,) = call_lines(path)
    assert "(scores, self.causal_mask[:T, :T])" in text.splitlines()[line - 1]
    backup = path.with_name("microgpt.py.bak")
    tokens = torch.randint(0, 256, (2, 8))
    assert_same_outputs(backup_as_py(backup), path, "MicroGPT", tokens)
    again = analyze_file(path, [InputSpec((1, 8), torch.int64)])
    assert again.clusters, "the pointer clusters elsewhere remain"
    assert not [c for c in again.clusters if c.lines and c.lines.start <= line <= c.lines.end]
    assert not any("softmax" in c.ops for c in again.clusters)


def test_no_terminal_without_yes_refuses(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    result = run_cli(path, "--input-shape", "4,8", "--apply")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --apply asks before writing, but stdin is not a terminal: pass --yes to "
        "apply without asking"]
    assert path.read_text() == ONE_CLUSTER
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.py"]


def test_no_at_the_prompt_writes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    monkeypatch.setattr(sm_steps, "stdin_is_terminal", lambda: True)
    result = run_cli(path, "--input-shape", "4,8", "--apply", input="n\n")
    assert result.exit_code == 0, result.output
    assert "Rewrite " in result.output and "Nothing written." in result.output
    assert "+    from .tiny_fused import cluster0" in result.output  # shown, not written
    assert path.read_text() == ONE_CLUSTER
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["tiny.py"]


def test_yes_at_the_prompt_applies(tmp_path, monkeypatch):
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    monkeypatch.setattr(sm_steps, "stdin_is_terminal", lambda: True)
    result = run_cli(path, "--input-shape", "4,8", "--apply", input="y\n")
    assert result.exit_code == 0, result.output
    assert "y = cluster0(x)" in path.read_text()


def test_the_prompt_shows_every_line_it_writes_imports_included(tmp_path, monkeypatch):
    # The diff asked about is the one of the text written: the edit, and the import block
    # above it that the per-cluster Source edits leave out.
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    monkeypatch.setattr(sm_steps, "stdin_is_terminal", lambda: True)
    result = run_cli(path, "--input-shape", "4,8", "--apply", input="y\n")
    assert result.exit_code == 0, result.output
    shown = result.output.split("Changes to ", 1)[1].split("Rewrite ", 1)[0]
    added = [line[1:] for line in shown.splitlines() if line.startswith("+") and
             not line.startswith("+++")]
    removed = [line[1:] for line in shown.splitlines() if line.startswith("-") and
               not line.startswith("---")]
    assert added == ["if __package__:  # fused kernels written by fusion-advisor --apply",
                     "    from .tiny_fused import cluster0", "else:",
                     "    from tiny_fused import cluster0", "        y = cluster0(x)"], shown
    assert removed == ["        y = x * 2.0", "        y = torch.relu(y)"], shown
    assert "@@ -2,0 +3,4 @@" in shown, shown  # the imports' hunk, at the file's lines
    written = path.read_text()
    assert [line for line in written.splitlines() if line not in ONE_CLUSTER.splitlines()] \
        == added


def every_kernel_off_by_one(monkeypatch) -> None:
    """Every generated kernel the CLI validates returns one more than it should."""
    real = validate_run.load_generated

    def wrong(kernel, workdir):
        loaded = real(kernel, workdir)
        return dataclasses.replace(loaded, launcher=lambda *a: loaded.launcher(*a) + 1.0)

    monkeypatch.setattr(validate_run, "load_generated", wrong)


def test_a_cluster_that_failed_numerics_is_not_applied(tmp_path, monkeypatch):
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    every_kernel_off_by_one(monkeypatch)
    result = run_cli(path, "--input-shape", "4,8", "--apply", "--yes")
    assert result.exit_code == 0, result.output
    assert "FAILED cluster numerics" in result.output
    assert "cluster 0: not applied, cluster 0's kernel is not verified" in result.output
    assert "Nothing to apply" in result.output
    assert path.read_text() == ONE_CLUSTER
    assert not (tmp_path / "tiny_fused").exists() and not (tmp_path / "tiny.py.bak").exists()


def _plan(path: Path, shape: tuple[int, ...], failed: frozenset[int] = frozenset(),
          kernel_edit=None):
    analysis = analyze_file(path, [InputSpec(shape)])
    mappings = map_clusters(analysis)
    kernels = {c.index: generate(analysis, c) for c in analysis.clusters}
    if kernel_edit is not None:
        kernels = {i: dataclasses.replace(k, source=kernel_edit(k)) for i, k in kernels.items()}
    verdicts = {c.index: (c.index not in failed, "FAILED cluster numerics" if c.index in failed
                          else "verified") for c in analysis.clusters}
    return analysis, plan_apply(analysis, mappings, path, kernels, verdicts)


def test_only_verified_clusters_are_applied(tmp_path):
    path = copy_example(tmp_path, "example_net.py")
    analysis, plan = _plan(path, (2, 1024), failed=frozenset({1}))
    assert plan.clusters == (0, 2)
    assert [(s.cluster, "not verified" in s.reason) for s in plan.skipped] == [(1, True)]
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    text = path.read_text()
    assert "x = F.gelu(x)" in text and "cluster1" not in text
    assert [line for _, line in result.new_lines] == call_lines(path)


def test_a_file_changed_since_analysis_is_refused(tmp_path):
    path = copy_example(tmp_path, "example_net.py")
    analysis, plan = _plan(path, (2, 1024))
    changed = path.read_bytes() + b"# edited after the analysis\n"
    path.write_bytes(changed)
    with pytest.raises(ApplyError, match="changed since it was analyzed"):
        apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert path.read_bytes() == changed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["example_net.py"]


def test_a_mismatching_rewrite_is_rolled_back(tmp_path):
    path = copy_example(tmp_path, "example_net.py")
    original = path.read_bytes()
    off_by_one = textwrap.dedent("""

        _base = {name}


        def {name}(*args):
            return _base(*args) + 1.0
        """)
    analysis, plan = _plan(path, (2, 1024),
                           kernel_edit=lambda k: k.source + off_by_one.format(name=k.name))
    with pytest.raises(ApplyError, match="failed its check against the original.*restored"):
        apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == [
        "example_net.py"]


def test_rewrite_inserts_the_import_below_the_imports_and_goes_bottom_up(tmp_path):
    path = copy_example(tmp_path, "example_net.py")
    _, plan = _plan(path, (2, 1024))
    text, new_lines = rewrite(path.read_text(), plan.files[0])
    lines = text.splitlines()
    block = lines.index("if __package__:  # fused kernels written by fusion-advisor --apply")
    above = [i for i, line in enumerate(lines[:block]) if line.startswith(("import ", "from "))]
    assert block == above[-1] + 1 == 5  # right under `import torch.nn.functional as F`
    assert lines[block + 1].strip() == "from .example_net_fused import cluster0, cluster1, cluster2"
    assert [lines[n - 1].strip() for _, n in sorted(new_lines.items())] == [
        "x = cluster0(x)", "x = cluster1(x)", "return cluster2(x)"]
    assert len(lines) == len(path.read_text().splitlines()) - 6 + 4


def test_an_existing_package_or_a_taken_name_is_refused(tmp_path):
    path = copy_example(tmp_path, "example_net.py")
    analysis, plan = _plan(path, (2, 1024))
    (tmp_path / "example_net_fused").mkdir()
    with pytest.raises(ApplyError, match="example_net_fused already exists"):
        apply(plan, analysis, Console(), assume_yes=True, ask=None)
    (tmp_path / "example_net_fused").rmdir()

    taken = tmp_path / "taken.py"
    taken.write_text(ONE_CLUSTER.replace("import torch.nn as nn",
                                         "import torch.nn as nn\n\ncluster0 = None"))
    analysis, plan = _plan(taken, (4, 8))
    with pytest.raises(ApplyError, match="already uses the name `cluster0`"):
        apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert "cluster0 = None" in taken.read_text() and "= cluster0(" not in taken.read_text()


def test_a_file_name_that_is_no_identifier_gets_an_importable_package(tmp_path):
    path = tmp_path / "my-model.py"
    path.write_text(ONE_CLUSTER)
    analysis, plan = _plan(path, (4, 8))
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result.files[0].package.name == "my_model_fused"
    assert "from my_model_fused import cluster0" in path.read_text()
    assert result.files[0].backup.read_text() == ONE_CLUSTER


def test_fused_ops_refuse_other_dtypes_and_backward(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    analysis, plan = _plan(path, (4, 8))
    apply(plan, analysis, Console(), assume_yes=True, ask=None)
    model = load(path, "Tiny").to(DEVICE)
    with pytest.raises(TypeError, match="generated for inputs of dtype"):
        model.double()(torch.randn(4, 8, dtype=torch.float64, device=DEVICE))
    x = torch.randn(4, 8, requires_grad=True, device=DEVICE)
    out = load(path, "Tiny").to(DEVICE)(x)
    with pytest.raises(RuntimeError, match="inference only"):
        out.sum().backward()


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    analysis, plan = _plan(path, (4, 8))
    real = apply_module.write_atomic

    def refuse_model_file(target, text):
        if Path(target) == path:
            raise PermissionError(13, "Permission denied", str(target))
        real(target, text)

    monkeypatch.setattr(apply_module, "write_atomic", refuse_model_file)
    with pytest.raises(ApplyError, match="cannot write next to .*Permission denied"):
        apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert path.read_text() == ONE_CLUSTER
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["tiny.py"]


def test_apply_a_cluster_with_two_results(tmp_path):
    path = tmp_path / "resnorm.py"
    path.write_text(RES_NORM)
    original = path.read_text()
    analysis, plan = _plan(path, (4, 8))
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result.clusters == (0,)
    assert "x, h = cluster0(x, y, self.norm.weight, self.norm.bias)" in path.read_text()
    assert analyze_file(path, [InputSpec((4, 8))]).clusters == ()
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "ResNorm", torch.randn(3, 8))
    assert result.files[0].backup.read_text() == original


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_apply_example_net_on_cuda(tmp_path):
    """Natively compiled kernels at a real size: the check after writing runs on the GPU."""
    path = copy_example(tmp_path, "example_net.py")
    result = run_cli(path, "--input-shape", "4096,1024", "--apply", "--yes")
    assert result.exit_code == 0, result.output
    # Every cluster passes numerics; the benchmark gate may still hold one back on a GPU.
    assert "Applied " in result.output and call_lines(path)
    model = load(path, "ExampleNet").cuda()
    with torch.no_grad():
        out = model(torch.randn(4096, 1024, device="cuda"))
    assert out.shape == (4096, 512) and torch.isfinite(out).all()


def test_crlf_line_endings_survive_apply(tmp_path):
    path = tmp_path / "tiny.py"
    original = ONE_CLUSTER.replace("\n", "\r\n").encode()
    path.write_bytes(original)
    analysis, plan = _plan(path, (4, 8))
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    data = path.read_bytes()
    assert b"y = cluster0(x)\r\n" in data
    assert data.count(b"\n") == data.count(b"\r\n")
    assert result.files[0].backup.read_bytes() == original


def test_models_returning_a_dict_are_checked_leaf_by_leaf(tmp_path):
    path = tmp_path / "dicty.py"
    path.write_text(ONE_CLUSTER.replace("return self.proj(y)",
                                        'return {"out": self.proj(y), "aux": (x, y)}'))
    analysis, plan = _plan(path, (4, 8))
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result.max_abs_err is not None and result.max_abs_err < 1e-5
    assert "y = cluster0(x)" in path.read_text()
