"""Bounds on the compiled record (compiled_max_*): each bound past its value is one line
with the measured value beside the bound; bad bound values are one line naming the fix."""

import pytest

from pytest_fusion.compiled_bounds import BOUNDS, check_bound_values, exceeded

DATA = {
    "graphs": 2,
    "graph_breaks": [{"reason": "Unsupported Tensor.item() call", "file": "model.py",
                      "line": 10, "source": "s = y.sum().item()"}],
    "recompiles": 1,
    "recompile_reasons": [{"reason": "tensor 'x' size mismatch at index 0", "function": "forward",
                           "file": "model.py", "line": 8}],
    "kernels": [{"name": "cpp_fused_mul_relu_0", "kind": "generated"},
                {"name": "cpp_fused_add_1", "kind": "generated"},
                {"name": "mm", "kind": "extern"}],
    "bytes_moved": 3 * 1024 * 1024,
}


def test_within_every_bound_says_nothing():
    bounds = {"compiled_max_kernels": 2, "compiled_max_graph_breaks": 1, "compiled_max_graphs": 2,
              "compiled_max_recompiles": 1, "compiled_max_bytes": 3 * 1024 * 1024}
    assert set(bounds) == set(BOUNDS)
    assert exceeded(bounds, {"cpu-inductor": DATA}) == []


def test_kernels_past_the_bound_are_measured_beside_it_library_calls_apart():
    (line,) = exceeded({"compiled_max_kernels": 1}, {"cpu-inductor": DATA})
    assert line == ("compiled bound exceeded on cpu-inductor: 2 generated kernels (library calls "
                    "not counted) (`cpp_fused_mul_relu_0`, `cpp_fused_add_1`), more than "
                    "compiled_max_kernels=1")


def test_each_bound_exceeded_is_its_own_line_naming_where():
    lines = exceeded({"compiled_max_graph_breaks": 0, "compiled_max_recompiles": 0,
                      "compiled_max_bytes": 1024}, {"cpu-inductor": DATA})
    assert len(lines) == 3
    assert "1 graph break (model.py:10: Unsupported Tensor.item() call), more than " \
           "compiled_max_graph_breaks=0" in lines[0]
    assert "1 recompile (forward: tensor 'x' size mismatch at index 0)" in lines[1]
    assert lines[2].endswith("(3145728 B), more than compiled_max_bytes=1024")


def test_bytes_bound_without_an_estimate_is_said_not_passed():
    (line,) = exceeded({"compiled_max_bytes": 10}, {"cpu-inductor": {**DATA, "bytes_moved": None}})
    assert line.startswith("compiled bound compiled_max_bytes=10 not checked on cpu-inductor")


@pytest.mark.parametrize("value", [-1, 1.5, "3", True])
def test_a_bound_must_be_a_whole_number(value):
    msg = check_bound_values({"compiled_max_kernels": value}, "fusion_check(...)")
    assert msg == (f"fusion_check(...): compiled_max_kernels={value!r} must be a whole number "
                   "≥ 0, e.g. compiled_max_kernels=4")


def test_an_unknown_bound_names_the_known_ones():
    msg = check_bound_values({"compiled_max_kernel": 3}, "fusion_advisor.analyze(...)")
    assert msg.startswith("fusion_advisor.analyze(...) got unknown bound compiled_max_kernel: ")
    assert "compiled_max_kernels" in msg
