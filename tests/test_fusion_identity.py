"""Cluster identity, schema migration, grouping by repeated modules and "why it broke",
on hand-built data and small analyses (pytest_fusion.schema / grouping / findings /
explain / carry, fusion_core.scope_of / find_barriers)."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml
from rich.console import Console

import fusion_core
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.report.console import print_analysis
from pytest_fusion.carry import attach_timings, carry_timings, same_content
from pytest_fusion.compare import compare
from pytest_fusion.findings import LOC, Finding, messages
from pytest_fusion.grouping import compact, expand, expand_range, range_form, short_form
from pytest_fusion.schema import SCHEMA_VERSION, from_data, to_data
from pytest_fusion.session import dump_yaml
from pytest_fusion.snapshot import (
    BarrierRec,
    BaselineError,
    ClusterRec,
    ClusterTiming,
    Measured,
    OpRec,
    RejectionRec,
    Snapshot,
)

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "fusion_baselines").glob("*.yaml"))
# The microgpt baseline as schema 1 wrote it (with seven H200 timing entries), kept as data
# since the committed one was re-recorded as schema 2.
SCHEMA_1 = ROOT / "tests" / "data"
H200 = "NVIDIA H200 sm_90"


def load(path: Path) -> Snapshot:
    return from_data(yaml.safe_load(path.read_text(encoding="utf-8")), path.name)


# ---------------------------------------------------------------- range forms

@pytest.mark.parametrize("paths, text, short", [
    ([f"h.{i}" for i in range(12)], "h.{0..11}", "h.0…h.11 (×12)"),
    (["blocks.0.attn", "blocks.1.attn"], "blocks.{0,1}.attn", "blocks.0.attn…blocks.1.attn (×2)"),
    (["h.0", "h.1", "h.2", "h.3", "h.7"], "h.{0..3,7}", "h.0…h.3, h.7 (×5)"),
    (["layers.2", "layers.5"], "layers.{2,5}", "layers.2, layers.5 (×2)"),
    (["mlp"], "mlp", "mlp"),
])
def test_range_forms_round_trip(paths, text, short):
    assert range_form(paths) == text
    assert expand_range(text) == paths
    assert short_form(paths) == short


@pytest.mark.parametrize("bad", ["h.{0..x}", "h.{0..3", "h.{..3}"])
def test_malformed_range_is_a_one_line_baseline_error(bad):
    data = to_data(Snapshot("t.py::t", "M", ("4×8 float32",), (
        ClusterRec(("mul", "add"), "m.py:3", "elementwise-chain", ("mul", "add"), 96, 64,
                   module="h.0", function="forward"),), ()))
    data["clusters"][0]["in"] = bad
    with pytest.raises(BaselineError, match=r"corrupt fusion baseline x.yaml: `clusters\[0\]`"):
        from_data(data, "x.yaml")


def test_compact_merges_only_what_differs_in_the_item_and_expand_undoes_it():
    entries = [{"ops": ["add", "ln"], "in": f"h.{i}", "nodes": [f"add_{i}", f"ln_{i}"],
                "bytes": 10} for i in (2, 0, 1)]
    entries.append({"ops": ["add", "ln"], "in": "h.3", "nodes": ["add_9", "ln_9"], "bytes": 11})
    entries.append({"ops": ["mul"], "in": "", "nodes": ["mul"], "bytes": 1})
    out = compact(entries, ("nodes",))
    assert out[0] == {"ops": ["add", "ln"], "in": "h.{0..2}", "bytes": 10,
                      "nodes": [["add_0", "ln_0"], ["add_1", "ln_1"], ["add_2", "ln_2"]]}
    assert out[1:] == entries[3:]  # other traffic, or no container item: kept apart
    assert [e["in"] for e in expand(out[0], ("nodes",))] == ["h.0", "h.1", "h.2"]
    with pytest.raises(ValueError, match="one list per module"):
        expand(dict(out[0], nodes=[["add_0"]]), ("nodes",))


# ---------------------------------------------------------------- schema 1 and 2

@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name[:40])
def test_committed_baselines_load_and_survive_a_rewrite(path):
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    s = load(path)
    assert len(s.clusters) == sum(len(expand(c, ("nodes",))) for c in raw["clusters"])
    for key, m in (raw.get("measured") or {}).items():
        # Every stored timing entry found its cluster: none is lost in the migration.
        assert len(s.measured[key].clusters) == len(m["clusters"])
        assert {t.cluster for t in s.measured[key].clusters} <= {c.ident for c in s.clusters}
    again = from_data(yaml.safe_load(dump_yaml(to_data(s))), path.name)
    assert again == s and to_data(again)["schema_version"] == SCHEMA_VERSION == 4


def test_schema_1_timings_follow_their_cluster_into_schema_2():
    """The old microgpt baseline's seven H200 entries, keyed by (ops, lines) in schema 1, move
    to the identities of the current clusters when the baseline is rewritten."""
    (path,) = SCHEMA_1.glob("*microgpt*.yaml")
    old = load(path)
    assert len(old.measured[H200].clusters) == 7
    # The current analysis after a comment line above the model: every line moved by one.
    cur = replace(old, measured={}, clusters=tuple(
        replace(c, lines=c.lines.replace(":", ":1"), module=f"blocks.{i}", function="forward",
                nth=0) for i, c in enumerate(old.clusters)))
    r = compare(old, cur)
    assert r.status == "pass" and len(r.pairs) == 7
    kept = carry_timings(old, cur, r.pairs)[H200].clusters
    assert [t.kernel_us for t in kept] == [t.kernel_us for t in old.measured[H200].clusters]
    assert [t.cluster for t in kept] == [c.ident for c in cur.clusters]
    written = from_data(yaml.safe_load(dump_yaml(to_data(replace(cur, measured={H200: Measured(
        kept)})))), "x.yaml")
    assert written.measured[H200].clusters == kept


def _cluster(ops, module, lines="m.py:10-11", nodes=None, **kw):
    return ClusterRec(tuple(ops), lines, "elementwise-chain", tuple(nodes or ops), 96, 64,
                      "elementwise", module=module, function="forward", **kw)


def _snap(*clusters, rejections=(), barriers=(), measured=None):
    return Snapshot("t.py::t", "Net", ("4×8 float32",), tuple(clusters), tuple(rejections),
                    {}, measured or {}, "fx", barriers)


def test_repeated_clusters_are_one_yaml_entry_and_load_back_the_same():
    s = _snap(*[_cluster(["silu", "mul"], f"h.{i}", nodes=[f"silu_{i}", f"mul_{i}"])
                for i in range(4)], _cluster(["mul", "add"], ""))
    data = to_data(s)
    assert [c["in"] for c in data["clusters"]] == ["h.{0..3}", ""]
    assert data["clusters"][0]["nodes"] == [[f"silu_{i}", f"mul_{i}"] for i in range(4)]
    assert from_data(yaml.safe_load(dump_yaml(data)), "x.yaml") == s


def test_moved_lines_change_nothing_and_need_no_rewrite():
    s = _snap(_cluster(["mul", "add"], ""), measured={H200: Measured((ClusterTiming(
        _cluster(["mul", "add"], "").ident, (1.0, 2.0, 3.0)),))})
    moved = replace(s, measured={}, clusters=(_cluster(["mul", "add"], "", lines="m.py:11-12"),))
    r = compare(s, moved)
    assert (r.regressions, r.improvements, r.changes) == ((), (), ())
    merged = replace(moved, measured=carry_timings(s, moved, r.pairs))
    assert same_content(merged, s) and merged.measured == s.measured


def test_a_v1_baseline_gets_the_identities_when_a_gpu_adds_its_timings():
    v1 = _snap(_cluster(["mul", "add"], None))
    v1 = replace(v1, clusters=(replace(v1.clusters[0], function=None),))
    cur = _snap(_cluster(["mul", "add"], "h.0"), measured={H200: Measured((ClusterTiming(
        _cluster(["mul", "add"], "h.0").ident, (1.0, 2.0, 3.0)),))})
    merged = attach_timings(v1, cur, H200, compare(v1, cur).pairs)
    assert merged.clusters[0].module == "h.0" and merged.clusters[0].function == "forward"
    assert merged.measured[H200].clusters[0].cluster == merged.clusters[0].ident


# ---------------------------------------------------------------- one change, one message

def test_findings_about_repeated_items_become_one_message():
    found = [Finding("regressions", f"`add → layer_norm`{LOC} at m.py:5-6 no longer fuses: "
                     f"fan-out, `add_{i}` is also used by `self.h.{i}.fc`", f"h.{i}")
             for i in range(12)]
    found.append(Finding("changes", f"`mul`{LOC} at m.py:9", "head"))
    said = messages(found)
    assert said["regressions"] == (
        "`add → layer_norm` in h.0…h.11 (×12) at m.py:5-6 no longer fuses: fan-out, `add` is "
        "also used by `self.h.*.fc`",)
    assert said["changes"] == ("`mul` in head at m.py:9",)
    # Children of an nn.Sequential are `0`, `1`, …: only labels take the `*`.
    seq = [Finding("regressions", f"`mul`{LOC} at m.py:3 moves more traffic: 0 B → 10 B "
                   f"(+100%, tolerance 0%), see `self.{i}.fc`", str(i)) for i in range(3)]
    assert messages(seq)["regressions"] == (
        "`mul` in 0…2 (×3) at m.py:3 moves more traffic: 0 B → 10 B (+100%, tolerance 0%), "
        "see `self.*.fc`",)
    # As messages spell a ModuleList item, the way the source indexes it.
    listed = [Finding("regressions", f"`mul`{LOC} at m.py:3 no longer fuses: `self.h[{i}].fc` "
                      "at m.py:4 sits between `mul` and `add`", f"h.{i}") for i in range(3)]
    assert messages(listed)["regressions"] == (
        "`mul` in h.0…h.2 (×3) at m.py:3 no longer fuses: `self.h[*].fc` at m.py:4 sits "
        "between `mul` and `add`",)
    # The identical clusters of a loop (one module, told apart by order only): one message.
    loop = [Finding("regressions", f"`eq → sum`{LOC} at m.py:7 no longer fuses", "")] * 4
    assert messages(loop)["regressions"] == ("`eq → sum` (×4) at m.py:7 no longer fuses",)
    one = messages(found[3:4])["regressions"]
    assert one == ("`add → layer_norm` in h.3 at m.py:5-6 no longer fuses: fan-out, `add_3` is "
                   "also used by `self.h.3.fc`",)


# ---------------------------------------------------------------- why it broke

ROLL = BarrierRec("roll", "opaque", "torch.roll", False, "m.py:12", (("silu", "silu"),),
                  (("mul", "mul"),))


def test_a_lost_cluster_names_the_opaque_op_now_between_its_ops():
    base = _snap(_cluster(["silu", "mul"], ""))
    cur = replace(_snap(barriers=[ROLL]), op_index=(
        OpRec("silu", "silu", "", "F.silu", "compute", "", "m.py:10"),
        OpRec("roll", "opaque", "", "torch.roll", "opaque", "", "m.py:12"),
        OpRec("mul", "mul", "", "operator.mul", "compute", "", "m.py:11")))
    (msg,) = compare(base, cur).regressions
    # As the CLI's barrier list says them: was "between `silu` and `mul`", with no line.
    assert msg == ("`silu → mul` at m.py:10-11 no longer fuses: `torch.roll` at m.py:12 now "
                   "sits between `silu` (line 10) and `mul` (line 11): fusion-advisor cannot "
                   "fuse through it")


def test_the_ops_beside_a_barrier_are_said_once_each_at_their_file_where_it_is_another():
    base = _snap(_cluster(["silu", "silu", "mul", "add"], ""))
    roll = BarrierRec("roll", "opaque", "torch.roll", False, "m.py:12",
                      (("silu", "silu"), ("silu_1", "silu")), (("mul", "mul"), ("add", "add")))
    cur = replace(_snap(barriers=[roll]), op_index=(
        OpRec("silu", "silu", "", "F.silu", "compute", "", "m.py:10"),
        OpRec("silu_1", "silu", "", "F.silu", "compute", "", "m.py:10"),
        OpRec("roll", "opaque", "", "torch.roll", "opaque", "", "m.py:12"),
        OpRec("mul", "mul", "", "operator.mul", "compute", "", "helpers.py:3"),
        OpRec("add", "add", "", "operator.add", "compute", "", "?")))
    (msg,) = compare(base, cur).regressions
    assert msg.endswith(": `torch.roll` at m.py:12 now sits between `silu` (line 10) and "
                        "`mul` at helpers.py:3 / `add`: fusion-advisor cannot fuse through it")


def test_a_barrier_the_op_index_lacks_is_still_named_at_its_line():
    base = _snap(_cluster(["silu", "mul"], ""))
    cur = replace(_snap(barriers=[ROLL]), op_index=(
        OpRec("silu", "silu", "", "F.silu", "compute", "", "m.py:10"),
        OpRec("mul", "mul", "", "operator.mul", "compute", "", "m.py:11")))
    (msg,) = compare(base, cur).regressions
    assert msg.endswith(": `torch.roll` at m.py:12 now sits between `silu` (line 10) and "
                        "`mul` (line 11): fusion-advisor cannot fuse through it")


IN_PLACE_HEAD = ("import torch\nimport torch.nn as nn\n\n\nclass M(nn.Module):\n"
                 "    def forward(self, x):\n        y = torch.sigmoid(x)\n")


@pytest.mark.parametrize("base, edit, said", [
    # the in-place op parts the cluster's ops: the rejection about it says why
    ("        z = y * 2.0\n        return z + 1\n",
     "        y.mul_(2.0)\n        z = y * 2.0\n        return z + 1\n",
     "`sigmoid → mul → add` at m.py:7, 9-10 shrank to `mul → add`, without `sigmoid`: aliasing, "
     "`.mul_()` at m.py:8 mutates its input in place"),
    # it writes the value after the cluster's ops read it: they split around it
    ("        z = y * 2.0\n        return z.exp()\n",
     "        z = y * 2.0\n        y.add_(1)\n        return z.exp() + y\n",
     "`sigmoid → mul → exp` at m.py:7-8, 10 split into `sigmoid → mul` (m.py:7-8) + "
     "`exp → add` (m.py:10): aliasing, `.add_()` at m.py:9 mutates its input in place"),
], ids=["shrank", "split"])
def test_an_in_place_barrier_a_rejection_names_is_said_at_its_file_and_line(
        tmp_path, base, edit, said):
    # Was `.mul_()` (line 8): a line of no named file, where every other barrier is
    # `torch.roll` at blocks.py:49.
    from pytest_fusion.snapshot_build import from_analysis

    snaps = []
    for i, body in enumerate((base, edit)):
        (tmp_path / f"m{i}").mkdir()
        (tmp_path / f"m{i}" / "m.py").write_text(IN_PLACE_HEAD + body)
        a = analyze_file(tmp_path / f"m{i}" / "m.py", [InputSpec((4, 8))], capture="fx")
        snaps.append(from_analysis(a, "t", tmp_path / f"m{i}"))
    assert compare(*snaps).regressions[0] == said


def test_an_in_place_op_is_named_even_when_the_rejection_blames_fan_out():
    """BatchNorm → F.relu(inplace=True) → conv2 and a residual add: the detector's first
    failing check is fan-out on `relu`, but what changed is the in-place write."""
    base = _snap(_cluster(["batch_norm", "relu"], "", nodes=["batch_norm_1", "relu"]))
    fan_out = RejectionRec("fan-out", ("batch_norm", "relu_", "add"), "m.py:10-12",
                           ("batch_norm_1", "relu", "add"), ("relu",),
                           "`relu` is also used by `self.conv2` outside the group; …",
                           module="", function="forward")
    relu_ = BarrierRec("relu", "relu_", "F.relu", True, "m.py:11",
                       (("batch_norm_1", "batch_norm"),), (("add", "add"),))
    index = (OpRec("batch_norm_1", "batch_norm", "", "F.batch_norm", "compute", "", "m.py:10"),
             OpRec("relu", "relu_", "", "F.relu", "inplace", "", "m.py:11"),
             OpRec("add", "add", "", "operator.add", "compute", "", "m.py:12"))
    cur = replace(_snap(rejections=[fan_out], barriers=[relu_]), op_index=index)
    (msg,) = compare(base, cur).regressions
    assert msg == ("`batch_norm → relu` at m.py:10-11 no longer fuses: `F.relu` at m.py:11 now "
                   "writes in place between `batch_norm` (line 10) and `add` (line 12): "
                   "fusion-advisor cannot fuse across an in-place op (rejected as fan-out: `relu` "
                   "is also used by `self.conv2` outside the group)")
    # Without the graph's barrier the rejection alone still names the in-place op.
    (msg,) = compare(base, replace(_snap(rejections=[fan_out]), op_index=index)).regressions
    assert msg.endswith("outside the group (the group holds the in-place `relu_`)")


# ---------------------------------------------------------------- fusion_core facts

class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return self.out(F.silu(h) * h)


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.h = nn.ModuleList(_Block() for _ in range(3))
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        for block in self.h:
            x = block(x)
        return self.ln(x * 2.0)


def test_scope_is_the_module_path_and_function_of_a_cluster():
    a = fusion_core.analyze(_Stack(), (4, 8))
    scopes = [fusion_core.scope_of(a.graph, c.nodes) for c in a.clusters]
    assert [(s.module, s.function) for s in scopes] == [
        ("h.0", "forward"), ("h.1", "forward"), ("h.2", "forward"), ("", "forward")]
    assert str(scopes[1]) == "h.1.forward"


def test_cli_lists_an_unknown_op_between_compute_ops(tmp_path):
    model = tmp_path / "rolled.py"
    model.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
                     "class M(nn.Module):\n    def forward(self, a, u):\n"
                     "        g = F.silu(a)\n        return torch.roll(g, 1, -1) * u\n")
    a = analyze_file(model, [InputSpec((4, 8))] * 2)
    (b,) = fusion_core.find_barriers(a.graph, a.clusters)
    assert (b.target, b.unknown, b.inplace) == ("torch.roll", True, False)
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_analysis(a, console, explain_rejections=True)
    text = console.export_text()
    assert "Fusion barriers (1)" in text
    assert "  `torch.roll` at " in text
    assert ("rolled.py:8 sits between `silu` (line 7) and `mul` (line 8): fusion-advisor "
            "cannot fuse through it") in text


def test_cli_names_an_unknown_elementwise_call_a_cluster_stops_at(tmp_path):
    # torch.nan_to_num reads the input and feeds the cluster: no compute before it, so it
    # was no barrier, and nothing said why the cluster left it out. The matmul feeding
    # the same cluster is no call a reader expects to fuse: it is not listed.
    model = tmp_path / "gated.py"
    model.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
                     "class M(nn.Module):\n    def forward(self, a, u):\n"
                     "        d = torch.nan_to_num(a)\n        h = (d * 2.0).exp()\n"
                     "        return h * (a @ u)\n")
    a = analyze_file(model, [InputSpec((8, 8))] * 2)
    assert fusion_core.find_barriers(a.graph, a.clusters) == ()  # the plugin's: two-sided
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_analysis(a, console, explain_rejections=True)
    text = console.export_text()
    assert "Fusion barriers (1)" in text
    assert ("gated.py:7 feeds `mul` (line 8), which fuse without it: fusion-advisor has no "
            "rule for this call") in text
    assert "  `torch.nan_to_num` at " in text and "matmul" not in text


def test_an_in_place_write_is_a_barrier_for_the_later_readers_of_its_input():
    class Hazard(nn.Module):
        def forward(self, x):
            y = x * 2.0
            z = y + 1.0
            y.relu_()
            return z * y

    a = fusion_core.analyze(Hazard(), (4, 8))
    (b,) = [b for b in fusion_core.find_barriers(a.graph, a.clusters) if b.inplace]
    assert b.target == ".relu_()" and [a.graph[n].op for n in b.before] == ["mul"]
    assert [a.graph[n].op for n in b.after] == ["mul"]


@torch.library.custom_op("fusion_identity_test::scale", mutates_args=())
def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 3.0


@_scale.register_fake
def _(x):
    return torch.empty_like(x)


class _CustomOp(nn.Module):
    def forward(self, x):
        return _scale(F.silu(x)) * x


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_custom_op_is_named_by_its_library_and_name(capture):
    # FX records `scale.default` as the call's `__name__`: neither the library nor the op.
    a = fusion_core.analyze(_CustomOp(), (4, 8), capture=capture)
    (b,) = fusion_core.find_barriers(a.graph, a.clusters)
    assert (b.target, b.op) == ("fusion_identity_test::scale", "opaque")
    assert "`fusion_identity_test::scale` at " in b.describe(a.graph)
