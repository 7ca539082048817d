"""A Python integer beside an integer tensor in a rounding division is read as eager reads it.

Eager converts the number to the tensor's dtype, wrapping to its width (two's complement):
`int8 // 259` divides by 3, `int8 % -129` by 127, `int32 // (2**31 + 5)` by -2**31 + 5,
a dividend too (`259 // int8` is 3 // int8). The kernel divided by the number itself (in
int32: other quotients) or failed (an int32 of 2**31 + 5 is Triton's uint32: "different
signedness"). A number that wraps to 0 (`int8 // 256`) eager refuses ("ZeroDivisionError"):
the division is refused by name, as a literal 0 divisor is.
"""

import pytest
import torch
from codegen_harness import Lambda, compile_for_gpu, run_kernel

from fusion_core.codegen import generate
from fusion_core.codegen.reference import capture_values, cluster_inputs
from fusion_core.ir.rounding import wrapped
from fusion_core.pipeline import analyze

# how each spelling divides tensor `a` by number `s`
SPELLINGS = {
    "//": lambda a, s: a // s,
    "%": lambda a, s: a % s,
    "remainder": torch.remainder,
    "floor_divide": torch.floor_divide,
    "div-floor": lambda a, s: torch.div(a, s, rounding_mode="floor"),
    "div-trunc": lambda a, s: torch.div(a, s, rounding_mode="trunc"),
}
# by number `s`: (the dtype, the number, what eager divides by)
WRAPPING = [
    (torch.int8, 259, 3), (torch.int8, -129, 127), (torch.int8, 128, -128),
    (torch.int16, 65539, 3), (torch.int16, -32769, 32767),
    (torch.int32, 2**31 + 5, -2**31 + 5), (torch.int32, -2**31 - 3, 2**31 - 3),
    (torch.int64, 2**63 + 5, -2**63 + 5), (torch.int64, 2**63, -2**63),
]


def _dividends(dtype):
    low, high = torch.iinfo(dtype).min, torch.iinfo(dtype).max
    return torch.tensor([[100, -7, 5, -1, 0, 1, low, high, low + 1, -100]], dtype=dtype)


def _kernel_result(fn, a, tmp_path):
    analysis = analyze(Lambda(fn, 1), a)
    (cluster,) = analysis.clusters
    return run_kernel(generate(analysis, cluster), tmp_path, (a,))[0]


@pytest.mark.parametrize(("dtype", "s", "held"), WRAPPING,
                         ids=[f"{str(d).removeprefix('torch.')}-{s}" for d, s, _ in WRAPPING])
def test_an_integer_divisor_wraps_to_the_dtype_as_eagers(dtype, s, held, tmp_path):
    a = _dividends(dtype)
    for i, (name, f) in enumerate(SPELLINGS.items()):
        fn = lambda m, a, f=f: f(a * 1, s)  # noqa: E731
        want = fn(None, a)
        assert torch.equal(want, f(a, held)), name  # the premise: eager divides by `held`
        # a folder a name ("//") could not spell: `tmp_path / "//"` is the root
        got = _kernel_result(fn, a, tmp_path / f"spelling{i}")
        assert torch.equal(got, want), (name, got, want)


DIVIDENDS = [(torch.int8, 259), (torch.int8, -129), (torch.int8, 128), (torch.int32, 2**31 + 5),
             (torch.int64, 2**63)]


@pytest.mark.parametrize(("dtype", "s"), DIVIDENDS,
                         ids=[f"{str(d).removeprefix('torch.')}-{s}" for d, s in DIVIDENDS])
def test_an_integer_dividend_wraps_to_the_dtype_as_eagers(dtype, s, tmp_path):
    """The number divided (`259 // b`): eager wraps it too; the kernel failed ("Scalar 259 is
    out of range for type int8", and at the lowest integer its negation by -1) or divided
    another number. The lowest int64 is written `-9223372036854775808`: the negation of a
    number past int64, which the interpreter computes in Python and Triton's compiler on the
    constant before typing it (an int64: signed division and comparison, below for sm_90)."""
    # by -1 where eager's division does not trap (int64's lowest by -1 does, as x86's)
    minus_one = [-1] if wrapped(s, dtype) != torch.iinfo(torch.int64).min else []
    b = torch.tensor([[3, -3, 7, -7, 100, -100, 1, *minus_one, 2, -2]], dtype=dtype)
    for i, (name, f) in enumerate(SPELLINGS.items()):
        fn = lambda m, b, f=f: f(s, b * 1)  # noqa: E731
        want = fn(None, b)
        assert torch.equal(want, f(wrapped(s, dtype), b)), name  # the premise
        got = _kernel_result(fn, b, tmp_path / f"spelling{i}")
        assert torch.equal(got, want), (name, got, want)


@pytest.mark.parametrize("divisor", [0, 256, -256, 2**63])
def test_an_integer_divisor_wrapping_to_zero_is_refused_by_name(divisor):
    """Eager refuses an int8 division by 256 (0 in int8) as by 0: the kernel divided by 256
    (or gave 0) instead; the division is left to eager, which raises, and said so."""
    a = _dividends(torch.int8)
    for name, f in SPELLINGS.items():
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            f(a, divisor)  # the premise
        analysis = analyze(Lambda(lambda m, a, f=f: f(a * 1, divisor) + 1, 1), a)
        fused = [op for c in analysis.clusters for op in c.ops]
        assert not set(fused) & {"remainder", "floor_divide", "div"}, (name, fused)
        text = " ".join(r.reason for r in analysis.rejections)
        assert f"divides by {divisor}" in text and "ZeroDivisionError" in text, (name, text)


def test_wrapped_is_eagers_conversion():
    """`wrapped` against eager's own conversion of a number beside a tensor (an add)."""
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        for v in (0, 1, -1, 127, 128, -128, -129, 255, 256, 259, 2**15, -2**15 - 1, 2**31 + 5,
                  -2**31 - 3, 2**32, 2**63 - 1, 2**63, 2**63 + 5, -2**63, 2**64 - 1):
            assert wrapped(v, dtype) == (torch.zeros((), dtype=dtype) + v).item(), (dtype, v)


def test_wrapped_numbers_compile_for_sm90(tmp_path):
    """Through Triton's compiler front end for an sm_90 GPU (the interpreter accepts code the
    compiler rejects): 2**31 + 5 and 2**63 unwrapped were an unsigned literal beside a
    signed tensor ("different signedness"); -2**63 is an int64 (compared and filled with)."""
    models = [(lambda m, a: (a * 1) // (2**31 + 5), torch.int32),
              (lambda m, a: torch.remainder(a * 1, 2**63), torch.int64),
              (lambda m, a: torch.div(2**63, a * 1, rounding_mode="floor"), torch.int64),
              (lambda m, a: torch.where(a * 1 > -2**63, a, -2**63), torch.int64),
              (lambda m, a: torch.div(128, a * 1, rounding_mode="trunc"), torch.int8),
              (lambda m, a: (a * 1) % 259, torch.int8)]
    jobs = []
    for i, (fn, dtype) in enumerate(models):
        a = torch.tensor([[3, -3, 7, -7]], dtype=dtype)
        analysis = analyze(Lambda(fn, 1), a)
        values = capture_values(analysis, a)
        jobs += [(generate(analysis, c), tmp_path / f"k{i}", cluster_inputs(analysis, c, values))
                 for c in analysis.clusters]
    assert len(jobs) == len(models)
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled
