"""Bad values get one line; conventions: the update flag next to a path, stale baselines
failing or pruned, the -vv diff, the disable switch, unchecked tests in the report, and
report paths."""

import json

import pytest
import yaml
from fusion_plugin_helpers import (
    PLUGIN_ARGS,
    baselines,
    marked_test,
    model_source,
    run,
)

pytestmark = pytest.mark.usefixtures("torch_warm")


def _no_traceback(r) -> None:
    out = r.stdout.str() + r.stderr.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out


# ---------------------------------------------------------------- bad values

def test_unknown_marker_keyword_fails_the_test_and_writes_nothing(proj):
    proj.makepyfile(test_net=marked_test(tolerance=0.1))
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["fusion_check got unknown keyword tolerance: the allowed "
                            "keywords are dtype, checks, traffic_tolerance, timing_tolerance, "
                            "timing_alpha, timing_min_bytes, capture, device, improvements, "
                            "model_kwargs, timing_inputs, compiled, compiled_shapes, "
                            "compiled_max_kernels, compiled_max_graph_breaks, "
                            "compiled_max_graphs, compiled_max_recompiles, compiled_max_bytes"])
    assert baselines(proj.path) == {}


def test_an_empty_checks_list_fails_the_test_instead_of_gating_everything(proj):
    proj.makepyfile(test_net=marked_test(checks=[]))
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*checks=[] gates nothing: name at least one of clusters, "
                            "rejections, traffic, timings, or leave checks out to gate them all"])
    _no_traceback(r)


def test_out_of_range_tolerances_are_refused_with_the_allowed_range(proj):
    proj.makeini("[pytest]\nfusion_traffic_tolerance = -5\n")
    r = run(proj)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*ini option fusion_traffic_tolerance must be a finite number >= 0, "
                            "got '-5'"])
    proj.makeini("[pytest]\nfusion_timing_alpha = 1.5\n")
    r = run(proj)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*fusion_timing_alpha must be a number in (0, 1], got '1.5'"])
    proj.makeini("[pytest]\n")
    nan_marker = marked_test(timing_tolerance=0.5).replace("0.5", "float('nan')")
    proj.makepyfile(test_net=nan_marker + """
def test_fixture(fusion_advisor):
    fusion_advisor.check(fusion_advisor.analyze(model.Net, (4, 8)), traffic_tolerance=-0.1)
""")
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines_random([
        "fusion_check(timing_tolerance=...) must be a finite number >= 0, got nan",
        "fusion_advisor.check(traffic_tolerance=...) must be a finite number >= 0, got -0.1"])
    assert baselines(proj.path) == {}


def test_baseline_with_a_wrong_typed_field_is_corrupt_and_failing_regenerates_it(proj):
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    path.write_text(path.read_text() + "measured: [1, 2]\n")
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([f"corrupt fusion baseline fusion_baselines/{path.name}: *"])
    _no_traceback(r)
    r = run(proj, "--fusion-update-baselines=failing")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([f"replaced fusion_baselines/{path.name} (test_net.py::test_net)"])
    # Regenerated: no list left (on a GPU machine the new file holds that GPU's timings)
    assert isinstance(yaml.safe_load(path.read_text()).get("measured", {}), dict)


def test_a_folder_where_the_baseline_belongs_fails_that_test_and_is_left_alone(proj):
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    path.unlink()
    path.mkdir()
    (path / "keep.txt").write_text("mine")
    for args in ([], ["--fusion-update-baselines=failing"]):
        r = run(proj, *args)
        r.assert_outcomes(failed=1)
        r.stdout.fnmatch_lines([f"fusion baseline fusion_baselines/{path.name} is a folder, not "
                                "a file; move it away and rerun"])
        _no_traceback(r)
    assert (path / "keep.txt").read_text() == "mine"


def test_report_path_problems_are_usage_errors_or_one_error_line(proj, monkeypatch):
    (proj.path / "afile").write_text("")
    r = run(proj, "--fusion-report=afile/rep")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--fusion-report=afile/rep: */afile is a file, not a folder; "
                            "choose another path"])
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    # The target turns into a folder while the tests run: found only at session end.
    proj.makeconftest("import pathlib\n\ndef pytest_sessionstart(session):\n"
                      "    pathlib.Path(session.config.rootpath, 'rep.md').mkdir()\n")
    r = run(proj, "--fusion-report=rep")
    r.assert_outcomes(passed=1)
    assert r.ret == pytest.ExitCode.TESTS_FAILED  # the report was asked for and is missing
    r.stdout.fnmatch_lines(["ERROR: could not write the fusion report */rep.md: *"])
    _no_traceback(r)
    # A step summary nobody asked for on the command line: one line, the run stays green.
    (proj.path / "conftest.py").unlink()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(proj.path / "afile" / "summary.md"))
    r = run(proj, "--fusion-report")
    assert r.ret == pytest.ExitCode.OK
    r.stdout.fnmatch_lines(["could not append the fusion report to GITHUB_STEP_SUMMARY (*): *"])


def test_report_to_a_folder_that_does_not_exist_yet(proj):
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    r = run(proj, "--fusion-report=out/")
    r.assert_outcomes(passed=1)
    doc = json.loads((proj.path / "out" / "fusion-report.json").read_text())
    assert [t["nodeid"] for t in doc["tests"]] == ["test_net.py::test_net"]
    assert (proj.path / "out" / "fusion-report.md").read_text().startswith("## Fusion report")


# ---------------------------------------------------------------- conventions

def test_update_flag_followed_by_a_path_takes_the_path_as_a_path(proj):
    proj.makepyfile(test_other=marked_test("test_other"))
    r = run(proj, "--fusion-update-baselines", "test_net.py")
    r.assert_outcomes(passed=1)
    assert list(baselines(proj.path)) == ["test_net.py::test_net"]
    r = run(proj, "--fusion-update-baselines", "new", "test_other.py")
    r.assert_outcomes(passed=1)
    assert set(baselines(proj.path)) == {"test_net.py::test_net", "test_other.py::test_other"}


def test_report_flag_followed_by_a_test_runs_that_test_and_writes_no_report_file(proj):
    proj.makepyfile(test_other=marked_test("test_other"))
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=2)
    before = sorted(p.name for p in proj.path.iterdir())
    for target in ("test_net.py", "test_net.py::test_net"):
        r = run(proj, "--fusion-report", target)
        r.assert_outcomes(passed=1)  # test_other.py is not run
        r.stdout.fnmatch_lines(["*fusion report*", "test_net.py::test_net *"])
        assert sorted(p.name for p in proj.path.iterdir()) == before  # no test_net.py.md


def test_stale_baselines_can_fail_the_run_and_be_pruned_alone(proj):
    proj.makepyfile(model2=model_source("base"),
                    test_net=marked_test("test_a") + "\n" + marked_test("test_b", "model2"))
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=2)
    files = baselines(proj.path)
    proj.makepyfile(test_net=marked_test("test_a"))
    proj.makepyfile(model=model_source("grown"))  # test_a improves: =all would rewrite it
    r = run(proj)
    assert r.ret == pytest.ExitCode.OK  # stale only warns by default
    r.stdout.fnmatch_lines(["stale fusion_baselines/*: test test_net.py::test_b no longer "
                            "exists; remove it with pytest --fusion-prune-stale"])
    for how in (["--fusion-fail-stale"], ["-o", "fusion_fail_stale=true"]):
        r = run(proj, *how)
        r.assert_outcomes(passed=1)
        assert r.ret == pytest.ExitCode.TESTS_FAILED
        r.stdout.fnmatch_lines(["ERROR: 1 stale fusion baseline and fusion_fail_stale is set:"
                                " remove them with pytest --fusion-prune-stale"])
    a_before = files["test_net.py::test_a"].read_bytes()
    r = run(proj, "--fusion-prune-stale", "--fusion-fail-stale")
    assert r.ret == pytest.ExitCode.OK
    r.stdout.fnmatch_lines(["removed stale fusion_baselines/* (test test_net.py::test_b no "
                            "longer exists)"])
    assert not files["test_net.py::test_b"].exists()
    assert files["test_net.py::test_a"].read_bytes() == a_before  # not re-baselined


def test_very_verbose_regression_shows_the_yaml_diff(proj):
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    proj.makepyfile(model=model_source("split"))
    r = run(proj)
    assert "(baseline)" not in r.stdout.str()
    r = run(proj, "-vv")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["--- fusion_baselines/test_net__test_net-*.yaml (baseline)",
                            "+++ current result", "@@ *"])
    r.stdout.fnmatch_lines(["-- ops: [mul, relu, add]", "*", "+- ops: [mul, relu]"])


FIXTURE_FAILS_EARLY = """\
import model

def test_fails_first(fusion_advisor):
    r = fusion_advisor.analyze(model.Net, (4, 8))
    assert r.kernels == 5
    fusion_advisor.check(r)
"""


def test_disable_switch_skips_fusion_tests_with_a_reason(proj):
    proj.makepyfile(test_fix=FIXTURE_FAILS_EARLY, test_plain="def test_plain():\n    pass\n")
    r = run(proj, "--fusion-disable", "-rs")
    r.assert_outcomes(passed=1, skipped=2)
    r.stdout.fnmatch_lines_random(["SKIPPED [1] test_fix.py: fusion checks disabled "
                                   "(--fusion-disable)", "SKIPPED ?1? test_net.py:*: fusion "
                                   "checks disabled (--fusion-disable)"])
    assert baselines(proj.path) == {}


def test_a_fixture_test_failing_before_check_is_in_the_report(proj):
    proj.makepyfile(test_net=FIXTURE_FAILS_EARLY)
    r = run(proj, "--fusion-report=rep")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["test_net.py::test_fails_first * Net * not checked: test failed "
                            "before check *"])
    (rec,) = json.loads((proj.path / "rep.json").read_text())["tests"]
    assert (rec["nodeid"], rec["status"]) == ("test_net.py::test_fails_first",
                                              "not checked: test failed before check")


MODULES_AT_EXIT = """\
import sys

def pytest_unconfigure(config):
    open("modules.txt", "w").write("\\n".join(sorted(sys.modules)))
"""


# fusion_core modules that import neither torch nor the analyzer (file writes, byte units)
LIGHT = {"fusion_core.fileio", "fusion_core.report", "fusion_core.report.units",
         "fusion_core.units"}  # no imports of their own


def _heavy_modules(pytester, *args):
    """(heavy modules after a run, all modules, the run result)."""
    r = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider", "-p",
                                      "no:hypothesispytest")
    r.assert_outcomes(passed=1)
    modules = set((pytester.path / "modules.txt").read_text().split())
    return {m for m in modules if m.split(".")[0] in ("torch", "triton", "yaml")
            or m.startswith("fusion_core.") and m not in LIGHT}, modules, r


_WITHOUT_PLUGIN: list[set[str]] = []  # the heavy modules of a run without the plugin


@pytest.mark.parametrize("args", [(), ("--fusion-report",), ("--fusion-update-baselines",)])
def test_a_run_without_fusion_tests_imports_neither_torch_nor_the_analyzer(pytester, args):
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(MODULES_AT_EXIT)
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    # What the environment's other plugins import anyway (on a GPU machine some import
    # torch or yaml themselves): the plugin is judged only on what it adds.
    without = ("-p", "no:fusion") if not PLUGIN_ARGS else ()
    if not _WITHOUT_PLUGIN:  # the same project and run for each `args`: run once
        _WITHOUT_PLUGIN.append(_heavy_modules(pytester, *without)[0])
    baseline = _WITHOUT_PLUGIN[0]
    heavy, modules, r = _heavy_modules(pytester, *PLUGIN_ARGS, *args)
    r.stdout.fnmatch_lines(["fusion-advisor: torch *, triton *, baselines fusion_baselines/*"])
    assert "pytest_fusion.plugin" in modules  # the plugin was loaded...
    assert heavy - baseline == set()  # ...and loaded nothing heavy of its own
