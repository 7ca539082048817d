"""The analysis target (`device=`, ini `fusion_device`): what a baseline describes.

A convolution adds its bias in a pass of its own off the CPU, so analysed for cuda the
squeeze-excite block of `verdict_project` gains an `add → relu` cluster (the reducing
conv's bias and its ReLU). Analysing for cuda needs no GPU: these runs are on the CPU.
"""

import pytest
import yaml
from fusion_plugin_helpers import MEASURE_CONFTEST, SAMPLES, baselines, run, write_timings
from verdict_project import TESTS, project

pytestmark = pytest.mark.usefixtures("torch_warm")

CONV = "test_blocks.py::test_conv"
CUDA_MARKER = "@pytest.mark.fusion_check(blocks.Conv, (2, 16, 8, 8), device=\"cuda\")"


@pytest.fixture
def blocks(pytester, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makeini("[pytest]\n")
    project(pytester)
    return pytester


def _conv_as(p, device: str | None) -> None:
    """The Conv test with every check (timings included) for `device` (None: the ini's)."""
    marker = "@pytest.mark.fusion_check(blocks.Conv, (2, 16, 8, 8), checks=CHECKS)"
    assert marker in TESTS
    new = "@pytest.mark.fusion_check(blocks.Conv, (2, 16, 8, 8)" + (
        f", device={device!r})" if device else ")")
    p.makepyfile(test_blocks=TESTS.replace(marker, new))


def _ops(path) -> list[list[str]]:
    return [c["ops"] for c in yaml.safe_load(path.read_text())["clusters"]]


@pytest.mark.cpu
def test_a_cuda_target_records_the_conv_bias_cluster_on_a_cpu_machine(blocks):
    # The measure hook would time anything it is asked to: for a cuda target it is not
    # asked on a machine without CUDA, for the cpu target it is.
    blocks.makeconftest(MEASURE_CONFTEST)
    write_timings(blocks.path, SAMPLES)
    _conv_as(blocks, "cuda")
    run(blocks, CONV, "--fusion-update-baselines").assert_outcomes(passed=1)
    cuda = yaml.safe_load(baselines(blocks.path)[CONV].read_text())
    assert cuda["target"] == "cuda" and ["add", "relu"] in _ops(baselines(blocks.path)[CONV])
    assert "measured" not in cuda  # nothing here runs what a cuda baseline describes

    _conv_as(blocks, None)  # the ini's default target: cpu
    run(blocks, CONV, "--fusion-update-baselines=failing").assert_outcomes(passed=1)
    cpu = yaml.safe_load(baselines(blocks.path)[CONV].read_text())
    assert cpu["target"] == "cpu" and ["add", "relu"] not in _ops(baselines(blocks.path)[CONV])
    assert "NVIDIA H200 sm_90" in cpu["measured"]  # the hook's (fake) timings, as before


@pytest.mark.cpu
def test_a_baseline_for_another_target_fails_with_one_line_and_the_fix(blocks):
    _conv_as(blocks, "cuda")
    run(blocks, CONV, "--fusion-update-baselines").assert_outcomes(passed=1)
    path = baselines(blocks.path)[CONV]
    shown = f"fusion_baselines/{path.name}"
    _conv_as(blocks, None)
    r = run(blocks, CONV)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([
        f"fusion baseline {shown} describes the cuda target, this run analyses for cpu: "
        "analyse for cuda (ini fusion_device, or device= on the marker or in analyze()), or "
        f"record it for cpu with: pytest --fusion-update-baselines=failing -o fusion_device=cpu "
        f"{CONV}"])
    out = r.stdout.str()
    assert "fusion regression" not in out and "no longer fuses" not in out
    run(blocks, CONV, "-o", "fusion_device=cuda").assert_outcomes(passed=1)  # the ini's target
    r = run(blocks, CONV, "--fusion-update-baselines=failing", "-o", "fusion_device=cpu")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([f"replaced {shown} ({CONV})", "    target cuda → cpu"])
    assert yaml.safe_load(path.read_text())["target"] == "cpu"


@pytest.mark.cpu
def test_the_header_names_the_target_and_old_baselines_read_as_cpu(blocks):
    _conv_as(blocks, None)
    run(blocks, CONV, "--fusion-update-baselines").assert_outcomes(passed=1)
    path = baselines(blocks.path)[CONV]
    text = path.read_text()
    assert "\ntarget: cpu\n" in text
    path.write_text(text.replace("target: cpu\n", ""))  # as written before targets existed
    r = run(blocks, CONV, "-o", "fusion_device=cpu")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["fusion-advisor: torch *, baselines fusion_baselines/, target cpu"])
    r = run(blocks, CONV, "-o", "fusion_device=cuda")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["fusion-advisor: torch *, target cuda",
                            "*describes the cpu target, this run analyses for cuda*"])


FIXTURE = """\
import blocks


def test_fixture_target(fusion_advisor):
    r = fusion_advisor.analyze(blocks.Conv(), (2, 16, 8, 8), device="cuda")
    assert r.target == "cuda" and ("add", "relu") in [c.ops for c in r.snapshot.clusters]
    assert r.hw_key is None and r.measurement is None  # no CUDA here: nothing timed
    fusion_advisor.check(r)


def test_fixture_bad_target(fusion_advisor):
    fusion_advisor.analyze(blocks.Conv(), (2, 16, 8, 8), device="cuda:0")
"""


@pytest.mark.cpu
def test_bad_targets_fail_with_one_line_naming_the_allowed_values(blocks):
    blocks.makeini("[pytest]\nfusion_device = gpu\n")
    r = run(blocks, CONV)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*ini option fusion_device must be cpu or cuda, got 'gpu'"])
    blocks.makeini("[pytest]\n")
    _conv_as(blocks, "gpu")
    blocks.makepyfile(test_fixture=FIXTURE)
    r = run(blocks, CONV, "test_fixture.py", "--fusion-update-baselines=new")
    r.assert_outcomes(passed=1, failed=2)
    r.stdout.fnmatch_lines_random([
        "fusion_check(device=...) must be cpu or cuda, got 'gpu'",
        "fusion_advisor.analyze(device=...) must be cpu or cuda, got 'cuda:0'"])
    assert list(baselines(blocks.path)) == ["test_fixture.py::test_fixture_target"]
