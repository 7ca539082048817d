"""Baseline data model and comparison (pytest_fusion.snapshot / compare) on hand-built data."""

import re
from dataclasses import replace

import pytest
import yaml

from pytest_fusion.baseline_names import baseline_name, legacy_baseline_name
from pytest_fusion.compare import NO_CUDA, Tolerances, compare
from pytest_fusion.locate import locate
from pytest_fusion.schema import from_data, to_data
from pytest_fusion.session import dump_yaml
from pytest_fusion.snapshot import (
    BaselineError,
    ClusterRec,
    ClusterTiming,
    Measured,
    OpRec,
    RejectionRec,
    Snapshot,
)
from pytest_fusion.snapshot_build import relative_file

F = "examples/example_net.py"
H200 = "NVIDIA H200 sm_90"


def cluster(ops, lines, nodes=None, category="elementwise-chain", unfused=3072, fused=1024,
            kernel="elementwise"):
    return ClusterRec(tuple(ops), f"{F}:{lines}", category, tuple(nodes or ops), unfused, fused,
                      kernel)


def snap(*clusters, rejections=(), measured=None, inputs=("64×1024 float32",)):
    return Snapshot("t.py::t", "ExampleNet", inputs, tuple(clusters), tuple(rejections),
                    {"torch": "2.13"}, measured or {})


def with_ops(s, *ops):
    """`s` with an op index: each op "node op line" where it is in the current graph."""
    index = tuple(OpRec(node, op, "", op, "compute", "", f"{F}:{line}")
                  for node, op, line in (o.split() for o in ops))
    return replace(s, op_index=index)


BASE = snap(cluster(["mul", "relu", "add"], "15-17"),
            cluster(["gelu", "sigmoid", "mul"], "20-22", nodes=["gelu", "sigmoid", "mul_1"]))
FANOUT = RejectionRec("fan-out", ("mul", "relu", "add"), f"{F}:15-17", ("mul", "relu", "add"),
                      ("relu",), "`relu` is also used by `layer_norm` outside the group; "
                      "dropped relu and retried")


def test_identical_snapshots_pass():
    r = compare(BASE, BASE)
    assert r.status == "pass" and r.regressions == r.improvements == ()
    assert r.timing_note == NO_CUDA


def test_lost_cluster_names_the_rejection_that_covers_it():
    cur = snap(BASE.clusters[1], rejections=[FANOUT])
    r = compare(BASE, cur)
    assert r.regressions == (f"`mul → relu → add` at {F}:15-17 no longer fuses: fan-out, "
                             "`relu` is also used by `layer_norm` outside the group",)
    assert r.status == "regressed"


def test_lost_cluster_without_a_rejection_still_fails():
    cur = with_ops(snap(BASE.clusters[1]), "mul mul 15", "relu relu 16", "add add 17")
    (msg,) = compare(BASE, cur).regressions
    assert msg.startswith(f"`mul → relu → add` at {F}:15-17 no longer fuses: no rejection names")


def test_ops_that_left_the_model_say_where_they_were_recorded():
    (msg,) = compare(BASE, snap(BASE.clusters[1])).regressions
    assert msg == (f"`mul → relu → add`: its ops left the model (at {F}:15-17 "
                   "when the baseline was recorded)")


def test_split_lists_the_parts():
    cur = with_ops(snap(cluster(["mul", "relu"], "15-16"), cluster(["add", "tanh"], "17-18"),
                        BASE.clusters[1]), "mul mul 15", "relu relu 16", "add add 17")
    (msg,) = compare(BASE, cur).regressions
    assert msg == (f"`mul → relu → add` at {F}:15-17 split into `mul → relu` ({F}:15-16) + "
                   f"`add → tanh` ({F}:17-18)")


def test_category_change_fails():
    cur = snap(replace(BASE.clusters[0], category="elementwise-dag"), BASE.clusters[1])
    assert compare(BASE, cur).regressions == (
        f"`mul → relu → add` at {F}:15-17 changed category: elementwise-chain → "
        "elementwise-dag",)


def test_more_traffic_fails_beyond_tolerance_only():
    cur = snap(replace(BASE.clusters[0], fused_bytes=1280), BASE.clusters[1])  # +25%
    (msg,) = compare(BASE, cur).regressions
    assert "moves more traffic: 1.0 KB → 1.2 KB fused (+25%, tolerance 0%)" in msg
    assert compare(BASE, cur, Tolerances(traffic=0.3)).status == "pass"
    assert compare(BASE, cur, checks=("clusters", "rejections")).status == "pass"


def test_less_traffic_and_new_cluster_are_improvements():
    cur = snap(replace(BASE.clusters[0], fused_bytes=512), BASE.clusters[1],
               cluster(["tanh", "mul", "softmax"], "25-27", nodes=["tanh", "mul_2", "softmax"],
                       category="single-reduction-boundary"))
    r = compare(BASE, cur)
    assert r.status == "improved" and r.regressions == ()
    assert any("moves less traffic" in m for m in r.improvements)
    assert f"new cluster `tanh → mul → softmax` (single-reduction-boundary) at {F}:25-27" \
        in r.improvements


def test_merged_clusters_are_an_improvement_not_a_split():
    merged = cluster(["mul", "relu", "add", "gelu", "sigmoid", "mul"], "15-22",
                     nodes=["mul", "relu", "add", "gelu", "sigmoid", "mul_1"])
    r = compare(BASE, snap(merged))
    assert r.regressions == () and len(r.improvements) == 2
    assert all("now fuses into the larger" in m for m in r.improvements)


def test_moved_lines_are_no_change():
    """Lines are information: a cluster that only moved down the file is the same cluster."""
    cur = snap(replace(BASE.clusters[0], lines=f"{F}:18-20"), BASE.clusters[1])
    r = compare(BASE, cur)
    assert r.status == "pass" and r.changes == ()
    scoped = snap(*(replace(c, module="", function="forward") for c in BASE.clusters))
    moved = snap(replace(scoped.clusters[0], lines=f"{F}:18-20"), scoped.clusters[1])
    r = compare(scoped, moved)
    assert r.status == "pass" and r.changes == ()
    assert r.pairs == tuple((c.ident, c.ident) for c in scoped.clusters)


def test_a_cluster_that_moved_to_another_module_is_a_change():
    base = snap(replace(BASE.clusters[0], module="mlp", function="forward"))
    cur = snap(replace(BASE.clusters[0], module="ffn", function="forward"))
    r = compare(base, cur)
    assert r.status == "changed"
    assert r.changes == ("`mul → relu → add` moved from mlp.forward to ffn.forward",)


def test_new_rejection_fails_and_a_gone_one_is_a_change():
    other = RejectionRec("shapes", ("add", "sum"), f"{F}:30-31", ("add_9", "sum"), ("sum",),
                         "`sum` reduces an axis the group does not end with")
    assert compare(BASE, snap(*BASE.clusters, rejections=[other])).regressions == (
        f"new rejection at {F}:30-31: shapes on `add → sum`, `sum` reduces an axis the group "
        "does not end with",)
    gone = compare(snap(*BASE.clusters, rejections=[other]), BASE)
    assert gone.notes == (f"rejection gone: shapes on `add → sum` (at {F}:30-31 when recorded)",)
    assert gone.status == "changed"
    kept = with_ops(BASE, "add_9 add 32", "sum sum 33")  # the ops moved down, unrejected
    assert compare(snap(*BASE.clusters, rejections=[other]), kept).notes == (
        f"rejection gone: shapes on `add → sum` at {F}:32-33",)


def test_duplicate_clusters_pair_by_ordinal():
    """microgpt has two identical attention clusters: losing one is one regression."""
    twin = cluster(["mul", "masked_fill", "softmax"], "31-34", nodes=["mul_3", "mf", "sm"])
    twin2 = replace(twin, nodes=("mul_7", "mf_1", "sm_1"))
    cur = with_ops(snap(twin), "mul_7 mul 35", "mf_1 masked_fill 36", "sm_1 softmax 37")
    r = compare(snap(twin, twin2), cur)
    assert len(r.regressions) == 1 and f"at {F}:35-37 no longer fuses" in r.regressions[0]


def test_lost_kernel_fails_with_the_codegen_error_and_a_new_one_improves():
    broken = replace(BASE.clusters[0], kernel=None,
                     kernel_error="LoweringError: no rule for `relu`")
    cur = snap(broken, BASE.clusters[1])
    assert cur.kernels == 1 and BASE.kernels == 2
    assert compare(BASE, cur).regressions == (
        f"`mul → relu → add` at {F}:15-17 no longer gets a kernel: LoweringError: no rule for "
        "`relu`",)
    assert compare(cur, BASE).improvements == (
        f"`mul → relu → add` at {F}:15-17 now gets a kernel (elementwise)",)


def test_changed_inputs_fail_with_one_message():
    r = compare(BASE, snap(*BASE.clusters, inputs=("32×1024 float32",)))
    assert r.regressions == ("the example inputs changed (64×1024 float32 → 32×1024 float32): "
                             "the baseline no longer applies",)


# ---------------------------------------------------------------- measured fields

def timed(kernel_us, model_us=(), regime=None):
    t = ClusterTiming(BASE.clusters[0].ident, tuple(kernel_us), regime=regime)
    return {H200: Measured((t,), tuple(model_us))}


SLOW = [52.0, 52.5, 51.8, 52.2, 52.9, 51.9]
# These clusters move a few hundred bytes, far under the default `min_bytes`: judge them anyway.
TIMED = Tolerances(min_bytes=0)
BASE_T = [40.0, 40.3, 39.8, 40.1, 40.6, 39.9]


def test_timings_not_checked_without_cuda():
    r = compare(snap(*BASE.clusters, measured=timed(BASE_T)),
                snap(*BASE.clusters), hw_key=None)
    assert r.status == "pass" and r.timing_note == NO_CUDA


def test_timings_on_other_hardware_are_not_compared():
    base = snap(*BASE.clusters, measured=timed(BASE_T))
    cur = snap(*BASE.clusters, measured={"NVIDIA A100 sm_80": timed(SLOW)[H200]})
    r = compare(base, cur, hw_key="NVIDIA A100 sm_80")
    assert r.status == "pass"
    assert r.timing_note == "timings not checked: no baseline for NVIDIA A100 sm_80"


def test_significant_slowdown_on_same_hardware_fails():
    base = snap(*BASE.clusters, measured=timed(BASE_T, BASE_T))
    cur = snap(*BASE.clusters, measured=timed(SLOW, BASE_T))
    (msg,) = compare(base, cur, TIMED, hw_key=H200).regressions
    assert msg.startswith(f"`mul → relu → add` at {F}:15-17 is slower on {H200}: median "
                          "40.0 µs → 52.1 µs (+30%, tolerance 10%, p=")
    assert compare(base, cur, Tolerances(timing=0.5, min_bytes=0), hw_key=H200).status == "pass"
    assert compare(base, cur, TIMED, checks=("clusters",), hw_key=H200).status == "pass"


def test_noisy_timings_within_spread_pass():
    base = snap(*BASE.clusters, measured=timed([40, 80, 45, 70, 42, 90]))
    cur = snap(*BASE.clusters, measured=timed([48, 85, 44, 95, 60, 75]))
    assert compare(base, cur, TIMED, hw_key=H200).status == "pass"


def test_launch_bound_timings_are_not_judged():
    # A 4 µs kernel timed at 19 µs on a loaded host: the host's launch rate moved, not the kernel.
    base = snap(*BASE.clusters, measured=timed(BASE_T, BASE_T, regime="launch-bound"))
    cur = snap(*BASE.clusters, measured=timed(SLOW, SLOW, regime="launch-bound"))
    r = compare(base, cur, TIMED, hw_key=H200)
    assert r.status == "pass"
    assert r.timing_note == (f"timings not checked on {H200}: 2 launch-bound timings not "
                             "judged: they measure the host's launch rate, not the kernel")
    # The same slowdown of a kernel that is not launch-bound fails.
    cur = snap(*BASE.clusters, measured=timed(SLOW, SLOW, regime="dram-bound"))
    r = compare(base, cur, TIMED, hw_key=H200)
    assert r.status == "pass"  # the baseline's timing was launch-bound: still not judged
    base = snap(*BASE.clusters, measured=timed(BASE_T, BASE_T, regime="dram-bound"))
    r = compare(base, cur, TIMED, hw_key=H200)
    assert r.status == "regressed" and len(r.regressions) == 2
    assert r.timing_note == f"timings checked on {H200} (2 compared)"


def test_a_regrouped_model_of_launch_bound_kernels_is_not_judged():
    # The cluster grew (`mul → relu → add` → `… → sigmoid`): no pair of clusters, but every
    # kernel on both sides is launch-bound, so the model's time is the host's launch rate.
    grown = replace(BASE.clusters[0], ops=(*BASE.clusters[0].ops, "sigmoid"))
    grown_t = ClusterTiming(grown.ident, tuple(SLOW), regime="launch-bound")
    base = snap(*BASE.clusters, measured=timed(BASE_T, BASE_T, regime="launch-bound"))
    cur = snap(grown, measured={H200: Measured((grown_t,), tuple(SLOW))})
    r = compare(base, cur, TIMED, hw_key=H200)
    assert not any("the model with fused kernels" in m for m in r.regressions)
    assert r.timing_note.startswith(f"timings not checked on {H200}: 1 launch-bound")
    # A kernel on either side that is not launch-bound: the model is judged.
    cur = snap(grown, measured={H200: Measured((replace(grown_t, regime="dram-bound"),),
                                               tuple(SLOW))})
    r = compare(base, cur, TIMED, hw_key=H200)
    assert any(m.startswith(f"the model with fused kernels is slower on {H200}")
               for m in r.regressions)


def test_kernels_moving_little_data_are_not_judged_by_default():
    # Under 1 MiB a kernel finishes within its launch on any GPU: its time follows the host.
    base = snap(*BASE.clusters, measured=timed(BASE_T, BASE_T, regime="dram-bound"))
    cur = snap(*BASE.clusters, measured=timed(SLOW, SLOW, regime="dram-bound"))
    assert BASE.clusters[0].fused_bytes < Tolerances().min_bytes
    r = compare(base, cur, hw_key=H200)
    assert r.status == "pass" and r.timing_note.startswith(f"timings not checked on {H200}: 2 ")
    assert compare(base, cur, Tolerances(min_bytes=BASE.clusters[0].fused_bytes),
                   hw_key=H200).status == "regressed"


def test_faster_model_is_an_improvement():
    base = snap(*BASE.clusters, measured=timed(BASE_T, SLOW))
    cur = snap(*BASE.clusters, measured=timed(BASE_T, BASE_T))
    r = compare(base, cur, TIMED, hw_key=H200)
    assert r.status == "improved"
    assert r.improvements[0].startswith(f"the model with fused kernels is faster on {H200}")


# ---------------------------------------------------------------- YAML data

def test_round_trip_through_yaml_keeps_everything():
    broken = replace(BASE.clusters[1], kernel=None, kernel_error="LoweringError: x")
    s = snap(BASE.clusters[0], broken, rejections=[FANOUT], measured=timed(BASE_T, SLOW))
    back = from_data(yaml.safe_load(dump_yaml(to_data(s))), "x.yaml")
    assert back == s and back.provenance == s.provenance


def test_yaml_has_stable_key_order_and_version():
    text = dump_yaml(to_data(BASE))
    keys = [line.split(":")[0] for line in text.splitlines() if line and line[0] not in " -"]
    assert keys == ["schema_version", "test", "model", "inputs", "target", "provenance",
                    "kernels", "clusters", "rejections"]
    assert dump_yaml(to_data(BASE)) == text


@pytest.mark.parametrize("data, words", [
    ("- just a list", "not a YAML mapping"),
    ({"schema_version": 1, "test": "t", "model": "M", "inputs": []}, "missing `clusters`"),
    ({"schema_version": 1, "test": "t", "model": "M", "inputs": [], "rejections": [],
      "clusters": [{"ops": ["mul"], "lines": "a:1", "category": "c", "nodes": ["mul"],
                    "traffic": {"unfused_bytes": "many", "fused_bytes": 1}}]},
     "`clusters[0].traffic.unfused_bytes` has the wrong type (str)"),
])
def test_corrupt_data_names_file_and_field(data, words):
    with pytest.raises(BaselineError) as e:
        from_data(yaml.safe_load(data) if isinstance(data, str) else data, "fb/x.yaml")
    assert "corrupt fusion baseline fb/x.yaml" in str(e.value) and words in str(e.value)
    assert "\n" not in str(e.value)


def test_foreign_schema_version_is_named():
    with pytest.raises(BaselineError, match=r"fb/x.yaml has schema_version 7, this plugin "
                                            r"reads 1, 2, 3, 4"):
        from_data({"schema_version": 7}, "fb/x.yaml")


def test_baseline_names_are_safe_and_unique():
    a = baseline_name("tests/test_a.py::TestX::test_y[64-float32]")
    b = baseline_name("tests/test_a.py::TestX::test_y[64 float32]")
    assert a.startswith("tests_test_a__TestX__test_y_64-float32-") and a.endswith(".yaml")
    assert a != b and "/" not in b and " " not in b
    assert len(baseline_name("t.py::" + "x" * 500)) < 140
    # No glob character a shell would expand (zsh fails on an unmatched `[...]`).
    odd = baseline_name("t.py::test[a*b?c[d]]")
    assert not set("[]*?") & set(odd)
    # The name earlier versions gave the file, still read: same hash, brackets kept.
    old = legacy_baseline_name("tests/test_a.py::TestX::test_y[64-float32]")
    assert old.startswith("tests_test_a__TestX__test_y[64-float32]-") and old[-13:] == a[-13:]
    assert legacy_baseline_name("t.py::t") == baseline_name("t.py::t")


@pytest.mark.parametrize("target, words", [
    ("gpu", "`target` must be cpu or cuda, got 'gpu'"),
    (["cuda"], "`target` must be cpu or cuda, got ['cuda']"),
])
def test_target_is_read_back_and_defaults_to_cpu(target, words):
    data = to_data(replace(BASE, target="cuda"))
    assert data["target"] == "cuda" and from_data(data, "x.yaml").target == "cuda"
    del data["target"]  # a baseline written before the target was recorded
    assert from_data(data, "x.yaml").target == "cpu"
    with pytest.raises(BaselineError, match=re.escape(words)):
        from_data({**data, "target": target}, "x.yaml")


def test_source_paths_are_portable(tmp_path):
    root = tmp_path / "repo"
    assert relative_file(str(root / "models" / "net.py"), root) == "models/net.py"
    outside = tmp_path / "lib" / "pkg" / "mod.py"
    assert relative_file(str(outside), root) == "…/pkg/mod.py"
    # A venv inside the project (CI's .venv) holds libraries, not project code: the same
    # short form as anywhere else, so a baseline recorded elsewhere still matches.
    venv = root / ".venv" / "lib" / "python3.11" / "site-packages" / "pkg" / "mod.py"
    assert relative_file(str(venv), root) == "…/pkg/mod.py"


def test_two_clusters_with_one_identity_pair_by_their_nodes_and_a_split_one_fails():
    """Baselines written before sites: `nth` 0 split by a roll, `nth` 1 intact. The intact
    one keeps its pair; the split one is a regression, not silently paired."""
    first = cluster(["mul", "add"], "10-11", nodes=["mul", "add"])
    second = cluster(["mul", "add"], "20-21", nodes=["mul_1", "add_1"])
    base = snap(*(replace(c, module="", function="forward") for c in (first, second)))
    base = replace(base, clusters=(base.clusters[0], replace(base.clusters[1], nth=1)))
    kept = replace(second, module="", function="forward")  # now the only one: nth 0
    cur = with_ops(snap(kept), "mul mul 10", "add add 12", "mul_1 mul 21", "add_1 add 22")
    r = compare(base, cur)
    assert r.pairs == ((base.clusters[1].ident, kept.ident),)
    (msg,) = r.regressions
    assert msg.startswith(f"`mul → add` at {F}:10, 12 no longer fuses")


def test_a_baseline_written_before_sites_with_a_view_is_located_by_its_node_names():
    """Its views are skipped by op as before; where the ops and views are now is their lines
    (the views' branch once kept op names where (op, view) pairs belong: `.lines` raised)."""
    rec = cluster(["mul", "view", "add"], "10-11", nodes=["mul", "view", "add"])
    cur = with_ops(snap(rec), "mul mul 10", "view view 10", "add add 12")
    cur = replace(cur, op_index=tuple(replace(o, kind="view") if o.op == "view" else o
                                      for o in cur.op_index))
    got = locate(rec, cur)
    assert got.missing == ()
    assert got.lines == f"{F}:10, 12"
    assert got.changed_views == ()


def test_a_kernel_that_grows_while_an_unrelated_one_shrinks_still_regresses():
    grows = replace(BASE.clusters[0], fused_bytes=2048)
    shrinks = replace(BASE.clusters[1], fused_bytes=10)
    r = compare(BASE, snap(grows, shrinks))
    assert any("moves more traffic: 1.0 KB → 2.0 KB" in m for m in r.regressions)
