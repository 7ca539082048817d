"""The compiled record in the fusion report, on constructed data: our clusters beside
Inductor's kernels with each disagreement and its reason, in the terminal and Markdown."""

from dataclasses import dataclass

from pytest_fusion.compiled_report import markdown_lines, summary, terminal_lines
from pytest_fusion.records import TestRecord


@dataclass(frozen=True)
class Cluster:  # the fields summary reads from a snapshot's ClusterRec
    chain: str
    lines: str


CLUSTERS = [Cluster("mul → relu", "model.py:9"), Cluster("add → sigmoid", "model.py:11-12")]
DATA = {"graphs": 1, "graph_breaks": [], "recompiles": 0, "bytes_moved": 512,
        "kernels": [{"name": "cpp_fused_mul_relu_0", "kind": "generated"},
                    {"name": "cpp_fused_add_1", "kind": "generated"},
                    {"name": "cpp_fused_sigmoid_2", "kind": "generated"},
                    {"name": "mm", "kind": "extern"}]}
AGREEMENT = {
    "cluster_verdicts": [
        {"cluster": 0, "verdict": "same group", "kernels": ["cpp_fused_mul_relu_0"],
         "detail": "cpp_fused_mul_relu_0"},
        {"cluster": 1, "verdict": "different grouping",
         "kernels": ["cpp_fused_add_1", "cpp_fused_sigmoid_2"],
         "detail": "Inductor splits it over 2 kernels: cpp_fused_add_1 (add); "
                   "cpp_fused_sigmoid_2 (sigmoid)"}],
    "kernels": [{"name": "cpp_fused_exp_tanh_3", "status": "missed", "ops": ["exp", "tanh"],
                 "lines": [14], "reason": "an opaque op `torch.flip` (line 13) separates the "
                                          "ops in our graph"},
                {"name": "cpp_fused_mul_relu_0", "status": "exact", "ops": ["mul", "relu"],
                 "lines": [9], "reason": None}],
}


def records():
    compiled = summary(CLUSTERS, {"cpu-inductor": DATA}, {"cpu-inductor": AGREEMENT})
    return [TestRecord("test_m.py::test_net", "pass", compiled=compiled),
            TestRecord("test_m.py::test_plain", "pass")]


def test_summary_counts_kernels_apart_from_library_calls():
    entry = records()[0].compiled["cpu-inductor"]
    assert (entry["kernels"], entry["library_calls"], entry["bytes_moved"]) == (3, 1, 512)
    assert [c["ops"] for c in entry["clusters"]] == ["mul → relu", "add → sigmoid"]
    assert [m["kernel"] for m in entry["missed"]] == ["cpp_fused_exp_tanh_3"]


def test_terminal_says_agreement_and_each_disagreement_with_its_reason():
    lines = terminal_lines(records())
    assert lines[0] == ("test_m.py::test_net [cpu-inductor]: 3 kernels, 1 library call, 1 graph, "
                        "0 graph breaks, 0 recompiles; 1 of 2 clusters of ours fused the same "
                        "by Inductor, 1 Inductor kernel we do not propose")
    assert lines[1] == ("    cluster 1 `add → sigmoid` at model.py:11-12: different grouping: "
                        "Inductor splits it over 2 kernels: cpp_fused_add_1 (add); "
                        "cpp_fused_sigmoid_2 (sigmoid)")
    assert lines[2] == ("    Inductor's `cpp_fused_exp_tanh_3` (exp → tanh; lines 14) is no "
                        "cluster of ours: an opaque op `torch.flip` (line 13) separates the ops "
                        "in our graph")
    assert len(lines) == 3  # the agreeing cluster is counted, not listed; no record, no line


def test_markdown_puts_our_clusters_beside_inductors_kernels():
    md = markdown_lines(records())
    assert md[0] == "### torch.compile: our clusters beside Inductor's kernels"
    assert "| `mul → relu` | model.py:9 | `cpp_fused_mul_relu_0` | same group |" in md
    assert any(row.startswith("| `add → sigmoid` | model.py:11-12 | `cpp_fused_add_1`, "
                              "`cpp_fused_sigmoid_2` | different grouping: Inductor splits")
               for row in md)
    assert any(row.startswith("- Inductor's `cpp_fused_exp_tanh_3`") for row in md)


def test_no_compiled_record_no_section():
    assert markdown_lines([TestRecord("t::x", "pass")]) == []
