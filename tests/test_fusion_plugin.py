"""The pytest plugin end to end, through pytester (in-process runs on tiny models)."""

import json

import pytest
import yaml
from fusion_plugin_helpers import (
    MEASURE_CONFTEST,
    SAMPLES,
    baseline_notes,
    baselines,
    marked_test,
    model_source,
    run,
    write_timings,
)

CMD = "pytest --fusion-update-baselines"

pytestmark = pytest.mark.usefixtures("torch_warm")  # tests/conftest.py


def use(p, variant, bias="8"):
    p.makepyfile(model=model_source(variant, bias))


def test_missing_baseline_fails_with_the_command_to_create_it(proj):
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([f"no fusion baseline for this test (fusion_baselines/test_net__"
                            f"test_net-*.yaml); create it with: {CMD}=new test_net.py::test_net"])


@pytest.mark.cpu
def test_create_then_pass_without_rewriting(proj):
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*fusion baselines*", "created fusion_baselines/test_net__test_net-"
                            "*.yaml (test_net.py::test_net)"])
    (path,) = baselines(proj.path).values()
    data = yaml.safe_load(path.read_text())
    assert data["schema_version"] == 4 and data["test"] == "test_net.py::test_net"
    assert set(data["provenance"]) == {"torch", "triton", "device", "date"}
    assert data["provenance"]["device"] == "cpu"
    (c,) = data["clusters"]
    assert c["ops"] == ["mul", "relu", "add"] and c["lines"] == "model.py:10-12"
    assert c["kernel"] == "elementwise" and data["kernels"] == 1
    t = c["traffic"]  # fused: read x (128 B) and the bias (32 B), write the result (128 B)
    assert t["fused_bytes"] == 288 and t["saved_bytes"] == t["unfused_bytes"] - 288 > 0
    before = path.read_bytes()
    r = run(proj)
    r.assert_outcomes(passed=1)
    assert baseline_notes(r.stdout.str()) == []
    r = run(proj, "--fusion-update-baselines=all")
    r.assert_outcomes(passed=1)
    assert path.read_bytes() == before  # nothing changed: no rewrite, no churn


REGRESSIONS = {
    "inplace": "`mul → relu → add` at model.py:10-12 shrank to `relu → add`, without `mul_`: "
               "aliasing, `.mul_()` (line 10) mutates its input in place",
    "split": "`mul → relu → add` at model.py:10-12 split into `mul → relu` (model.py:10-11) + "
             "`add → tanh` (model.py:12): `self.lin` (Linear) at model.py:12 now sits between "
             "`relu` (line 11) and `add` (line 12): fusion-advisor cannot fuse through it "
             "(it leaves this torch.nn layer to PyTorch's own kernel, which writes its result "
             "to memory)",
    "dag": "`mul → relu → add` at model.py:10-12 changed category: elementwise-chain → "
           "elementwise-dag",
    # Four ops now hold two of the three: not a shrink, and the reason is the barrier only.
    "moved": "`mul → relu → add` at model.py:10-12 no longer holds `mul`; its other ops now "
             "fuse in `relu → add → sigmoid → mul` (model.py:11-12): `torch.roll` at "
             "model.py:10 now sits between `mul` (line 10) and `relu` (line 11): fusion-advisor "
             "cannot fuse through it (its op registry has no Triton lowering for this call)",
    "newrej": "new rejection at model.py:13-14: reduction on `sigmoid → mul → softmax`, "
              "`softmax` (line 14) names no dims the kernel can reduce (dim=None)",
}


@pytest.mark.parametrize("variant", sorted(REGRESSIONS))
def test_each_regression_fails_with_a_readable_message(proj, variant):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    use(proj, variant)
    r = run(proj)
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert "fusion regression against fusion_baselines/test_net__test_net-" in out
    assert f"  - {REGRESSIONS[variant]}\n" in out
    assert f"accept it with: {CMD}=failing test_net.py::test_net" in out


@pytest.mark.cpu
def test_more_traffic_fails_and_tolerances_come_from_ini_then_marker(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    use(proj, "base", bias="4, 8")  # the bias grows from a row to a full matrix: +44% fused bytes
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["  - `mul → relu → add` at model.py:10-12 moves more traffic: 288 B "
                            "→ 384 B fused (+33%, tolerance 0%)"])
    proj.makeini("[pytest]\nfusion_traffic_tolerance = 0.5\n")
    run(proj).assert_outcomes(passed=1)
    proj.makepyfile(test_net=marked_test(traffic_tolerance=0.1))
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*(+33%, tolerance 10%)"])
    proj.makepyfile(test_net=marked_test(traffic_tolerance=0.1, checks="clusters"))
    run(proj).assert_outcomes(passed=1)  # traffic is not gated for this test


@pytest.mark.cpu
def test_improvement_passes_and_asks_to_ratchet(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    use(proj, "grown")
    r = run(proj)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([
        "test_net.py::test_net: improved",
        "    `mul → relu → add` at model.py:10-12 now fuses into the larger "
        "`mul → relu → add → sigmoid` at model.py:10-12",
        f"accept with: {CMD}=all test_net.py::test_net"])


def _two_tests(p):
    p.makepyfile(model2=model_source("base"),
                 test_net=marked_test("test_a") + "\n" + marked_test("test_b", "model2"))
    run(p, "--fusion-update-baselines").assert_outcomes(passed=2)
    return baselines(p.path)


@pytest.mark.cpu
def test_update_modes_new_failing_all(proj):
    files = _two_tests(proj)
    a, b = files["test_net.py::test_a"], files["test_net.py::test_b"]
    use(proj, "inplace")  # test_a regresses
    proj.makepyfile(model2=model_source("grown"))  # test_b improves
    before_a, before_b = a.read_bytes(), b.read_bytes()
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(failed=1, passed=1)
    assert (a.read_bytes(), b.read_bytes()) == (before_a, before_b)
    r = run(proj, "--fusion-update-baselines=failing")
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines(["updated fusion_baselines/*test_a*.yaml (test_net.py::test_a)",
                            "    `mul → relu → add` at model.py:10-12 shrank to `relu → add`*"
                            "aliasing, `.mul_()`*"])
    assert a.read_bytes() != before_a and b.read_bytes() == before_b
    assert [c["ops"] for c in yaml.safe_load(a.read_text())["clusters"]] == [["relu", "add"]]
    run(proj).assert_outcomes(passed=2)
    r = run(proj, "--fusion-update-baselines=all")
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines(["updated fusion_baselines/*test_b*.yaml (test_net.py::test_b)"])
    assert yaml.safe_load(b.read_text())["clusters"][0]["ops"] == ["mul", "relu", "add",
                                                                   "sigmoid"]


@pytest.mark.cpu
def test_stale_baselines_reported_never_for_skipped_or_deselected(proj):
    files = _two_tests(proj)
    stale_b = "stale fusion_baselines/*test_b*.yaml: test test_net.py::test_b no longer exists*"
    for args in (["-k", "test_a"], ["test_net.py::test_a"]):
        r = run(proj, *args)
        r.assert_outcomes(passed=1)
        assert "stale fusion_baselines" not in r.stdout.str()
    skipped_b = marked_test("test_b", "model2").replace("@pytest", "@pytest.mark.skip\n@pytest")
    proj.makepyfile(test_net=marked_test("test_a") + "\n" + skipped_b)
    r = run(proj)
    r.assert_outcomes(passed=1, skipped=1)
    assert "stale fusion_baselines" not in r.stdout.str()
    proj.makepyfile(test_net=marked_test("test_a"))
    r = run(proj)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([stale_b])
    assert files["test_net.py::test_b"].exists()
    r = run(proj, "--fusion-update-baselines=all")
    r.stdout.fnmatch_lines(["removed stale fusion_baselines/*test_b*.yaml (test test_net.py::"
                            "test_b no longer exists)"])
    assert not files["test_net.py::test_b"].exists() and files["test_net.py::test_a"].exists()


@pytest.mark.cpu
def test_report_files_terminal_table_and_step_summary(proj, monkeypatch):
    summary = proj.path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    r = run(proj, "--fusion-report=out/fusion")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*= fusion report =*",
                            "test * model * clusters * traffic saved * baseline * timings",
                            "test_net.py::test_net * Net * 1 * * B * pass * timings not "
                            "checked: no CUDA device",
                            "wrote *out/fusion.md", "wrote *out/fusion.json"])
    md = (proj.path / "out/fusion.md").read_text()
    assert md.startswith("## Fusion report") and "| test_net.py::test_net | Net | 1 |" in md
    doc = json.loads((proj.path / "out/fusion.json").read_text())
    (rec,) = doc["tests"]
    assert rec["nodeid"] == "test_net.py::test_net" and rec["status"] == "pass"
    (path,) = baselines(proj.path).values()
    saved = yaml.safe_load(path.read_text())["clusters"][0]["traffic"]["saved_bytes"]
    assert rec["saved_bytes"] == saved and doc["provenance"]["device"] == "cpu"
    text = summary.read_text()
    assert text.startswith("earlier step\n") and text.count("## Fusion report") == 1
    run(proj, "--fusion-report=out").assert_outcomes(passed=1)  # a folder gets fixed names
    assert (proj.path / "out/fusion-report.md").read_text() == md
    assert json.loads((proj.path / "out/fusion-report.json").read_text())["tests"] == doc["tests"]


def test_corrupt_or_foreign_baseline_fails_with_one_line_naming_the_file(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    shown = f"fusion_baselines/{path.name}"
    path.write_text("clusters: [unclosed\n")
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([f"corrupt fusion baseline {shown}: not valid YAML (*); fix it, "
                            "or delete it and rerun with --fusion-update-baselines=new"])
    path.write_text("schema_version: 99\ntest: test_net.py::test_net\n")
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([f"fusion baseline {shown} has schema_version 99, this plugin reads "
                            "1, 2, 3, 4 (regenerate it with --fusion-update-baselines=failing)"])
    r = run(proj, "--fusion-update-baselines=failing")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([f"replaced {shown} (test_net.py::test_net)"])
    assert yaml.safe_load(path.read_text())["schema_version"] == 4



@pytest.mark.cpu
def test_measured_fields_on_cpu_are_kept_but_not_checked(proj):
    proj.makeconftest(MEASURE_CONFTEST)
    write_timings(proj.path, SAMPLES)
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    (t,) = yaml.safe_load(path.read_text())["measured"]["NVIDIA H200 sm_90"]["clusters"]
    assert t["kernel_us"] == SAMPLES and t["regime"] == "dram-bound"
    (proj.path / "timings.json").unlink()  # this machine measures nothing: no CUDA
    use(proj, "base", bias="4, 8")  # a structural change, accepted below
    r = run(proj, "--fusion-report", "--fusion-update-baselines=failing")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["test_net.py::test_net * updated * timings not checked: no CUDA "
                            "device"])
    assert "NVIDIA H200 sm_90" in yaml.safe_load(path.read_text())["measured"]


def test_a_measurement_that_timed_nothing_is_not_stored(proj):
    """A GPU run where the model could not run (so no kernel was timed) adds no empty
    per-hardware entry that later runs would compare against."""
    proj.makeconftest(MEASURE_CONFTEST)
    write_timings(proj.path, [])
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    assert "measured" not in yaml.safe_load(path.read_text())
    write_timings(proj.path, SAMPLES)  # the same hook with timings does store them
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    assert "NVIDIA H200 sm_90" in yaml.safe_load(path.read_text())["measured"]


def test_measured_slowdown_fails_only_on_the_same_hardware(proj):
    proj.makeconftest(MEASURE_CONFTEST)
    write_timings(proj.path, SAMPLES)
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    write_timings(proj.path, [52.0, 52.5, 51.8, 52.2, 52.9, 51.9])
    r = run(proj)
    r.assert_outcomes(failed=1)
    # The fake GPU's eager ops keep their 100 µs: the kernel is slower relative to them.
    r.stdout.fnmatch_lines(["  - `mul → relu → add` at model.py:10-12 is slower on NVIDIA "
                            "H200 sm_90 relative to its eager ops: speedup 2.5× → 1.9× (0.40 → "
                            "0.52 of eager's time, +30%; kernel median 40.0 → 52.1 µs, eager "
                            "100.0 → 100.0 µs; tolerance 10%, p=*)"])
    proj.makepyfile(test_net=marked_test(timing_tolerance=0.5))
    run(proj).assert_outcomes(passed=1)
    proj.makepyfile(test_net=marked_test())
    # Median +19%, but half the runs match the baseline: noise, not a slower kernel.
    write_timings(proj.path, [39.7, 40.2, 55.0, 39.9, 56.0, 57.0])
    run(proj).assert_outcomes(passed=1)
    a100 = {"name": "NVIDIA A100", "capability": [8, 0]}
    write_timings(proj.path, [90.0] * 6, a100)
    r = run(proj, "--fusion-report")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["* pass * model 1.11× faster fused; timings not checked: no "
                            "baseline for NVIDIA A100 sm_80"])
    r = run(proj, "--fusion-update-baselines=new")
    r.stdout.fnmatch_lines(["measured fusion_baselines/*.yaml (test_net.py::test_net)"])
    (path,) = baselines(proj.path).values()
    assert set(yaml.safe_load(path.read_text())["measured"]) == {"NVIDIA A100 sm_80",
                                                                 "NVIDIA H200 sm_90"}


FIXTURE_TESTS = """\
import model

def test_helpers_pass(fusion_advisor):
    r = fusion_advisor.analyze(model.Net(), (4, 8))
    fusion_advisor.assert_fused(r, ["mul", "add"])
    fusion_advisor.assert_no_rejection(r, check="fan-out")
    fusion_advisor.assert_traffic_saved(r, at_least=128, fraction=0.3)
    assert r.kernels == 1 and r.hw_key is None and r.measurement is None
    fusion_advisor.check(r)

def test_wrong_order(fusion_advisor):
    fusion_advisor.assert_fused(fusion_advisor.analyze(model.Net, (4, 8)), ["relu", "mul"])

def test_rejected(fusion_advisor):
    import model2
    fusion_advisor.assert_no_rejection(fusion_advisor.analyze(model2.Net, "4,8"), "aliasing")

def test_saves_too_little(fusion_advisor):
    fusion_advisor.assert_traffic_saved(fusion_advisor.analyze(model.Net, (4, 8)), at_least=4096)

def test_bad_input(fusion_advisor):
    fusion_advisor.analyze(model.Net, (4, 7))
"""


@pytest.mark.cpu
def test_fixture_helpers_and_their_failure_messages(proj):
    proj.makepyfile(model2=model_source("inplace"), test_net=FIXTURE_TESTS)
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(passed=1, failed=4)
    r.stdout.fnmatch_lines([
        "E*AssertionError: `relu → mul` are not fused together.",
        "E*Net: 1 cluster",
        "E*cluster `mul → relu → add` (elementwise-chain) at model.py:10-12"])
    r.stdout.fnmatch_lines([
        "E*AssertionError: expected no `aliasing` rejection, found 1:",
        "E*aliasing on `mul_ → relu → add` at model2.py:10-12: `.mul_()` (line 10) mutates "
        "its input*"])
    r.stdout.fnmatch_lines(["E*fusion saves * B (* B), expected at least 4.0 KB (4096 B)"])
    r.stdout.fnmatch_lines(["fusion analysis failed: the example input does not fit the model*"])
    assert list(baselines(proj.path)) == ["test_net.py::test_helpers_pass"]


ONE_BASELINE = """\
import pytest
import model

@pytest.mark.fusion_check(model.Net, (4, 8))
def test_marked(fusion_advisor):
    assert fusion_advisor.result.kernels == 1
    fusion_advisor.check(fusion_advisor.result)

def test_twice(fusion_advisor):
    r = fusion_advisor.analyze(model.Net, (4, 8))
    fusion_advisor.check(r)
    fusion_advisor.check(r)
"""


def test_one_baseline_per_test(proj):
    proj.makepyfile(test_net=ONE_BASELINE)
    r = run(proj, "--fusion-update-baselines")
    r.assert_outcomes(failed=2)
    # Counted in the failure reports, not the short summary, whose truncation depends on
    # the CI environment variable.
    failures = [line for line in r.stdout.lines if not line.startswith("FAILED")
                and "a test has one fusion baseline: fusion_advisor.check() was" in line]
    assert len(failures) == 2


def test_marker_checks_before_the_body_so_a_regression_is_not_hidden(proj):
    proj.makepyfile(test_net=marked_test().replace(
        "    pass", "    assert fusion_advisor.result.kernels == 1").replace(
        "def test_net():", "def test_net(fusion_advisor):"))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    use(proj, "inplace")  # the body's assertion would fail too; the regression is reported
    r = run(proj, "--fusion-report=rep")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["  - `mul → relu → add` at model.py:10-12 shrank to*"])
    assert "assert 0 == 1" not in r.stdout.str()
    (rec,) = json.loads((proj.path / "rep.json").read_text())["tests"]
    assert rec["status"] == "regressed"


MISUSE = """\
import pytest
import model

@pytest.mark.fusion_check
def test_no_model(fusion_advisor):
    pass

@pytest.mark.fusion_check(model.Net, (4, 8), checks=["clusters", "speed"])
def test_bad_check():
    pass

@pytest.mark.fusion_check(42, (4, 8))
def test_bad_model():
    pass
"""


def test_marker_misuse_fails_that_test_with_one_line(proj):
    proj.makepyfile(test_net=MISUSE)
    r = run(proj)
    r.assert_outcomes(failed=3)
    r.stdout.fnmatch_lines_random([
        "fusion_advisor.result needs @pytest.mark.fusion_check(model, *inputs) on the test",
        "unknown fusion check speed: choose from clusters, rejections, traffic, timings",
        "fusion analysis failed: cannot build a model from 42: pass an nn.Module,*"])


@pytest.mark.cpu
def test_header_and_bad_update_mode(proj):
    """The header reads versions from package metadata (no torch import for it)."""
    r = run(proj)
    r.stdout.fnmatch_lines(["fusion-advisor: torch *, triton *, baselines fusion_baselines/, "
                            "target cpu"])
    r = run(proj, "--fusion-update-baselines=bogus")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*unknown mode 'bogus': use new, failing or all*"])
