"""The timing gate's CPU-checkable parts: ratios worded by direction, kernels judged against
their eager ops, the clock and timing shape a baseline records, and the `fusion_timing_*`
ini options (pytester runs with a fake GPU)."""

import json

import pytest
import yaml
from fusion_plugin_helpers import (
    MEASURE_CONFTEST,
    SAMPLES,
    baselines,
    marked_test,
    run,
    timed_record,
    write_timings,
)
from test_fusion_compare import BASE, H200, F, snap

import fusion_core
from pytest_fusion.compare import Tolerances, compare
from pytest_fusion.records import TestRecord
from pytest_fusion.report import table_lines, unjudged_line
from pytest_fusion.schema import from_data, to_data
from pytest_fusion.session import dump_yaml
from pytest_fusion.snapshot import ClusterTiming, Measured

pytestmark = pytest.mark.usefixtures("torch_warm")  # pytester runs below (tests/conftest.py)

# ---------------------------------------------------------------- wording


@pytest.mark.parametrize(
    ("speedup", "words"),
    [(0.69, "1.45× slower"), (1.45, "1.45× faster"), (1.0, "1.00× faster"), (0.5, "2.00× slower")],
)
def test_a_ratio_is_worded_by_its_direction(speedup, words):
    assert fusion_core.speedup_words(speedup) == words


def test_report_row_says_a_slower_model_is_slower():
    rec = timed_record(0.69)
    assert "model 1.45× slower fused; timings checked" in table_lines([rec])[1]
    assert "faster" not in table_lines([rec])[1]


# ---------------------------------------------------------------- clock and timing shape


def measured(kernel_us, clock="host", inputs=()):
    t = ClusterTiming(BASE.clusters[0].ident, tuple(kernel_us), regime="dram-bound")
    return {H200: Measured((t,), clock=clock, inputs=tuple(inputs))}


FAST = [40.0, 40.3, 39.8, 40.1, 40.6, 39.9]
SLOW = [52.0, 52.5, 51.8, 52.2, 52.9, 51.9]


def test_device_time_of_a_small_kernel_is_judged_host_time_is_not():
    """Under `min_bytes` a host-timed kernel measures its launch; device time has none."""
    small = Tolerances()  # default min_bytes: 1 MiB, and these clusters move 1 KiB
    for clock, judged in (("host", 0), ("device", 1)):
        r = compare(
            snap(*BASE.clusters, measured=measured(FAST, clock)),
            snap(*BASE.clusters, measured=measured(SLOW, clock)),
            small,
            hw_key=H200,
        )
        assert r.timings_judged == judged, (clock, r.timing_note)
    assert r.status == "regressed" and "is slower on" in r.regressions[0]


def test_another_clock_or_shape_is_said_not_judged():
    base = snap(*BASE.clusters, measured=measured(FAST, "host"))
    r = compare(base, snap(*BASE.clusters, measured=measured(SLOW, "device")), hw_key=H200)
    assert r.status == "pass" and r.timing_gap == "other-timing"
    assert r.timing_note == (
        f"timings not checked on {H200}: the baseline's timings are host "
        "time, this run's device time (record this run's with "
        "--fusion-update-baselines=new)"
    )
    bigger = measured(SLOW, inputs=["4096×1024 float32"])
    r = compare(base, snap(*BASE.clusters, measured=bigger), hw_key=H200)
    assert r.status == "pass" and r.timing_gap == "other-timing"
    assert (
        "the baseline's timings were taken at 64×1024 float32, this run's at 4096×1024 "
        "float32" in r.timing_note
    )
    # The analysis inputs written out are the same shape as none written: compared.
    same = measured(SLOW, inputs=["64×1024 float32"])
    r = compare(base, snap(*BASE.clusters, measured=same), Tolerances(min_bytes=0), hw_key=H200)
    assert r.status == "regressed" and r.timings_judged == 1


def test_baselines_record_clock_and_shape_and_schema_2_loads_as_host_time():
    """Since schema 3 a GPU's entry holds its clock and timing shape (the current schema,
    4, adds the compiled record)."""
    s = snap(*BASE.clusters, measured=measured(FAST, "device", ["4096×1024 float32"]))
    data = yaml.safe_load(dump_yaml(to_data(s)))
    assert data["schema_version"] == 4
    entry = data["measured"][H200]
    assert entry["clock"] == "device" and entry["inputs"] == ["4096×1024 float32"]
    assert from_data(data, "x.yaml") == s
    old = yaml.safe_load(dump_yaml(to_data(snap(*BASE.clusters, measured=measured(FAST)))))
    old["schema_version"] = 2
    del old["measured"][H200]["clock"], old["measured"][H200]["inputs"]
    back = from_data(old, "x.yaml").measured[H200]
    assert back.clock == "host" and back.inputs == () and back.clusters[0].kernel_us == tuple(FAST)
    old["measured"][H200]["clock"] = "wall"
    old["schema_version"] = 3
    with pytest.raises(
        Exception,
        match=r"`measured\[NVIDIA H200 sm_90\]\.clock` must be "
        r"device or host, got 'wall'",
    ):
        from_data(old, "x.yaml")


# ---------------------------------------------------------------- judged against eager

EAGER = [100.0, 100.4, 99.7, 100.2, 100.9, 99.8]


def scaled(samples, factor):
    return [t * factor for t in samples]


def paired(kernel_us, eager_us=(), model=((), ())):
    """Device timings of the first cluster (and the model: fused, eager samples)."""
    t = ClusterTiming(BASE.clusters[0].ident, tuple(kernel_us), tuple(eager_us),
                      regime="dram-bound")
    return {H200: Measured((t,), tuple(model[0]), tuple(model[1]), clock="device")}


def judged(base, cur, reference="eager"):
    return compare(snap(*BASE.clusters, measured=base), snap(*BASE.clusters, measured=cur),
                   Tolerances(timing_reference=reference), hw_key=H200)


def test_a_kernel_slowed_as_much_as_its_eager_ops_is_the_same():
    """A loaded GPU (or another card of the model) makes both 30% slower: no regression."""
    base, cur = paired(FAST, EAGER), paired(scaled(FAST, 1.3), scaled(EAGER, 1.3))
    r = judged(base, cur)
    assert r.status == "pass" and r.timings_judged == 1, r.messages
    # The same samples judged by their microseconds: a regression.
    assert judged(base, cur, "absolute").status == "regressed"


def test_a_kernel_slower_beside_the_same_eager_ops_fails_naming_both_figures():
    r = judged(paired(FAST, EAGER), paired(SLOW, EAGER))
    (msg,) = r.regressions
    assert msg == (
        f"`mul → relu → add` at {F}:15-17 is slower on {H200} relative to its eager ops: "
        "speedup 2.5× → 1.9× (0.40 → 0.52 of eager's time, +30%; kernel median 40.0 → 52.1 µs,"
        " eager 100.1 → 100.1 µs; tolerance 10%, p=0.001)"
    )
    r = judged(paired(SLOW, EAGER), paired(FAST, EAGER))
    assert r.status == "improved"
    assert r.improvements[0].startswith(
        f"`mul → relu → add` at {F}:15-17 is faster on {H200} relative to its eager ops: "
        "speedup 1.9× → 2.5× (0.52 → 0.40 of eager's time, -23%; kernel median 52.1 → 40.0 µs"
    )


def test_eager_ops_that_slowed_down_alone_make_the_kernel_faster_relative_to_them():
    # The ratio is the judged figure: eager 30% slower with the kernel unchanged is a
    # speedup gained, though no kernel got faster.
    r = judged(paired(FAST, EAGER), paired(FAST, scaled(EAGER, 1.3)))
    assert r.status == "improved" and "speedup 2.5× → 3.2×" in r.improvements[0]


def test_the_model_is_judged_against_the_eager_model():
    model = (FAST, EAGER)
    loaded = (scaled(FAST, 1.3), scaled(EAGER, 1.3))
    assert judged(paired(FAST, EAGER, model), paired(FAST, EAGER, loaded)).status == "pass"
    r = judged(paired(FAST, EAGER, model), paired(FAST, EAGER, (SLOW, EAGER)))
    (msg,) = r.regressions
    assert msg.startswith(
        f"the model with fused kernels is slower on {H200} relative to the eager model: "
        "speedup 2.5× → 1.9× (0.40 → 0.52 of eager's time, +30%; fused median 40.0 → 52.1 µs,"
        " eager 100.1 → 100.1 µs; tolerance 10%, p="
    )
    assert r.timings_judged == 2


@pytest.mark.parametrize(
    ("base_eager", "cur_eager"),
    [((), EAGER), (EAGER, ()), (EAGER, EAGER[:5]), (EAGER, [0.0] * 6)],
    ids=["none-in-baseline", "none-now", "another-count", "not-positive"],
)
def test_eager_samples_that_cannot_pair_fall_back_to_absolute_times(base_eager, cur_eager):
    r = judged(paired(FAST, base_eager), paired(SLOW, cur_eager))
    (msg,) = r.regressions
    assert msg == (
        f"`mul → relu → add` at {F}:15-17 is slower on {H200}: median 40.0 µs → 52.1 µs "
        "(+30%, tolerance 10%, p=0.001)"
    )
    # Absolute, a kernel and eager ops slowed alike is slower too: nothing to divide by.
    r = judged(paired(FAST, base_eager), paired(scaled(FAST, 1.3), cur_eager))
    assert r.status == "regressed" and "relative to" not in r.regressions[0]


def test_the_absolute_setting_judges_the_microseconds_as_before():
    r = judged(paired(FAST, EAGER), paired(SLOW, scaled(EAGER, 1.3)), "absolute")
    (msg,) = r.regressions
    assert msg == (
        f"`mul → relu → add` at {F}:15-17 is slower on {H200}: median 40.0 µs → 52.1 µs "
        "(+30%, tolerance 10%, p=0.001)"
    )
    assert judged(paired(FAST, EAGER), paired(SLOW, scaled(EAGER, 1.3))).status == "pass"


# ---------------------------------------------------------------- the summary line


def rec(gap, judged=0, hw=H200):
    return TestRecord(f"t.py::{gap}", "pass", hw_key=hw, timings_judged=judged, timing_gap=gap)


def test_unjudged_line_counts_each_reason_with_the_device_name():
    records = [rec("no-baseline")] * 5 + [rec("launch-bound")] * 2
    assert unjudged_line(records) == (
        "no timing judged on NVIDIA H200: 5 tests have no baseline for this GPU (record with "
        "`--fusion-update-baselines=new`), 2 have only launch-bound kernels"
    )
    assert unjudged_line([rec("launch-bound"), rec("no-baseline")]) == (
        "no timing judged on NVIDIA H200: 1 test has no baseline for this GPU (record with "
        "`--fusion-update-baselines=new`), 1 has only launch-bound kernels"
    )
    assert unjudged_line(records + [rec("", judged=1)]) == ""  # one judged: nothing to say
    cpu = [rec("no-cuda", hw=None)]
    assert unjudged_line(cpu) == ""  # a CPU run says nothing unless timings are required
    assert unjudged_line(cpu, required=True) == (
        "no timing judged: 1 test was not timed (no CUDA device)"
    )


# ---------------------------------------------------------------- pytester runs

# The fake GPU also notes the shape it timed (the analysis it was given).
SHAPE_CONFTEST = (
    MEASURE_CONFTEST
    + """
_measure = pytest_fusion_measure

def pytest_fusion_measure(analysis, config):
    pathlib.Path(config.rootpath, "timed_at.txt").write_text(str(analysis.inputs[0]))
    return _measure(analysis, config)
"""
)


def test_timing_inputs_are_timed_and_recorded_and_a_new_shape_is_said(proj):
    proj.makeconftest(SHAPE_CONFTEST)
    write_timings(proj.path, SAMPLES)
    proj.makepyfile(test_net=marked_test(timing_inputs=[(64, 8)]))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    assert (proj.path / "timed_at.txt").read_text() == "64×8 float32"
    (path,) = baselines(proj.path).values()
    data = yaml.safe_load(path.read_text())
    assert data["inputs"] == ["4×8 float32"]  # the analysis keeps its own shape
    assert data["measured"]["NVIDIA H200 sm_90"]["inputs"] == ["64×8 float32"]
    run(proj).assert_outcomes(passed=1)
    proj.makepyfile(test_net=marked_test(timing_inputs=[(128, 8)]))
    write_timings(proj.path, [90.0] * 6)  # slower, but at another shape: not judged
    r = run(proj, "--fusion-report")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(
        [
            "* timings not checked on NVIDIA H200 sm_90: the baseline's "
            "timings were taken at 64×8 float32, this run's at 128×8 float32 "
            "(record this run's with --fusion-update-baselines=new)"
        ]
    )
    r = run(proj, "--fusion-update-baselines=new")
    r.stdout.fnmatch_lines(["measured fusion_baselines/*.yaml (test_net.py::test_net)"])
    entry = yaml.safe_load(path.read_text())["measured"]["NVIDIA H200 sm_90"]
    assert entry["inputs"] == ["128×8 float32"] and entry["clusters"][0]["kernel_us"] == [90.0] * 6


def test_bad_timing_inputs_fail_the_test_in_one_line(proj):
    proj.makeconftest(MEASURE_CONFTEST)
    write_timings(proj.path, SAMPLES)
    proj.makepyfile(test_net=marked_test(timing_inputs="64,8"))
    r = run(proj)
    r.assert_outcomes(failed=1)
    assert (
        "\n@pytest.mark.fusion_check(timing_inputs=...) must be a list of inputs like the "
        "example inputs, e.g. [(16384, 1024)], got '64,8'\n"
    ) in r.stdout.str()
    proj.makepyfile(test_net=marked_test(timing_inputs=[(64, 7)]))  # the model rejects it
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*@pytest.mark.fusion_check(timing_inputs=...): *"])
    assert "Traceback" not in r.stdout.str()


TWO_TESTS = """\
import pytest
import model

@pytest.mark.fusion_check(model.Net, (4, 8))
def test_no_baseline_here():
    pass

@pytest.mark.fusion_check(model.Net, (4, 8), timing_min_bytes=1e9)
def test_launch_bound():
    pass
"""
REQUIRED = (
    "no timing judged on NVIDIA H200: 1 test has no baseline for this GPU (record "
    "with `--fusion-update-baselines=new`), 1 has only launch-bound kernels"
)


def test_require_timings_fails_a_gpu_run_that_judged_nothing(proj):
    proj.makeconftest(MEASURE_CONFTEST)
    proj.makepyfile(test_net=TWO_TESTS)
    write_timings(proj.path, SAMPLES)
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=2)
    path = baselines(proj.path)["test_net.py::test_no_baseline_here"]
    data = yaml.safe_load(path.read_text())
    del data["measured"]  # recorded before this GPU was
    path.write_text(json.dumps(data))
    r = run(proj)  # not required: passes, and the summary says nothing was judged
    r.assert_outcomes(passed=2)
    assert r.ret == pytest.ExitCode.OK
    r.stdout.fnmatch_lines([REQUIRED])
    assert "ERROR" not in r.stdout.str()
    for args in (("-o", "fusion_require_timings=true"), ("--fusion-require-timings",)):
        r = run(proj, *args)
        r.assert_outcomes(passed=2)
        assert r.ret == pytest.ExitCode.TESTS_FAILED
        r.stdout.fnmatch_lines([f"ERROR: {REQUIRED}"])
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=2)
    r = run(proj, "--fusion-require-timings")  # one test judges its timings now
    r.assert_outcomes(passed=2)
    assert r.ret == pytest.ExitCode.OK and "no timing judged" not in r.stdout.str()


@pytest.mark.cpu
def test_require_timings_fails_a_run_without_cuda(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    r = run(proj)
    assert r.ret == pytest.ExitCode.OK and "no timing judged" not in r.stdout.str()
    r = run(proj, "--fusion-require-timings")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(["ERROR: no timing judged: 1 test was not timed (no CUDA device)"])


# The fake GPU's eager ops (each cluster's and the model's) take `eager_us` of timings.json.
EAGER_CONFTEST = (
    MEASURE_CONFTEST
    + """
_measure = pytest_fusion_measure

def pytest_fusion_measure(analysis, config):
    result = _measure(analysis, config)
    eager = json.loads(pathlib.Path(config.rootpath, "timings.json").read_text())["eager_us"]
    for entry in (*result["clusters"], result["model"]):
        entry["eager_us"] = eager
    return result
"""
)


def write_pair(root, kernel_us, eager_us):
    write_timings(root, kernel_us)
    t = json.loads((root / "timings.json").read_text())
    (root / "timings.json").write_text(json.dumps({**t, "eager_us": eager_us}))


def test_timing_reference_option_picks_what_a_kernel_is_judged_against(proj):
    proj.makeconftest(EAGER_CONFTEST)
    write_pair(proj.path, SAMPLES, EAGER)
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    write_pair(proj.path, scaled(SAMPLES, 1.3), scaled(EAGER, 1.3))  # a loaded GPU
    run(proj).assert_outcomes(passed=1)
    r = run(proj, "-o", "fusion_timing_reference=absolute")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(
        [
            "  - `mul → relu → add` at model.py:10-12 is slower on NVIDIA H200 sm_90: median "
            "40.0 µs → 52.1 µs (+30%, tolerance 10%, p=*)"
        ]
    )
    write_pair(proj.path, scaled(SAMPLES, 1.3), EAGER)  # the kernel alone got slower
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(
        [
            "  - `mul → relu → add` at model.py:10-12 is slower on NVIDIA H200 sm_90 relative "
            "to its eager ops: speedup 2.5× → 1.9× (0.40 → 0.52 of eager's time, +30%; kernel "
            "median 40.0 → 52.1 µs, eager 100.1 → 100.1 µs; tolerance 10%, p=*)"
        ]
    )
    r = run(proj, "-o", "fusion_timing_reference=speedup")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(
        ["ERROR: ini option fusion_timing_reference must be one of eager, absolute, got 'speedup'"]
    )


def test_measured_clock_defaults_to_host_for_hooks_that_do_not_say():
    from pytest_fusion.measure import to_measured

    clusters = BASE.clusters
    _, m = to_measured(
        {
            "device": {"name": "X"},
            "clusters": [{"index": 0, "kernel_us": [1.0, 2.0, 3.0], "kernel_host_us": [9.0]}],
        },
        clusters,
    )
    assert m.clock == "host" and m.clusters[0].kernel_host_us == (9.0,)
    _, m = to_measured(
        {"clock": "device", "clusters": [{"index": 1, "kernel_us": [1.0]}]},
        clusters,
        ("8×8 float32",),
        {1: 0},
    )
    assert m.clock == "device" and m.inputs == ("8×8 float32",)
    assert [t.cluster for t in m.clusters] == [clusters[0].ident]


def test_the_patched_models_launch_count_reaches_the_report_row_not_the_baseline():
    """fusion_core.measure's `kernels_per_forward` gives the host-bound reason its count; the
    count is this run's only: a Measured with it equals one without (nothing to store)."""
    from dataclasses import replace

    from pytest_fusion.measure import to_measured

    model = {"fused_us": [1.0] * 3, "eager_us": [2.0] * 3,
             "kernels_per_forward": {"eager": 275, "fused": 152, "compiled": 101}}
    _, m = to_measured({"clock": "device", "model": model}, BASE.clusters)
    assert m.model_launches == 152
    _, without = to_measured({"clock": "device", "model": {**model, "kernels_per_forward": {}}},
                             BASE.clusters)
    assert without.model_launches is None and m == without
    snap = replace(BASE, measured={"NVIDIA H200 sm_90": m})
    assert "152" not in str(to_data(snap))
