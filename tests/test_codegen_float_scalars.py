"""A Python float the kernel takes (``plan.ScalarArg``: `math.sqrt(c)` of a shape) is fp32
inside the kernel however the launch types it: Triton's launch passes fp32, torch.compile's
launch of the package's operator passes fp64, and an fp64 scalar would turn the whole chain
it touches into fp64 arithmetic (on an H100 the applied gpt12 example's masked softmax ran
3x slower so under torch.compile, and off the eager launcher's result)."""

from __future__ import annotations

import math
import re
import struct

import pytest
import torch
from codegen_harness import to_device, ttir_for_gpu
from test_run_scalars import SHAPE, Attention

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.pipeline import analyze

NUMBERS = {"sqrt": math.sqrt(16), "pow": 16 ** -0.5, "int": 16}


def _kernel(scale: str):
    a = analyze(Attention(scale), SHAPE, SHAPE, capture="fx")
    return generate(a, a.clusters[0])


def _f64_tensors(ttir: str) -> list[str]:
    return [line.strip() for line in ttir.splitlines() if re.search(r"tensor<[^>]*xf64>", line)]


@pytest.mark.parametrize("scale", ["sqrt", "pow"])
def test_an_fp64_float_scalar_leaves_no_fp64_arithmetic(scale, tmp_path):
    scores = torch.randn(2, 8, 8)
    ttir, names = ttir_for_gpu(_kernel(scale), tmp_path, (scores, NUMBERS[scale]),
                               types={"scalar0": "fp64"})
    assert "scalar0" in names
    assert _f64_tensors(ttir) == []
    assert re.search(r"arith\.truncf %\w+ : f64 to f32", ttir), ttir[:3000]


def test_an_int_scalar_stays_an_int(tmp_path):
    """`/ c` with `c` an int: Triton and torch.compile both pass an integer; the kernel
    divides in fp32 as eager does, and no cast is written for it."""
    scores = torch.randn(2, 8, 8)
    kernel = _kernel("int")
    assert "tl.cast(scalar0" not in kernel.source  # a cast of an i32 would compile alike
    ttir, _ = ttir_for_gpu(kernel, tmp_path, (scores, NUMBERS["int"]))
    assert "truncf" not in ttir and "f64" not in ttir
    assert re.search(r"arith\.sitofp %\w+ : i32 to f32", ttir), ttir[:3000]


@pytest.mark.cpu
@pytest.mark.parametrize("scale", ["sqrt", "pow", "int"])
def test_the_kernel_with_its_scalar_still_matches_eager_under_the_interpreter(scale, tmp_path):
    kernel = _kernel(scale)
    (path,) = write_kernels([kernel], tmp_path)
    launch = getattr(load_kernel(path), kernel.name)
    q, k = torch.randn(SHAPE), torch.randn(SHAPE)
    got = launch(torch.bmm(q, k.transpose(1, 2)), NUMBERS[scale])
    assert torch.allclose(got, Attention(scale)(q, k), atol=1e-6, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("scale", ["sqrt", "pow"])
def test_torch_compile_of_the_operator_gives_the_launchers_result_bit_for_bit(scale, tmp_path):
    """The package's operator under torch.compile (Inductor launches the kernel itself,
    the float typed fp64) against the launcher called eagerly (Triton's launch, fp32)."""
    import uuid

    from fusion_core.codegen import operators

    kernel = _kernel(scale)
    (path,) = write_kernels([kernel], tmp_path)
    module = load_kernel(path)
    op = operators._register(f"floatscalar_{uuid.uuid4().hex[:8]}", kernel.name, module,
                             kernel.name, 1, (torch.float32,), ("float",))
    gen = torch.Generator(device="cuda").manual_seed(0)
    scores = torch.randn(8, 512, 512, device="cuda", generator=gen)
    eager = getattr(module, kernel.name)(scores, NUMBERS[scale])
    compiled = torch.compile(lambda s: op.operator(s, NUMBERS[scale]), fullgraph=True)(scores)
    assert torch.equal(compiled, eager)


@pytest.mark.gpu
@pytest.mark.parametrize("scale", ["sqrt", "pow"])
def test_torch_compile_of_an_fp64_operator_takes_the_same_double(scale, tmp_path):
    """The double's bits (two int32 words in both launches) under torch.compile against the
    launcher called eagerly: the same result, bit for bit, and eager's to fp64 rounding."""
    import uuid

    from fusion_core.codegen import operators

    kernel, _, _ = _kernel64(scale)
    (path,) = write_kernels([kernel], tmp_path)
    module = load_kernel(path)
    op = operators._register(f"floatscalar64_{uuid.uuid4().hex[:8]}", kernel.name, module,
                             kernel.name, 1, (torch.float64,), ("float",))
    number = {"sqrt": math.sqrt(24), "pow": 24 ** -0.5}[scale]  # not an fp32 number
    gen = torch.Generator(device="cuda").manual_seed(0)
    scores = torch.randn(8, 512, 512, device="cuda", dtype=torch.float64, generator=gen)
    eager = getattr(module, kernel.name)(scores, number)
    compiled = torch.compile(lambda s: op.operator(s, number), fullgraph=True)(scores)
    assert torch.equal(compiled, eager)
    want = (scores / number if scale == "sqrt" else scores * number).softmax(-1)
    assert (eager - want).abs().max() < 1e-14


def _kernel64(scale: str):
    shape = (2, 8, 24)
    q, k = (torch.randn(shape, dtype=torch.float64) for _ in range(2))
    a = analyze(Attention(scale), q, k, capture="fx")
    return generate(a, a.clusters[0]), q, k


@pytest.mark.parametrize("scale", ["sqrt", "pow"])
def test_an_fp64_chain_takes_the_double_eager_uses(scale, tmp_path):
    """Beside fp64 tensors eager divides by the double `math.sqrt(c)`; the kernel takes its
    bits (`_double_bits`): the result is eager's to fp64 rounding, where an fp32 scalar
    (Triton's launch of a float) erred by 1e-8 (measured before this form)."""
    kernel, q, k = _kernel64(scale)
    (path,) = write_kernels([kernel], tmp_path)
    launch = getattr(load_kernel(path), kernel.name)
    number = {"sqrt": math.sqrt(24), "pow": 24 ** -0.5}[scale]
    q, k = to_device(q), to_device(k)  # on a GPU: Triton's own launch of the bits
    got = launch(torch.bmm(q, k.transpose(1, 2)), number)
    assert got.dtype == torch.float64
    assert (got - Attention(scale)(q, k)).abs().max() < 1e-14


def test_the_double_bits_compile_to_fp64_without_rounding(tmp_path):
    """Compiled for sm_90 (each word an i32, as both launches type it): the scalar is a
    bitcast of the joined words, with no fp32 step in between."""
    kernel, q, k = _kernel64("sqrt")
    scores = torch.bmm(q, k.transpose(1, 2))
    ttir, names = ttir_for_gpu(kernel, tmp_path, (scores, math.sqrt(24)))
    assert {"scalar0_hi", "scalar0_lo"} <= set(names)
    assert re.search(r"tt\.bitcast %\w+ : i64 -> f64", ttir), ttir[:3000]
    assert "truncf" not in ttir and "f32" not in ttir


@pytest.mark.parametrize("number", [math.sqrt(24), 0.1, -2.5, 0.0, 5e-324])
def test_the_launcher_passes_a_double_as_two_int32_words(number):
    """Inductor in torch 2.11 fails compiling a kernel call given a constant past int32 (an
    H100 run of the test above), so each word fits one; joined as the kernel joins them
    (the low word zero-extended: 0.1's is negative as an int32) they are the double."""
    from fusion_core.codegen.runtime import _double_bits

    high, low = _double_bits(number)
    assert all(-2**31 <= w < 2**31 for w in (high, low))
    joined = (high << 32) | (low & 0xFFFFFFFF)
    assert struct.unpack("<d", struct.pack("<q", joined))[0] == number


@pytest.mark.parametrize("number", [0.1, math.pi])
def test_a_double_whose_low_word_is_negative_reaches_the_kernel_exactly(number, tmp_path):
    """0.1's low word is negative as an int32, pi's positive: the kernel's division by the
    number is eager's to fp64 rounding either way (a sign-extended low word would change
    its high bits)."""
    kernel, q, k = _kernel64("sqrt")
    (path,) = write_kernels([kernel], tmp_path)
    launch = getattr(load_kernel(path), kernel.name)
    scores = to_device(torch.bmm(q, k.transpose(1, 2)))
    got = launch(scores, number)
    assert (got - (scores / number).softmax(-1)).abs().max() < 1e-14


class _Compared(torch.nn.Module):
    """A comparison reads the scale: its output is bool, its operands fp64."""

    def forward(self, s):
        b, t, c = s.shape
        return torch.where(s > math.sqrt(c), s, 0.0).softmax(-1)


class _Mixed(torch.nn.Module):
    """The same scale read beside fp32 values and beside fp64 ones."""

    def forward(self, s):
        b, t, c = s.shape
        k = c ** 0.5
        return ((s.float() / k).double() * k).softmax(-1)


def _generated(model: torch.nn.Module, s: torch.Tensor, tmp_path):
    a = analyze(model, s, capture="fx")
    (cluster,) = a.clusters
    kernel = generate(a, cluster)
    (path,) = write_kernels([kernel], tmp_path)
    return kernel, getattr(load_kernel(path), kernel.name)


def test_a_comparison_with_fp64_operands_takes_the_double(tmp_path):
    """A score between √24 and its fp32 rounding (4.8989796...) passes eager's `>` against
    the double and would fail against the fp32 scale."""
    s = torch.randn(2, 8, 24, dtype=torch.float64)
    s[0, 0, 3] = 4.8989795
    kernel, launch = _generated(_Compared(), s, tmp_path)
    assert "bitcast=True" in kernel.source
    s = to_device(s)
    got = launch(s, math.sqrt(24))
    assert (got - _Compared()(s)).abs().max() < 1e-14


def test_a_scale_read_beside_fp32_values_too_stays_fp32(tmp_path):
    """Readers of both kinds: the fp32 one keeps eager's fp32 rounding (one scalar serves
    both, so the fp64 reader takes the fp32 scale, as before the double's bits existed)."""
    s = torch.randn(2, 8, 24, dtype=torch.float64)
    kernel, launch = _generated(_Mixed(), s, tmp_path)
    assert "bitcast=True" not in kernel.source and "tl.cast(scalar0, tl.float32)" in kernel.source
    s = to_device(s)
    got = launch(s, 24 ** 0.5)
    assert (got - _Mixed()(s)).abs().max() < 1e-7
