"""A Python integer beside an integer tensor is read as eager reads it, op family by family.

Eager (the CPU's, checked in each test's premise) converts the number to the dtype the op
computes in. Arithmetic, comparisons and bitwise ops wrap it to the dtype's width: int8's
`x + 259` adds 3, `x < 259` compares with 3 (not with 259: no exact comparison), `x & -300`
masks with -44. The kernel failed instead ("Scalar 259 is out of range for type int8").
`torch.where`, `masked_fill` and `clamp` check that it fits and raise where it does not
("value cannot be converted to type int8_t without overflow"): the op is left to eager,
by name, where the kernel failed. ``OpSpec.int_scalar`` says which an op does.
"""

import pytest
import torch
from codegen_harness import Lambda, run_kernel

from fusion_core.codegen import generate
from fusion_core.ir.registry import CHECKS, SPECS, WRAPS
from fusion_core.ir.rounding import converts, wrapped
from fusion_core.pipeline import analyze

# how each spelling combines tensor `a` with number `s`, by family
WRAPPING = {
    "arithmetic": {"+": lambda a, s: a + s, "radd": lambda a, s: s + a,
                   "-": lambda a, s: a - s, "rsub": lambda a, s: s - a,
                   "*": lambda a, s: a * s, "torch.mul": torch.mul},
    "comparison": {"<": lambda a, s: a < s, "<=": lambda a, s: a <= s,
                   ">": lambda a, s: a > s, ">=": lambda a, s: a >= s,
                   "==": lambda a, s: a == s, "ne": torch.ne, "rlt": lambda a, s: s < a},
    "bitwise": {"&": lambda a, s: a & s, "|": lambda a, s: a | s, "^": lambda a, s: a ^ s,
                "rxor": lambda a, s: s ^ a},
}
# (dtype, a number its range cannot hold)
NUMBERS = [(torch.int8, 259), (torch.int8, -300), (torch.int8, 128), (torch.uint8, 300),
           (torch.uint8, -1), (torch.int16, 70000), (torch.int32, 2**31 + 5),
           (torch.int32, -2**31 - 3), (torch.int64, 2**63 + 5)]
IDS = [f"{str(d).removeprefix('torch.')}-{s}" for d, s in NUMBERS]


def _values(dtype):
    info = torch.iinfo(dtype)
    return torch.tensor([[info.min, info.max, 0, 1, 3, 44, 100, info.min + 1]], dtype=dtype)


def _kernel_result(fn, a, tmp_path):
    analysis = analyze(Lambda(fn, 1), a)
    (cluster,) = analysis.clusters
    return run_kernel(generate(analysis, cluster), tmp_path, (a,))[0]


@pytest.mark.parametrize("family", list(WRAPPING))
@pytest.mark.parametrize(("dtype", "s"), NUMBERS, ids=IDS)
def test_a_number_wraps_to_the_dtype_as_eagers(family, dtype, s, tmp_path):
    a = _values(dtype)
    for name, f in WRAPPING[family].items():
        fn = lambda m, a, f=f: f(a * 1, s)  # noqa: E731
        want = fn(None, a)
        assert torch.equal(want, f(a, wrapped(s, dtype))), name  # the premise: eager wraps
        got = _kernel_result(fn, a, tmp_path / name)
        assert got.dtype == want.dtype and torch.equal(got, want), (name, got, want)


# how each spelling fills or bounds tensor `a` with number `s`
CHECKING = {
    "where-other": lambda a, s: torch.where(a > 0, a * 1, s),
    "where-input": lambda a, s: torch.where(a > 0, s, a * 1),
    "masked_fill": lambda a, s: (a * 1).masked_fill(a > 0, s),
    "clamp-max": lambda a, s: torch.clamp(a * 1, max=s),
    "clamp-min": lambda a, s: (a * 1).clamp(min=s),
}


REFUSED = [(d, s) for d, s in NUMBERS if (d, s) != (torch.uint8, -1)]


@pytest.mark.parametrize(("dtype", "s"), REFUSED,
                         ids=[f"{str(d).removeprefix('torch.')}-{s}" for d, s in REFUSED])
def test_a_number_the_dtype_cannot_hold_is_refused_by_name_where_eager_raises(dtype, s):
    a = _values(dtype)
    for name, f in CHECKING.items():
        with pytest.raises(RuntimeError, match="without overflow"):
            f(a, s)  # the premise
        analysis = analyze(Lambda(lambda m, a, f=f: f(a, s) + 1, 1), a)
        fused = [op for c in analysis.clusters for op in c.ops]
        assert not set(fused) & {"where", "masked_fill", "clamp"}, (name, fused)
        text = " ".join(r.reason for r in analysis.rejections)
        held = str(dtype).removeprefix("torch.")
        assert f"takes {s}, which {held} cannot hold" in text, (name, text)


def test_a_number_the_dtype_holds_is_still_fused_where_eager_checks(tmp_path):
    """The check refuses only what eager refuses: the dtype's own bounds fill and clamp, and
    an unsigned dtype takes a negative number down to -max, wrapped (uint8's -1 is 255)."""
    for dtype in (torch.int8, torch.uint8, torch.int32):
        a, info = _values(dtype), torch.iinfo(dtype)
        for name, f in CHECKING.items():
            for s in (info.min, info.max, *([-1, -info.max] if info.min == 0 else [])):
                fn = lambda m, a, f=f, s=s: f(a, s)  # noqa: E731
                got = _kernel_result(fn, a, tmp_path / f"{dtype}-{name}-{s}")
                assert torch.equal(got, fn(None, a)), (dtype, name, s)


def test_the_registry_says_how_each_op_converts_its_number():
    """The lowering reads one fact per op (``OpSpec.int_scalar``), none of op names."""
    wraps = {n for n, s in SPECS.items() if s.int_scalar == WRAPS}
    checks = {n for n, s in SPECS.items() if s.int_scalar == CHECKS}
    assert {"add", "sub", "rsub", "mul", "lt", "eq", "bitwise_xor", "remainder"} <= wraps
    assert checks == {"where", "masked_fill", "clamp"}


def test_converts_is_eagers_checked_conversion():
    """`converts` against eager's own check (a `masked_fill` of the number)."""
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        for v in (0, -1, 127, 128, -128, -129, 255, 256, -255, -256, 2**15, -2**15 - 1,
                  2**31 - 1, 2**31, -2**31 - 1, 2**32 - 1, 2**63 - 1, -2**63):
            try:
                torch.zeros(1, dtype=dtype).masked_fill(torch.ones(1, dtype=torch.bool), v)
                eager = True
            except RuntimeError:
                eager = False
            assert converts(v, dtype) is eager, (dtype, v)


# how each spelling scales: (dtype, model, alpha)
SCALED = {
    "add-number": (torch.int8, lambda a, k: torch.add(a, 100, alpha=k), 2),
    "sub-number": (torch.int8, lambda a, k: torch.sub(a, 259, alpha=k), 3),
    "add-uint8": (torch.uint8, lambda a, k: torch.add(a, 7, alpha=k), -1),
    "sub-int32": (torch.int32, lambda a, k: torch.sub(a, 2**30, alpha=k), 5),
    # eager checks -alpha for sub: -128 fits int8, and 128 is written -128
    "sub-tensor-128": (torch.int8, lambda a, k: torch.sub(a, a * 2, alpha=k), 128),
    "rsub-int32": (torch.int32, lambda a, k: torch.rsub(a, 9, alpha=k), 2**31),
}


@pytest.mark.parametrize("name", list(SCALED))
def test_alpha_times_a_number_wraps_to_the_dtype_as_eagers(name, tmp_path):
    """`torch.add(int8, 100, alpha=2)` adds 200 wrapped (-56): the kernel's literals
    multiplied as Python numbers gave 200 ("Scalar 200 is out of range for type int8")."""
    dtype, f, k = SCALED[name]
    a = _values(dtype)
    fn = lambda m, a: f(a * 1, k)  # noqa: E731
    want = fn(None, a)
    got = _kernel_result(fn, a, tmp_path)
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


# (dtype, alpha, the spelling eager refuses it in: sub checks -alpha)
ALPHAS = [(torch.int8, 300, "add"), (torch.int8, -129, "add"), (torch.uint8, -256, "add"),
          (torch.int32, 2**31, "add"), (torch.int8, -128, "sub"), (torch.int8, 300, "sub"),
          (torch.int32, -2**31, "sub"), (torch.uint8, 256, "sub")]


@pytest.mark.parametrize(("dtype", "alpha", "op"), ALPHAS,
                         ids=[f"{op}-{str(d).removeprefix('torch.')}-{k}" for d, k, op in ALPHAS])
def test_an_alpha_the_dtype_cannot_hold_is_refused_by_name_where_eager_raises(dtype, alpha, op,
                                                                             tmp_path):
    a = _values(dtype)
    f = getattr(torch, op)
    for name, g in {"number": lambda a: f(a, 1, alpha=alpha),
                    "tensor": lambda a: f(a, a * 2, alpha=alpha)}.items():
        with pytest.raises(RuntimeError, match="without overflow"):
            g(a)  # the premise
        analysis = analyze(Lambda(lambda m, a, g=g: torch.neg(g(a * 1)), 1), a)
        fused = [o for c in analysis.clusters for o in c.ops]
        assert op not in fused, (name, fused)
        text = " ".join(r.reason for r in analysis.rejections)
        held = str(dtype).removeprefix("torch.")
        assert f"takes alpha={alpha}" in text and f"which {held} cannot hold" in text, (name,
                                                                                      text)
