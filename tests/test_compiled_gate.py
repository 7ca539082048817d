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


MERGED = [
    {
        "name": "cpp_fused_mul_relu_sigmoid_0",
        "ops": ["mul", "relu", "sigmoid"],
        "sites": [["mul", "", "model.py", 9], ["relu", "", "model.py", 9],
                  ["sigmoid", "", "model.py", 10]],
    }
]
SPLIT = [
    {"name": "cpp_fused_mul_relu_0", "ops": ["mul", "relu"],
     "sites": [["mul", "", "model.py", 9], ["relu", "", "model.py", 9]]},
    {"name": "cpp_fused_sigmoid_1", "ops": ["sigmoid"], "sites": [["sigmoid", "", "model.py", 10]]},
    {"name": "mm", "kind": "extern", "ops": ["mm"], "sites": [["mm", "", "model.py", 9]]},
]
APART = ["cpp_fused_mul_relu_0", "cpp_fused_sigmoid_1",
         "the matrix product `operator.matmul` (line 9) sits between them"]


def test_a_split_kernel_names_its_parts_and_what_now_separates_them():
    (msg,) = bucketed(record(kernels=MERGED), record(kernels=SPLIT, separations=[APART]))[
        "regressions"]
    assert msg.startswith(
        "Inductor now emits 3 kernels (baseline 1): `cpp_fused_mul_relu_sigmoid_0`")
    assert ("splits into `cpp_fused_mul_relu_0` (mul → relu) at model.py:9 and "
            "`cpp_fused_sigmoid_1` (sigmoid) at model.py:10: the matrix product "
            "`operator.matmul` (line 9) sits between them") in msg
    assert "new `cpp_fused_mul_relu_0`" not in msg  # a part of the split is not said twice


def test_a_split_is_found_by_op_when_the_lines_moved():
    moved = [{**k, "sites": [[op, mod, f, line + 3] for op, mod, f, line in k["sites"]]}
             for k in SPLIT]
    (msg,) = bucketed(record(kernels=MERGED), record(kernels=moved, separations=[APART]))[
        "regressions"]
    assert "splits into `cpp_fused_mul_relu_0`" in msg and "`operator.matmul`" in msg


def test_a_split_with_as_many_kernels_fails_even_so():
    # One kernel split while two others merged: the count holds, the split is still a loss.
    base = [*MERGED,
            {"name": "cpp_fused_add_1", "ops": ["add"], "sites": [["add", "", "model.py", 12]]},
            {"name": "cpp_fused_exp_2", "ops": ["exp"], "sites": [["exp", "", "model.py", 13]]}]
    now = [*SPLIT[:2], {"name": "cpp_fused_add_exp_2", "ops": ["add", "exp"],
                        "sites": [["add", "", "model.py", 12], ["exp", "", "model.py", 13]]}]
    found = bucketed(record(kernels=base), record(kernels=now, separations=[APART]))
    (msg,) = found["regressions"]
    assert msg.startswith("an Inductor kernel splits: `cpp_fused_mul_relu_sigmoid_0`")
    assert "improvements" not in found


def test_a_split_without_an_analysis_says_the_reason_is_unknown():
    (msg,) = bucketed(record(kernels=MERGED), record(kernels=SPLIT))["regressions"]
    assert "(sigmoid) at model.py:10: why is not known (no analysis of this run); new `mm`" in msg


def test_recompile_names_dynamos_guard_failure_and_the_function():
    guard = {"reason": "tensor 'x' size mismatch at index 0. expected 4, actual 6",
             "function": "forward", "file": "model.py", "line": 8}
    (msg,) = bucketed(record(), record(recompiles=1, extra_shapes=[[[6, 8]]],
                                       recompile_reasons=[guard]))["regressions"]
    assert msg == ("1 recompile under the extra shapes 6×8 (baseline 0): Dynamo's guard failed "
                   "in forward at model.py:8: tensor 'x' size mismatch at index 0. expected 4, "
                   "actual 6")
