"""The plugin's capture frontend: the `fusion_capture` ini option, the `capture=` keyword
on the marker and on `fusion_advisor.analyze()`, and the frontend in the baseline."""

import gc
import sys

import pytest
import yaml
from fusion_plugin_helpers import PLUGIN_ARGS, baselines, marked_test, model_source

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
    r.stdout.fnmatch_lines(["    captured through export, the baseline through fx"])
    proj.makepyfile(model=model_source("branch-split"))
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["fusion regression against fusion_baselines/*.yaml:",
                            "  - `mul → relu → add` at model.py:10-12 split into *",
                            "  (captured through export, the baseline through fx)",
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
