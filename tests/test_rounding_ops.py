"""remainder, floor_divide and div's rounding modes fuse and round as eager does.

torch follows Python's signs (the remainder takes the divisor's sign, floor division rounds
toward -inf) where Triton's `//` and `%` truncate; each case has negative values on both
sides, in every spelling FX and torch.export capture, for float32, int64 and int32 and the
mixes torch promotes to float. Float cluster inputs are drawn fresh (±[0.5, 2]) by the
harness, so float cases scale them in the chain; integer inputs are the test's own.
"""

import pytest
import torch
from codegen_harness import Lambda, check_model, compile_for_gpu, run_kernel

from fusion_core.codegen import generate
from fusion_core.codegen.reference import capture_values, cluster_inputs
from fusion_core.pipeline import analyze
from fusion_core.validate import validate
from fusion_core.validate.inputs import divisor_inputs

R, C = 4, 40


def f32():
    return torch.randn(R, C)


def ints(dtype=torch.int64):
    return torch.randint(-20, 21, (R, C), dtype=dtype)


def divisors(dtype=torch.int64):
    """Nonzero, either sign: eager on the CPU refuses an integer division by zero."""
    mag = torch.randint(1, 7, (R, C), dtype=dtype)
    return torch.where(torch.rand(R, C) < 0.5, -mag, mag)


# op -> how each spelling computes it from (dividend, divisor)
SPELLINGS = {
    "remainder": [torch.remainder, lambda a, b: a % b, lambda a, b: a.remainder(b)],
    "floor_divide": [torch.floor_divide, lambda a, b: a // b, lambda a, b: a.floor_divide(b)],
    "div_floor": [lambda a, b: torch.div(a, b, rounding_mode="floor"),
                  lambda a, b: a.div(b, rounding_mode="floor")],
    "div_trunc": [lambda a, b: torch.div(a, b, rounding_mode="trunc"),
                  lambda a, b: a.div(b, rounding_mode="trunc")],
}
OP_NAME = {"remainder": "remainder", "floor_divide": "floor_divide", "div_floor": "div",
           "div_trunc": "div"}


def _float_cases(op):
    f = SPELLINGS[op]
    return [
        # tensor divisor, magnitudes that give quotients from about -30 to 30
        ("f32-tensor", lambda m, x, y: f[0](x * 7, y) * 2, (f32(), f32())),
        # integer-valued floats: exact multiples and quotients that are whole numbers
        ("f32-whole", lambda m, x, y: f[-1](torch.round(x * 5), torch.round(y * 3)) + 1,
         (f32(), f32())),
        ("f32-scalar", lambda m, x: f[0](x * 7, 2.5) - 1, (f32(),)),
        ("f32-negative-scalar", lambda m, x: f[-1](x * 7, -1.5) * 3, (f32(),)),
    ]


def _int_cases(op, dtype):
    f = SPELLINGS[op]
    tag = str(dtype).removeprefix("torch.")
    return [
        (f"{tag}-tensor", lambda m, a, b: f[0](a + 1, b) * 2, (ints(dtype), divisors(dtype))),
        (f"{tag}-scalar", lambda m, a: f[-1](a - 1, 3) + 1, (ints(dtype),)),
        (f"{tag}-negative-scalar", lambda m, a: f[0](a * 3, -4) - 1, (ints(dtype),)),
    ]


def _mixed_cases(op):
    f = SPELLINGS[op]
    return [
        # torch promotes to float: int tensor by a float scalar, int by a float tensor
        ("int-by-float-scalar", lambda m, a: f[0](a + 1, 2.5) * 2, (ints(),)),
        ("int-by-float-tensor", lambda m, a, y: f[-1](a - 1, y * 3) + 1, (ints(), f32())),
        ("float-by-int-tensor", lambda m, x, b: f[0](x * 9, b) * 2, (f32(), divisors())),
    ]


CASES = [pytest.param(op, fn, inputs, id=f"{op}-{tag}") for op in SPELLINGS
         for tag, fn, inputs in (_float_cases(op) + _int_cases(op, torch.int64)
                                 + _int_cases(op, torch.int32) + _mixed_cases(op))]


@pytest.mark.parametrize("op,fn,inputs", CASES)
def test_rounding_op_matches_eager(op, fn, inputs, tmp_path):
    checked = check_model(Lambda(fn), inputs, tmp_path, n_clusters=1)
    (cluster,) = checked.analysis.clusters
    assert OP_NAME[op] in cluster.ops, cluster.chain


# Every spelling of each op, as FX records it (torch.*, Tensor method, operator) and as
# torch.export does (aten overloads: remainder.Tensor/.Scalar/.Scalar_Tensor, floor_divide,
# div.Tensor_mode), a scalar dividend among them (not for a Tensor method: the last).
SPELLED = [(op, i) for op, fs in SPELLINGS.items() for i in range(len(fs))]


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_every_spelling_fuses(capture, tmp_path):
    for op, i in SPELLED:
        f = SPELLINGS[op][i]
        cases = [(lambda m, x, y, f=f: f(x * 7, y) * 2, (f32(), f32())),
                 (lambda m, a, f=f: f(a * 3, -4) + 1, (ints(),))]
        if i < len(SPELLINGS[op]) - 1:
            cases.append((lambda m, b, f=f: f(7, b * 1) * 2, (divisors(),)))
        for k, (fn, inputs) in enumerate(cases):
            checked = check_model(Lambda(fn, len(inputs)), inputs, tmp_path / f"{op}{i}-{k}",
                                  n_clusters=1, capture=capture)
            (cluster,) = checked.analysis.clusters
            assert OP_NAME[op] in cluster.ops, (op, i, k, cluster.chain)


def test_float_floor_division_is_eager_not_floor_of_quotient(tmp_path):
    # 1.0 / 0.1 rounds to 10.0 in float32, but 0.1f is above 0.1: eager's floor division is 9
    # (as Python's 1.0 // 0.1), and its remainder about 0.1
    fn = Lambda(lambda m, x: torch.floor_divide(x * 0 + 1.0, 0.1) * 1)
    analysis, out = _run(fn, (f32(),), tmp_path)
    assert torch.equal(out, torch.full((R, C), 9.0)), out.unique()
    assert torch.floor_divide(torch.ones(1), 0.1).item() == 9.0  # eager, for the record


def _run(model, inputs, tmp_path):
    """The model's one cluster, whose inputs are the model's, generated and run on `inputs`
    as they are (not redrawn, and not run in eager first: it may refuse them)."""
    analysis = analyze(model, *inputs)
    (cluster,) = analysis.clusters
    names = [n.name for n in analysis.graph.inputs]
    args = tuple(inputs[names.index(n)] for n in cluster.inputs)
    (out,) = run_kernel(generate(analysis, cluster), tmp_path, args)
    return analysis, out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_operands_round_as_eager_holds_them(dtype, tmp_path):
    """A 16-bit `x * 3.3` is computed in float32; a rounding op reads it rounded, as eager
    holds it (a value a rounding below a step gave a whole unit less), and a remainder's
    number in the tensor's dtype, as eager's (by 0.7002 in float16: about 2000 of these
    elements differed); floor and trunc division keep theirs in float32, as eager does."""
    torch.manual_seed(0)
    x = torch.randn(64, 40).to(dtype)
    # results read as float32: Triton's interpreter stores bfloat16 truncated, not rounded
    fns = [lambda m, x: torch.floor_divide(x * 3.3, 0.7).float() * 2,
           lambda m, x: torch.remainder(x * 3.3, 0.7).float() * 2,
           lambda m, x: torch.div(x * 3.3, 0.7, rounding_mode="trunc").float() + 1,
           lambda m, x: torch.round(x * 3.3).float() + 1]
    for i, fn in enumerate(fns):
        _, out = _run(Lambda(fn), (x,), tmp_path / str(i))
        want = fn(None, x)
        assert torch.equal(out, want), (i, int((out != want).sum()))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_division_by_zero_gives_zero(dtype, tmp_path):
    """Eager on the CPU refuses an integer divisor of 0 (on CUDA floor division gives 0):
    each op gives 0 there; the lowest integer by -1, whose division overflows (x86 traps;
    eager's trunc division did, here), wraps as eager's floor division does. The helpers
    replace both divisors before Triton divides (``codegen/rounding.py``): the interpreter
    divides in NumPy, which does not fault either way, so that part is by construction."""
    low = torch.iinfo(dtype).min
    a = torch.tensor([[7, -7, 5, low, low, 3]], dtype=dtype)
    b = torch.tensor([[0, 0, -1, -1, 1, 2]], dtype=dtype)
    fns = {"remainder": lambda m, a, b: torch.remainder(a * 1, b),
           "floor": lambda m, a, b: torch.floor_divide(a * 1, b),
           "trunc": lambda m, a, b: torch.div(a * 1, b, rounding_mode="trunc")}
    got = {k: _run(Lambda(fn), (a, b), tmp_path / k)[1] for k, fn in fns.items()}
    assert got["remainder"].tolist() == [[0, 0, 0, 0, 0, 1]]
    assert got["floor"].tolist() == [[0, 0, -5, low, low, 1]]
    assert got["trunc"].tolist() == [[0, 0, -5, low, low, 1]]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_the_lowest_integer_floor_divided_by_a_negative_divisor_is_eagers(dtype, tmp_path):
    """Negating the dividend to divide non-negative values overflowed at the lowest integer
    (`-2**31 // -7` gave -306783379, eager 306783378): the quotient is corrected instead."""
    low = torch.iinfo(dtype).min
    a = torch.tensor([[low, low, low + 1, -7, 7]], dtype=dtype)
    b = torch.tensor([[-3, -7, -2, -2, -2]], dtype=dtype)
    for k, fn in {"floor": lambda m, a, b: torch.floor_divide(a * 1, b),
                  "div": lambda m, a, b: torch.div(a * 1, b, rounding_mode="floor"),
                  "remainder": lambda m, a, b: torch.remainder(a * 1, b)}.items():
        got = _run(Lambda(fn), (a, b), tmp_path / k)[1]
        assert torch.equal(got, fn(None, a, b)), (k, got, fn(None, a, b))


def test_brief_chain_is_one_cluster(tmp_path):
    """remainder and floor_divide between pointwise ops no longer split the chain."""
    def fn(m, x):
        a = torch.remainder(x, 3.0) * 2
        b = torch.floor_divide(a, 2.0) + 1
        return b.relu()

    checked = check_model(Lambda(fn), (torch.randn(4, 8) * 5,), tmp_path, n_clusters=1)
    assert checked.analysis.clusters[0].ops == ("remainder", "mul", "floor_divide", "add",
                                                "relu")


def test_rounding_kernels_compile_for_sm90(tmp_path):
    """Every helper through Triton's compiler front end for an sm_90 GPU (the interpreter
    accepts code the compiler rejects): float32, float16, int64, int32 and mixed, tensor and
    scalar divisors, a scalar dividend."""
    half = torch.float16
    models = []
    for fs in SPELLINGS.values():
        f = fs[0]
        models += [
            (lambda m, x, y, f=f: f(x * 7, y) * 2, (f32(), f32())),
            (lambda m, x, f=f: f(x * 7, -2.5) + 1, (f32(),)),
            (lambda m, x, y, f=f: f(x * 7, y) * 2, (f32().to(half), f32().to(half))),
            (lambda m, x, y, f=f: f(x * 7, y) * 2,
             (f32().to(torch.bfloat16), f32().to(torch.bfloat16))),
            (lambda m, a, b, f=f: f(a + 1, b) * 2, (ints(), divisors())),
            (lambda m, a, f=f: f(a - 1, 3) + 1, (ints(torch.int32),)),
            (lambda m, b, f=f: f(7, b * 1) + 1, (divisors(torch.int32),)),
            (lambda m, a, f=f: f(a + 1, 2.5) * 2, (ints(),)),
            # compiled, a float remainder is libdevice's fmod, of float32 or float64 operands
            (lambda m, x, y, f=f: f(x * 7, y) * 2, (f32().double(), f32().double())),
            (lambda m, x, f=f: f(7.5, x * 1) + 1, (f32(),)),
        ]
    jobs = []
    for i, (fn, inputs) in enumerate(models):
        analysis = analyze(Lambda(fn, len(inputs)), *inputs)
        values = capture_values(analysis, *inputs)
        jobs += [(generate(analysis, c), tmp_path / f"k{i}", cluster_inputs(analysis, c, values))
                 for c in analysis.clusters]
    assert len(jobs) == len(models)
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled


def test_integer_divisor_inputs_are_drawn_nonzero_and_validation_runs():
    """Validation drew an integer input 0 or 1 (a flag) or from [0, 16): eager refused the
    division by 0 ("ZeroDivisionError"), and every cluster failed its check unrun."""
    def fn(m, x, i, j):
        return torch.remainder(x * 7, 3.0).relu(), torch.floor_divide(i + 1, j.t()) * 2 + 1

    x, i, j = torch.randn(4, 8), torch.randint(-9, 9, (4, 8)), torch.randint(1, 5, (8, 4))
    a = analyze(Lambda(fn), x, i, j)
    assert divisor_inputs(a.graph) == {2}  # `j`, read through its transpose
    assert len(a.clusters) == 2
    report = validate(a, timing=False)
    assert all(r.usable for r in report.results), [r.status for r in report.results]


@pytest.mark.parametrize("fn", [
    lambda m, a: torch.remainder(a * 1, 3),
    lambda m, a: torch.floor_divide(a * 1, 3),
    lambda m, a: torch.div(a * 1, 3, rounding_mode="trunc"),
], ids=["remainder", "floor_divide", "trunc"])
def test_an_unsigned_integer_division_is_left_to_eager_by_name(fn, tmp_path):
    """Triton refuses `//` and `%` of a uint8 beside a signed operand ("different
    signedness"): the kernel did not compile; the op is now refused by name instead."""
    a = torch.randint(0, 200, (4, 8), dtype=torch.uint8)
    analysis = analyze(Lambda(fn, 1), a)
    assert not any(c.ops and c.ops[-1] in ("remainder", "floor_divide", "div")
                   for c in analysis.clusters), [c.ops for c in analysis.clusters]
    text = " ".join(str(r) for r in analysis.rejections)
    assert "unsigned or bool dtype" in text, text


@pytest.mark.parametrize(("dtype", "a", "b"), [
    (torch.float16, 7.0, 0.7002), (torch.bfloat16, 1.0, 0.1001)])
def test_a_16_bit_trunc_division_truncates_the_rounded_quotient(dtype, a, b, tmp_path):
    """Eager's 16-bit `/` rounds the quotient to the dtype before truncating it (fp16
    7.0 / 0.7002 is 10); the kernel truncated the float32 quotient, 9.997: a unit less.
    A tensor of 64 elements: eager CPU's one-element path truncates unrounded (9)."""
    x = torch.full((4, 16), a, dtype=dtype)
    y = torch.full((4, 16), b, dtype=dtype) * torch.linspace(1.0, 1.05, 16, dtype=dtype)
    fn = lambda m, x, y: torch.div(x * 1, y, rounding_mode="trunc")  # noqa: E731
    _, out = _run(Lambda(fn), (x, y), tmp_path)
    want = fn(None, x, y)
    assert not torch.equal((x.float() / y.float()).trunc().to(dtype), want)  # the premise
    assert torch.equal(out, want), (out[0], want[0])
