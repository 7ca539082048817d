"""fusion_core._interpret turns off the interpreter's int32 overflow re-check, whose result
only a `debug` build reads: integer arithmetic keeps its values (it wraps as compiled code
does), and the interpreter no longer redoes every integer op in int64."""

import pytest
import torch

import fusion_core._interpret  # noqa: F401  (first: TRITON_INTERPRET before triton loads)

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402


@triton.jit
def _scaled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 65536 + 7, mask=mask)


@pytest.mark.cpu
def test_the_interpreter_skips_the_overflow_recheck_it_would_drop():
    from triton.runtime import interpreter

    options = interpreter.interpreter_builder.options
    assert options.debug is False
    assert options.sanitize_overflow is False


@pytest.mark.cpu
def test_int32_arithmetic_past_its_range_wraps_as_eager():
    x = torch.tensor([1, 65535, 65536, -65537, 32768], dtype=torch.int32)
    out = torch.empty_like(x)
    _scaled[(1,)](x, out, x.numel(), BLOCK=8)
    assert torch.equal(out, x * 65536 + 7)
