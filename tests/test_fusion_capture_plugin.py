"""The plugin's capture frontend: the `fusion_capture` ini option, the `capture=` keyword
on the marker and on `fusion_advisor.analyze()`, and the frontend in the baseline."""

import gc
import sys

import pytest
import yaml
from fusion_plugin_helpers import PLUGIN_ARGS, baselines, marked_test, model_source
from verdict_project import BLOCKS, edited, project

from fusion_core.ir.capture import FRONTENDS
from pytest_fusion.fixture import CAPTURES
from pytest_fusion.schema import from_data, to_data
from pytest_fusion.snapshot import BaselineError, Snapshot


@pytest.fixture(scope="module", autouse=True)
def _torch_modules_loaded():
    """Run both frontends before pytester snapshots sys.modules (see test_fusion_plugin)."""
    import torch

    import fusion_core

    for capture in ("fx", "export"):
        fusion_core.analyze(torch.nn.Sequential(torch.nn.ReLU()), (2, 4), capture=capture)
    gc.freeze()
    yield
    gc.unfreeze()


# These tests are about what is captured: on a CUDA machine measured timings of the tiny
# model would be gated too, and its noise is not what they check.
STRUCTURE = ("clusters", "rejections", "traffic")


@pytest.fixture
def proj(pytester, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(model=model_source("base"), test_net=marked_test(checks=STRUCTURE))
    return pytester


def run(p, *args):
    return p.runpytest("-p", "no:cacheprovider", "-p", "no:hypothesispytest", *PLUGIN_ARGS,
                       *args)


def frontend(p) -> str | None:
    (path,) = baselines(p.path).values()
    return yaml.safe_load(path.read_text()).get("frontend")


def frontend_of(p, test: str) -> str | None:
    return yaml.safe_load(baselines(p.path)[test].read_text()).get("frontend")


def test_plugin_offers_the_frontends_fusion_core_has():
    assert set(CAPTURES) == set(FRONTENDS)


def test_ini_option_is_honored_and_the_frontend_recorded(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    assert frontend(proj) == "fx"  # auto: FX traces this model
    proj.makeini("[pytest]\nfusion_capture = export\n")
    r = run(proj)
    r.assert_outcomes(passed=1)  # the same clusters, captured the other way: a change
    r.stdout.fnmatch_lines(["test_net.py::test_net: changed (not a regression)*",
                            "    captured through export, the baseline through fx"])
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    assert frontend(proj) == "export"


def test_a_regression_after_auto_fell_back_says_so(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    proj.makepyfile(model=model_source("branch"))  # FX can no longer trace it: export
    r = run(proj)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["    captured through export (model.py:12 (`return y + self.b if "
                            "x.shape?-1? > 4 else y`): TraceError: *), the baseline through fx"])
    proj.makepyfile(model=model_source("branch-split"))
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["fusion regression against fusion_baselines/*.yaml:",
                            "  - `mul → relu → add` at model.py:10-12 split into *",
                            "  (captured through export (model.py:12 *), the baseline through fx)",
                            "If this is intended, accept it with: *"])


def test_marker_keyword_overrides_the_ini_option(proj):
    proj.makepyfile(model=model_source("branch"))  # FX cannot trace it
    proj.makeini("[pytest]\nfusion_capture = fx\n")
    r = run(proj, "--fusion-update-baselines")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["fusion analysis failed: cannot trace Net.forward at *model.py:12*"])
    proj.makepyfile(test_net=marked_test(capture="auto", checks=STRUCTURE))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    assert frontend(proj) == "export"  # auto fell back to export
    (path,) = baselines(proj.path).values()
    (c,) = yaml.safe_load(path.read_text())["clusters"]
    assert c["ops"] == ["mul", "relu", "add"] and c["lines"] == "model.py:10-12"
    proj.makeini("[pytest]\nfusion_capture = export\n")
    proj.makepyfile(test_net=marked_test(capture="fx", checks=STRUCTURE))
    run(proj).assert_outcomes(failed=1)


FIXTURE_TESTS = """\
import model

def test_ini(fusion_advisor):
    assert fusion_advisor.analyze(model.Net, (4, 8)).frontend == "export"

def test_keyword(fusion_advisor):
    r = fusion_advisor.analyze(model.Net, (4, 8), capture="fx")
    assert r.frontend == "fx" and r.snapshot.frontend == "fx"
    fusion_advisor.check(r)
"""


def test_fixture_keyword_overrides_the_ini_option(proj):
    proj.makeini("[pytest]\nfusion_capture = export\n")
    proj.makepyfile(test_net=FIXTURE_TESTS)
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=2)
    assert frontend(proj) == "fx"


def test_bad_capture_is_a_one_line_error_naming_the_option(proj):
    proj.makeini("[pytest]\nfusion_capture = jit\n")
    r = run(proj)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["ERROR: ini option fusion_capture must be one of auto, fx, export, "
                            "got 'jit'"])
    proj.makeini("[pytest]\n")
    proj.makepyfile(test_net=marked_test(capture="jit") + "\n\ndef test_fixture(fusion_advisor):\n"
                    "    fusion_advisor.analyze(model.Net, (4, 8), capture='torchscript')\n")
    r = run(proj)
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines_random([
        "unknown capture frontend capture='jit': choose from auto, fx, export",
        "unknown capture frontend capture='torchscript': choose from auto, fx, export"])


def test_baseline_without_a_frontend_still_loads(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    path.write_text(path.read_text().replace("frontend: fx\n", ""))
    assert frontend(proj) is None
    proj.makeini("[pytest]\nfusion_capture = export\n")
    r = run(proj)
    r.assert_outcomes(passed=1)
    assert "captured through" not in r.stdout.str()  # unknown before: nothing to compare


def test_frontend_in_the_baseline_data_is_optional_and_typed():
    s = Snapshot("t.py::t", "Net", ("4×8 float32",), (), (), frontend="export")
    data = to_data(s)
    assert list(data)[:6] == ["schema_version", "test", "model", "inputs", "target", "frontend"]
    assert from_data(data, "b.yaml") == s
    del data["frontend"]
    old = from_data(data, "b.yaml")
    assert old.frontend == "" and "frontend" not in to_data(old)  # a rewrite invents nothing
    with pytest.raises(BaselineError, match="corrupt fusion baseline b.yaml: `frontend` has "
                                            "the wrong type"):
        from_data({**data, "frontend": 3}, "b.yaml")


def test_a_capture_error_fails_the_test_with_one_line(proj):
    """No chain of the frontends' exceptions under the message, at any --tb setting."""
    proj.makepyfile(test_branch=(
        "import pytest\nimport torch.nn as nn\n\n"
        "class M(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if (x * 2.0).sum() > 0:\n"
        "            return x\n"
        "        return -x\n\n"
        "@pytest.mark.fusion_check(M, (4, 8))\n"
        "def test_branch():\n"
        "    pass\n"))
    for tb in ("short", "long"):
        r = run(proj, "test_branch.py", f"--tb={tb}")
        r.assert_outcomes(failed=1)
        out = r.stdout.str()
        section = out[out.index("_ test_branch _"):out.index("short test summary")]
        lines = [line for line in section.splitlines()[1:]
                 if line.strip() and not line.startswith("=")]
        assert len(lines) == 1, section
        assert lines[0].startswith("fusion analysis failed: cannot capture M")
        assert "torch.where" in lines[0]
        assert "direct cause" not in out and "During handling" not in out


# --- debug code in forward, and inputs the model rejects (tests/verdict_project.py) ----------

SOFTMAX = "        att = F.softmax(att, dim=-1)\n"
# The debug print a developer adds while chasing a NaN: FX traces `.item()`, fake tensors
# cannot run it, torch.export can.
DEBUG_PRINT = (SOFTMAX, SOFTMAX + "        print(att.max().item())\n")
PRINT_LINE = BLOCKS.splitlines().index(SOFTMAX.rstrip()) + 2
CLI_FLAGS = ("--input-shape", "--dtype", "--capture")

FALLBACK_NOTED = f"""\
import blocks


def test_fallback_noted(fusion_advisor):
    r = fusion_advisor.analyze(blocks.Transformer(), (2, 8, 32))
    assert r.frontend == "export"
    why = r.analysis.capture_fallback
    assert "blocks.py:{PRINT_LINE} (`print(att.max().item())`): `.item()` reads a tensor's " \\
        "value" in why, why
"""


@pytest.fixture
def blocks_proj(pytester, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # blocks.py is edited between runs
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makeini("[pytest]\n")
    project(pytester)
    return pytester


def test_a_debug_print_in_forward_is_captured_through_export(blocks_proj):
    run(blocks_proj, "--fusion-update-baselines=new").assert_outcomes(passed=3)
    edited(blocks_proj, DEBUG_PRINT)
    blocks_proj.makepyfile(test_fallback=FALLBACK_NOTED)
    r = run(blocks_proj, "--fusion-update-baselines=new")  # records only test_fallback's
    r.assert_outcomes(passed=4)
    out = r.stdout.str()
    # Both transformer tests compare with their FX baselines and say how this was captured.
    said = ("    captured through export (blocks.py:47 (`print(att.max().item())`): `.item()` "
            "reads a tensor's value")
    assert out.count(said) == 2, out
    assert "fusion analysis failed" not in out and "does not fit the model" not in out
    assert not any(flag in out for flag in CLI_FLAGS)


def failure_lines(r) -> list[str]:
    """The `fusion analysis failed: ...` lines of a run's output."""
    return [line for line in r.stdout.lines if line.startswith("fusion analysis failed: ")]


def test_a_debug_check_neither_frontend_captures_names_its_line_and_fix(blocks_proj):
    check = "        assert (att >= 0).all()\n"
    edited(blocks_proj, (SOFTMAX, SOFTMAX + check))
    r = run(blocks_proj, "--fusion-update-baselines=new", "test_blocks.py::test_transformer")
    r.assert_outcomes(failed=1)
    (line,) = failure_lines(r)
    assert line.startswith("fusion analysis failed: cannot capture Transformer: `assert (att >= "
                           f"0).all()` at {blocks_proj.path / 'blocks.py'}:{PRINT_LINE} reads a "
                           "tensor's value in Python"), line
    assert line.endswith("guard it with `if not torch.compiler.is_compiling():`, which "
                         "torch.export skips")
    assert not any(flag in r.stdout.str() for flag in CLI_FLAGS)
    # The guard it recommends lets auto capture take torch.export's graph.
    edited(blocks_proj, (check, "        if not torch.compiler.is_compiling():\n    " + check))
    run(blocks_proj, "--fusion-update-baselines=new", "test_blocks.py::test_transformer"
        ).assert_outcomes(passed=1)
    assert frontend_of(blocks_proj, "test_blocks.py::test_transformer") == "export"


WRONG_INPUTS = """\
import pytest
import blocks


@pytest.mark.fusion_check(blocks.Transformer, (2, 8, 16))
def test_marker():
    pass


def test_fixture(fusion_advisor):
    fusion_advisor.analyze(blocks.Transformer(), (2, 8, 16))


def test_count(fusion_advisor):
    fusion_advisor.analyze(blocks.Transformer(), (2, 8, 32), (2, 8, 32))
"""


def test_an_input_the_model_rejects_is_blamed_on_the_test_inputs(blocks_proj):
    blocks_proj.makepyfile(test_wrong=WRONG_INPUTS)
    r = run(blocks_proj, "--fusion-update-baselines=new", "test_wrong.py")
    r.assert_outcomes(failed=3)
    ln1 = BLOCKS.splitlines().index("        x = x + self.attn(self.ln1(x))") + 1
    rejected = (f"fusion analysis failed: the example input does not fit the model: `layer_norm` "
                f"at {blocks_proj.path / 'blocks.py'}:{ln1} rejected it (")
    marker, fixture, count = failure_lines(r)
    assert marker.startswith(rejected) and marker.endswith(
        "; check the example inputs given to @pytest.mark.fusion_check(...): their shapes and "
        "dtypes")
    assert fixture.startswith(rejected) and fixture.endswith(
        "; check the example inputs given to fusion_advisor.analyze(...): their shapes and "
        "dtypes")
    assert count == ("fusion analysis failed: Transformer.forward takes 1 input (x) but 2 were "
                     "given; give fusion_advisor.analyze(...) one example input per argument of "
                     "forward")
    assert not any(flag in r.stdout.str() for flag in CLI_FLAGS)


def test_a_model_file_with_several_classes_is_answered_in_the_tests_terms(blocks_proj):
    blocks_proj.makepyfile(test_path=(
        "import pytest\n\n\n"
        "@pytest.mark.fusion_check('blocks.py', (2, 8, 32))\n"
        "def test_path():\n"
        "    pass\n"))
    r = run(blocks_proj, "test_path.py")
    r.assert_outcomes(failed=1)
    assert failure_lines(r) == [
        "fusion analysis failed: blocks.py defines several nn.Module classes (Transformer, Conv); "
        "give @pytest.mark.fusion_check(...) the class itself instead of the file's path"]
