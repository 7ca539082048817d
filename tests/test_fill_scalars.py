"""A Python number beside bool tensors, or a float filling integers, is read as eager reads it.

Eager (the CPU's, checked in each test's premise) converts `masked_fill`'s number to the
tensor's dtype: a bool tensor is filled with bools (259, -1, 0.5 and NaN are True, 0 and 0.0
False), an integer one with the float truncated toward 0 (int8's 2.7 is 2), and a float the
dtype cannot hold raises. The kernel held 259 or 2.7 in the filled value, which only the
store converted: what read it (`.int()`, `~`, `* 2`) differed. A Python integer beside bool
tensors only makes eager compute in int64 (`torch.where(m, b, 259)`, `b + 259`), where the
kernel's literal was an int32 and the products overflowed.
"""

import math

import pytest
import torch
from codegen_harness import Lambda, compile_for_gpu, run_kernel

from fusion_core.codegen import generate
from fusion_core.codegen.reference import capture_values, cluster_inputs
from fusion_core.ir.rounding import converted, converts
from fusion_core.pipeline import analyze

MASK = torch.tensor([[True, True, False, False, True, True, False, False]])
A = torch.tensor([[1, -2, 3, 100, -128, 127, 0, 5]], dtype=torch.int8)


def _kernel_result(fn, inputs, tmp_path):
    analysis = analyze(Lambda(fn, len(inputs)), *inputs)
    (cluster,) = analysis.clusters
    values = capture_values(analysis, *inputs)
    return run_kernel(generate(analysis, cluster), tmp_path,
                      cluster_inputs(analysis, cluster, values))[0]


@pytest.mark.parametrize("s", [259, 2, 0, -1, 256, 0.5, -0.5, 0.0, math.nan])
def test_a_bool_tensor_is_filled_with_bools_as_eagers(s, tmp_path):
    b = A > 0
    filled = b.masked_fill(MASK, s)
    assert filled.dtype is torch.bool and torch.equal(filled, b.masked_fill(MASK, bool(s)))
    for name, f in {"method": lambda b, m: (b | m).masked_fill(m, s),
                    "torch": lambda b, m: torch.masked_fill(b | m, m, s)}.items():
        # `~` and `.int()` read the filled value: 259 (or 0.5) where eager holds True
        fn = lambda _, b, m, f=f: (~f(b, m)).int() * 2 + f(b, m).int()  # noqa: E731
        got = _kernel_result(fn, (b, MASK), tmp_path / name)
        want = fn(None, b, MASK)
        assert got.dtype == want.dtype and torch.equal(got, want), (name, got, want)


# (dtype, a float it takes, what eager fills with)
FLOATS = [(torch.int8, 2.7, 2), (torch.int8, -2.7, -2), (torch.int8, -0.9, 0),
          (torch.uint8, 200.9, 200), (torch.int32, 16777217.5, 16777217),
          (torch.int64, -2.0**63, -2**63)]


@pytest.mark.parametrize(("dtype", "s", "held"), FLOATS,
                         ids=[f"{str(d).removeprefix('torch.')}-{s}" for d, s, _ in FLOATS])
def test_a_float_fills_integers_truncated_as_eagers(dtype, s, held, tmp_path):
    a = A.to(dtype)
    assert torch.equal(a.masked_fill(MASK, s), a.masked_fill(MASK, held))  # the premise
    fn = lambda _, a, m: (a * 1).masked_fill(m, s) * 2  # noqa: E731
    got = _kernel_result(fn, (a, MASK), tmp_path)
    want = fn(None, a, MASK)
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


# (dtype, a float it cannot hold)
REFUSED = [(torch.int8, 300.0), (torch.int8, 127.5), (torch.int8, -128.5), (torch.uint8, -0.5),
           (torch.uint8, -1.0), (torch.int32, 2.0**31)]


@pytest.mark.parametrize(("dtype", "s"), REFUSED,
                         ids=[f"{str(d).removeprefix('torch.')}-{s}" for d, s in REFUSED])
def test_a_float_the_dtype_cannot_hold_is_refused_by_name_where_eager_raises(dtype, s):
    a = A.to(dtype)
    with pytest.raises(RuntimeError, match="without overflow"):
        a.masked_fill(MASK, s)  # the premise
    analysis = analyze(Lambda(lambda _, a, m: (a * 1).masked_fill(m, s) + 1, 2), a, MASK)
    assert not any("masked_fill" in c.ops for c in analysis.clusters)
    text = " ".join(r.reason for r in analysis.rejections)
    held = str(dtype).removeprefix("torch.")
    assert f"takes {s}, which {held} cannot hold" in text, text


def test_converted_is_eagers_conversion_of_a_fill():
    """`converts` and `converted` against eager's `masked_fill` of the number: floats into
    integers, and any number into bools."""
    for dtype in (torch.bool, torch.int8, torch.uint8, torch.int32, torch.int64):
        for v in (0.5, -0.5, -0.0, 2.7, -2.7, 127.5, 128.0, -128.5, 255.5, 256.0, -1.0,
                  2.0**31, 2.0**31 - 0.5, -2.0**63, 1e30, math.inf, -math.inf, 259, -1, 0):
            try:
                eager = torch.zeros(1, dtype=dtype).masked_fill(MASK[0, :1], v).item()
            except RuntimeError:
                eager = None
            if isinstance(v, int) and dtype is not torch.bool:
                continue  # integers: tests/test_int_scalars.py
            assert converts(v, dtype) is (eager is not None), (dtype, v)
            if eager is not None:
                assert converted(v, dtype) == eager, (dtype, v)


# a Python integer beside bool tensors only: eager's results are int64, past int32
BESIDE_BOOLS = {
    "where": lambda _, b, m: torch.where(m, b, 259) * 2**20 * 2**20,
    "add": lambda _, b, m: ((b | m) + 259) * 2**20 * 2**20,
    "mul": lambda _, b, m: ((b | m) * 2**30) * 4,
    "clamp": lambda _, b, m: (b | m).clamp(max=5) * 2**20 * 2**20,
    "and": lambda _, b, m: ((b | m) & 7) * 2**20 * 2**20,
}


def test_an_integer_beside_bool_tensors_is_an_int64_as_eagers_interpreted_and_compiled(
        tmp_path):
    """The kernel's results match eager's under the interpreter, and the int64 constant goes
    through Triton's compiler front end for an sm_90 GPU (which rejects code the interpreter
    accepts)."""
    b, jobs = A > 0, []
    for name, fn in BESIDE_BOOLS.items():
        want = fn(None, b, MASK)
        assert want.dtype is torch.int64 and want.abs().max() >= 2**32, name  # past int32
        analysis = analyze(Lambda(fn, 2), b, MASK)
        (cluster,) = analysis.clusters
        job = (generate(analysis, cluster), tmp_path / name,
               cluster_inputs(analysis, cluster, capture_values(analysis, b, MASK)))
        got = run_kernel(*job)[0]
        assert got.dtype == want.dtype and torch.equal(got, want), (name, got, want)
        jobs.append(job)
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled
