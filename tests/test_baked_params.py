"""`sourcemap/baked_params.py`: which numbers built into a kernel a caller could pass. A value
read from a parameter's values is one; one read from a tensor's sizes (`len`, `stride`,
`shape`) is not (that is `baked_sizes.py`'s to judge)."""

import ast

import pytest

from fusion_core.sourcemap.baked_params import param_baked

HELPER = """\
def mix(self, t, s):
    k = {k}
    return torch.sigmoid(t * k) + 1.0
"""


def _reason(k: str) -> str | None:
    source = HELPER.format(k=k)
    func = ast.parse(source).body[0]
    return param_baked(func, "self", 3, [("k", 4)], lambda n: ast.get_source_segment(source, n))


@pytest.mark.parametrize("k", ["len(t)", "t.stride(0)", "t.shape[0]", "t.size(-1)"])
def test_a_number_read_from_a_parameters_sizes_is_not_a_passed_number(k):
    assert _reason(k) is None


@pytest.mark.parametrize("k", ["s * 2.0", "s"])
def test_a_number_read_from_a_parameter_is_a_passed_number(k):
    assert _reason(k) == (
        f"`k` (line 2: `k = {k}`) reads `s`, a parameter of `mix` (line 1): its callers may "
        "pass other values than the 4 built into the kernel; where all pass that value, write "
        "it into `mix` to fuse these lines")
