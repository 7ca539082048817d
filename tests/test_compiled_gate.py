"""The compiled-record gate on constructed records (no compile): each change is one
message in the right bucket, naming the user's line and the reason."""

import pytest

from fusion_core import CompiledRecord
from pytest_fusion.compiled_gate import compare_compiled
from pytest_fusion.findings import messages

BASE = {
    "torch": "2.11.0",
    "triton": "3.6.0",
    "graphs": 1,
    "graph_breaks": [],
    "recompiles": 0,
    "kernels": [
        {
            "name": "cpp_fused_mul_relu_0",
            "ops": ["mul", "relu"],
            "sites": [["mul", "", "model.py", 10], ["relu", "", "model.py", 11]],
        },
        {"name": "cpp_fused_add_1", "ops": ["add"], "sites": [["add", "", "model.py", 12]]},
    ],
}


def record(**changes):
    return CompiledRecord.from_dict("cpu-inductor", {**BASE, **changes})


def bucketed(base, now, option="report"):
    return {b: m for b, m in messages(compare_compiled(base, now, option)).items() if m}


def test_same_record_has_no_findings():
    assert bucketed(record(), record()) == {}


def test_new_graph_break_names_line_source_and_reason_once():
    brk = {
        "reason": "Unsupported Tensor.item() call",
        "file": "model.py",
        "line": 11,
        "source": "if y.sum().item() > 0:",
    }
    found = bucketed(record(), record(graphs=2, graph_breaks=[brk]))
    (msg,) = found["regressions"]  # more graphs is the break's doing: not said twice
    assert "new graph break at model.py:11" in msg
    assert "`if y.sum().item() > 0:`" in msg and "Unsupported Tensor.item() call" in msg


def test_a_break_that_only_moved_lines_is_the_same_break():
    brk = {"reason": "r", "file": "model.py", "line": 11, "source": "x.item()"}
    moved = {**brk, "line": 14}
    assert bucketed(record(graph_breaks=[brk]), record(graph_breaks=[moved])) == {}


def test_more_kernels_fail_naming_the_new_kernels_and_lines():
    split = [
        {"name": "cpp_fused_mul_0", "ops": ["mul"], "sites": [["mul", "", "model.py", 10]]},
        {"name": "cpp_fused_relu_1", "ops": ["relu"], "sites": [["relu", "", "model.py", 11]]},
        BASE["kernels"][1],
    ]
    (msg,) = bucketed(record(), record(kernels=split))["regressions"]
    assert "3 kernels" in msg and "(baseline 2)" in msg
    assert "`cpp_fused_mul_0` (mul) at model.py:10" in msg and "model.py:11" in msg


def test_fewer_kernels_is_an_improvement_never_a_loss():
    merged = [
        {
            "name": "cpp_fused_add_mul_relu_0",
            "ops": ["add", "mul", "relu"],
            "sites": [["mul", "", "model.py", 10]],
        }
    ]
    found = bucketed(record(), record(kernels=merged))
    assert set(found) == {"improvements"}
    (msg,) = found["improvements"]
    assert msg.startswith("Inductor now emits 1 kernel (baseline 2): `cpp_fused_add_mul_relu_0`")
    assert "in place of `cpp_fused_mul_relu_0` (mul → relu)" in msg


def test_recompile_fails():
    (msg,) = bucketed(record(), record(recompiles=1, extra_shapes=[[[6, 8]]]))["regressions"]
    assert msg.startswith("1 recompile under the extra shapes 6×8 (baseline 0)")


@pytest.mark.parametrize(("option", "bucket"), [("report", "changes"), ("fail", "regressions")])
def test_compiler_change_is_said_as_such_and_follows_the_option(option, bucket):
    found = bucketed(record(), record(torch="2.13.0"), option)
    assert found == {bucket: ("compiler changed: torch 2.11.0 → 2.13.0 (backend cpu-inductor)",)}


def test_unknown_option_value_is_one_line():
    with pytest.raises(ValueError, match="use report or fail"):
        compare_compiled(record(), record(), "warn")
