"""Ops eager refuses for their operands' dtypes are left to eager, by name (``OpSpec.refused``).

Capture propagates shapes on fake tensors, which let these through: a bool tensor minus a
number (`m - 1`), a bool tensor clamped by a number, a bitwise op computing in floats
(`m & 0.5`). The kernel computed something where eager raises (the CPU's, checked in each
test's premise).
"""

import pytest
import torch
from codegen_harness import Lambda, run_kernel

from fusion_core.codegen import generate
from fusion_core.pipeline import analyze

A = torch.tensor([[1, -2, 3, 100, -128, 127, 0, 5]], dtype=torch.int8)

# spelling: (model, eager's error, the op, what the rejection says)
REFUSED = {
    "bool-minus-number": (lambda _, a: (a > 0) - 1, "Subtraction", "sub",
                          "subtracts a bool tensor"),
    "number-minus-bool": (lambda _, a: 1 - (a > 0), "Subtraction", "sub",
                          "subtracts a bool tensor"),
    "rsub": (lambda _, a: torch.rsub(a > 0, 2), "Subtraction", "rsub",
             "subtracts a bool tensor"),
    "int-minus-bool": (lambda _, a: (a * 1) - (a > 0), "Subtraction", "sub",
                       "subtracts a bool tensor"),
    "float-minus-bool": (lambda _, a: (a * 0.5) - (a > 0), "Subtraction", "sub",
                         "subtracts a bool tensor"),
    "bool-clamp-max": (lambda _, a: (a > 0).clamp(max=True), "not implemented for 'Bool'",
                       "clamp", "clamps a bool tensor"),
    "bool-clamp-min": (lambda _, a: (a > 0).clamp(min=False), "not implemented for 'Bool'",
                       "clamp", "clamps a bool tensor"),
    "bool-clamp-two-tensors": (lambda _, a: torch.clamp(a > 0, a < 3, a < 2),
                               "not implemented for 'Bool'", "clamp", "clamps a bool tensor"),
    "bool-and-float": (lambda _, a: (a > 0) & 0.5, "not implemented for 'Float'",
                       "bitwise_and", "computes in floats"),
    "int-or-float": (lambda _, a: (a * 1) | 1.5, "not implemented for 'Float'", "bitwise_or",
                     "computes in floats"),
    "float-xor-int": (lambda _, a: (a * 0.5) ^ 1, "not implemented for 'Float'",
                      "bitwise_xor", "computes in floats"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_an_op_eager_refuses_for_its_dtypes_is_refused_by_name(name):
    fn, error, op, said = REFUSED[name]
    with pytest.raises((RuntimeError, NotImplementedError), match=error):
        fn(None, A)  # the premise
    analysis = analyze(Lambda(lambda m, a: torch.neg(fn(m, a) * 1), 1), A)
    fused = [o for c in analysis.clusters for o in c.ops]
    assert op not in fused, fused
    text = " ".join(r.reason for r in analysis.rejections)
    assert said in text and "eager raises" in text, text


def test_a_bool_clamp_is_refused_only_where_eager_raises(tmp_path):
    """Eager clamps bools by one bool tensor bound (a maximum or minimum), and a bool tensor
    by an integer in int64: those stay fused, and the kernel matches eager."""
    with pytest.raises(NotImplementedError, match="'Bool'"):
        (A > 0).clamp(max=True)  # the premise
    analysis = analyze(Lambda(lambda m, a: (a > 0).clamp(max=True), 1), A)
    assert not analysis.clusters, [c.ops for c in analysis.clusters]
    for name, fn in {"min-tensor": lambda m, a: torch.clamp(a > 0, min=a < 3),
                     "max-tensor": lambda m, a: torch.clamp(a > 0, max=a < 3),
                     "max-int": lambda m, a: (a > 0).clamp(max=5) * 3}.items():
        analysis = analyze(Lambda(fn, 1), A)
        (cluster,) = analysis.clusters
        assert "clamp" in cluster.ops, name
        got = run_kernel(generate(analysis, cluster), tmp_path / name, (A,))[0]
        want = fn(None, A)
        assert got.dtype == want.dtype and torch.equal(got, want), (name, got, want)
