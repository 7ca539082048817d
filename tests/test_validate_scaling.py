"""Validation that scales: identical kernels checked once, kernels checked on a few rows of
their real row width, progress lines on a pipe, and model-numerics failures that each name
their own cluster (the 12-layer GPT case of issue 16)."""

from __future__ import annotations

import importlib.util
import io
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze, analyze_file
from fusion_core.report.progress import LONG_RUN, BarProgress, PlainProgress, for_stderr
from fusion_core.validate import model_check, validate
from fusion_core.validate import run as validate_run
from fusion_core.validate.kernels import build_kernels, same_source_key
from fusion_core.validate.shrink import row_shape, shrink_steps, slice_rows
from fusion_core.validate.subgraph import PatchError

ROOT = Path(__file__).resolve().parents[1]

REPEATED = textwrap.dedent('''\
    import torch.nn as nn


    class Repeated(nn.Module):
        def __init__(self, blocks=8, width=32, scale=2.0):
            super().__init__()
            self.mix = nn.ModuleList(nn.Linear(width, width, bias=False)
                                     for _ in range(blocks))
            self.scale = scale

        def forward(self, x):
            for lin in self.mix:
                x = lin((x * self.scale).relu() + 1.0)
            return x
''')


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def repeated_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("repeated") / "repeated.py"
    path.write_text(REPEATED)
    return path


def _counting_loads(monkeypatch):
    loads = []
    real = validate_run.load_generated

    def counted(kernel, workdir):
        loads.append(kernel.cluster_index)
        return real(kernel, workdir)

    monkeypatch.setattr(validate_run, "load_generated", counted)
    return loads


@pytest.mark.cpu
def test_identical_blocks_load_and_check_one_kernel(repeated_file, monkeypatch):
    model = _module(repeated_file, "repeated_a").Repeated(blocks=2)
    analysis = analyze(model, InputSpec((4, 32)))
    assert len(analysis.clusters) == 2
    kernels = build_kernels(analysis)
    assert kernels.same_as == {1: 0} and kernels.distinct == (0,)
    loads = _counting_loads(monkeypatch)
    report = validate(analysis, kernels=kernels)
    assert loads == [0]  # one kernel generated, loaded and checked for both clusters
    assert report.result(0).status == "verified (interpreter, 4×32)"
    assert report.result(1).status == "verified (same kernel as cluster 0)"
    assert report.result(1).usable and report.result(1).same_as == 0
    assert report.model.passed and report.model.patched == (0, 1)


def test_kernels_loading_an_input_again_through_maps_are_merged():
    # LLaMA's rotary on q and on k: each kernel takes its q (k) and loads it twice more
    # through the halves' maps, locals named after the parameter (`transpose_map1`).
    path = Path(__file__).resolve().parents[1] / "examples" / "llama_block.py"
    analysis = analyze_file(path, [InputSpec((1, 4, 128))], "LlamaBlock")
    q, k = (c.index for c in analysis.clusters if "cat" in c.ops)
    kernels = build_kernels(analysis, tuple(analysis.clusters[i] for i in (q, k)))
    assert "_map1" in kernels.kernels[q].source
    assert kernels.same_as == {k: q}


def test_kernels_differing_in_a_constant_are_not_merged(repeated_file):
    mod = _module(repeated_file, "repeated_b")
    a = analyze(mod.Repeated(blocks=1, scale=2.0), InputSpec((4, 32)))
    b = analyze(mod.Repeated(blocks=1, scale=3.0), InputSpec((4, 32)))
    ka, kb = build_kernels(a).kernels[0], build_kernels(b).kernels[0]
    assert ka.source != kb.source
    assert same_source_key(ka.source, ka.name, 0) != same_source_key(kb.source, kb.name, 0)


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 0.5, dim=-1)


@pytest.mark.cpu
def test_a_wide_softmax_is_checked_on_few_rows_with_the_real_launch_choices(monkeypatch):
    analysis = analyze(Softmax(), InputSpec((1, 8, 512, 512)))
    modules = []
    real = validate_run.load_generated

    def keep(kernel, workdir):
        loaded = real(kernel, workdir)
        modules.append(loaded.module)
        return loaded

    monkeypatch.setattr(validate_run, "load_generated", keep)
    report = validate(analysis)
    r = report.result(0)
    assert r.usable, r.status
    assert r.analysed_shape == (1, 8, 512, 512)
    assert r.shape[-1] == 512 and r.shape[1] >= 2 and 16 <= r.shape[1] * r.shape[2] <= 64
    assert r.status == f"verified (interpreter, {'×'.join(map(str, r.shape))} of 1×8×512×512)"
    # The kernel checked is the one generated for the real shape, and its launcher had the
    # configurations (block, rows per program, warps) it has at the real shape to choose from.
    (module,) = modules
    full = torch.empty((1, 8, 512, 512), device="meta")
    real_configs = module._plan(full)[-1]
    checked = {plan[-1] for key, plan in module.LAUNCH_CACHE.items() if key[0][-1] == 512}
    assert real_configs in checked
    assert real_configs[0] == (512, 1, 2)  # the heuristic's: one 512-wide row a program, 2 warps
    assert report.model.passed and report.model.inputs == ((1, 8, 16, 16),)


def test_shrinking_keeps_the_row_and_the_broadcasts():
    assert row_shape((8, 4, 512, 512)) == (2, 2, 16, 512)
    assert row_shape((16384, 1024)) == (64, 1024)
    assert row_shape((3, 1, 7)) == (3, 1, 7)
    mask = torch.ones(512, 512, dtype=torch.bool)
    cut = slice_rows(mask, (8, 4, 512, 512), (2, 2, 16, 512))
    assert cut.shape == (16, 512) and cut.is_contiguous()
    t = torch.randn(8, 512, 4, 64).transpose(1, 2)  # strides of a transposed view
    cut = slice_rows(t, (8, 4, 512, 64), (2, 2, 16, 64))
    assert cut.shape == (2, 2, 16, 64) and cut.stride() == (2048, 64, 128, 1)
    # The model numerics run tries the batch at 1 and the token dim at 16 up to 256.
    assert shrink_steps((InputSpec((8, 512), torch.int64),)) == (
        (((0, 0),), (1,)), (((0, 1),), (16, 32, 64, 128, 256)))


def test_progress_lines_go_to_stderr_on_a_pipe_for_long_runs(repeated_file):
    result = CliRunner().invoke(cli, ["--model", str(repeated_file), "--input-shape", "4,32"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == "fusion-advisor: generating kernels for 8 clusters"
    where = "" if torch.cuda.is_available() else " under the Triton interpreter"
    assert f"fusion-advisor: cluster numerics: 1 distinct kernel for 8 clusters{where}" \
        in lines
    assert any(line.startswith("fusion-advisor: model numerics") for line in lines)
    assert "fusion-advisor:" not in result.stdout
    assert "cluster 7: verified (same kernel as cluster 0)" in result.stdout


def test_short_runs_print_no_progress_and_terminals_get_a_bar(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not isinstance(for_stderr(LONG_RUN - 1), (PlainProgress, BarProgress))
    assert isinstance(for_stderr(LONG_RUN), PlainProgress)
    # torch.compile takes tens of seconds even for a small model: such a run always reports.
    assert isinstance(for_stderr(1, compiles=True), PlainProgress)
    monkeypatch.setattr("sys.stderr", Tty())
    assert isinstance(for_stderr(LONG_RUN), BarProgress)


@pytest.fixture(scope="module")
def three_layers():
    mod = _module(ROOT / "examples" / "gpt12.py", "gpt12_small")
    torch.manual_seed(0)
    model = mod.GPT12(layers=3, hidden=32, heads=2, max_tokens=32)
    return analyze(model, InputSpec((2, 16), torch.int64))


@pytest.mark.cpu
def test_cross_block_multi_output_clusters_pass_model_numerics(three_layers):
    multi = [c.index for c in three_layers.clusters if len(c.outputs) > 1 and c.index > 2]
    assert multi  # add → layer_norm across a block boundary, two results
    report = validate(three_layers)
    assert report.model.passed, report.model.detail
    assert all(report.result(i).usable for i in multi)


@pytest.mark.cpu
def test_each_blamed_cluster_names_its_own_failure(three_layers, monkeypatch):
    """Issue 16: clusters 5, 8, … 32 all quoted cluster 2's PatchError."""
    multi = [c.index for c in three_layers.clusters if len(c.outputs) > 1][:2]
    real = model_check.patch

    def refusing(gm, launchers, *args, **kwargs):
        bad = [i for i in launchers if i in multi]
        if bad:
            raise PatchError(f"cluster {bad[0]}: cannot place one kernel call")
        return real(gm, launchers, *args, **kwargs)

    monkeypatch.setattr(model_check, "patch", refusing)
    report = validate(three_layers)
    assert report.model.passed is False and report.model.blamed == tuple(multi)
    for i in multi:
        gate = report.result(i).gate("model numerics")
        assert not gate.passed and gate.detail == (f"PatchError: cluster {i}: cannot place "
                                                   "one kernel call")
    others = [r for r in report.results if r.cluster not in multi]
    assert all(r.usable for r in others)


def test_a_cli_run_with_every_output_generates_each_kernel_once(tmp_path, monkeypatch):
    """--out-dir, --json and --html all show the kernels the run generated once."""
    import fusion_core.codegen as codegen

    generated: list[int] = []
    real = codegen.generate

    def counting(analysis, cluster, *args, **kwargs):
        generated.append(cluster.index)
        return real(analysis, cluster, *args, **kwargs)

    monkeypatch.setattr(codegen, "generate", counting)
    result = CliRunner().invoke(cli, [
        "--model", str(ROOT / "examples" / "example_net.py"), "--input-shape", "4,1024",
        "--out-dir", str(tmp_path / "gen"), "--json", str(tmp_path / "r.json"),
        "--html", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert sorted(generated) == [0, 1, 2]
    page = (tmp_path / "r.html").read_text()
    assert (tmp_path / "gen" / "cluster0.py").read_text().splitlines()[5] in page
