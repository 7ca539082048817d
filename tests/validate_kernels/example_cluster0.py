"""Hand-written Triton kernels for ExampleNet's cluster 0 (x*2 -> relu -> +1), with broken
variants, for the validation gate tests. Imported from disk after TRITON_INTERPRET is set."""

import torch
import triton
import triton.language as tl

NAME = "cluster0"  # as in generated files: `NAME + "_kernel"` is the kernel

@triton.jit
def cluster0_kernel(in_ptr0, out_ptr0, n_elements, n_written, MODE: tl.constexpr,
                    BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_written
    v0 = tl.load(in_ptr0 + offs, mask=mask)
    v1 = v0 * 2.0
    if MODE == 1:  # wrong: relu dropped
        v2 = v1
    else:
        v2 = tl.maximum(v1, 0.0)
    v3 = v2 + 1.0
    if MODE == 2:  # NaN where the input is negative
        v3 = tl.where(v0 < 0.0, float("nan"), v3)
    tl.store(out_ptr0 + offs, v3, mask=mask)


def _launch(x, mode=0, fraction=1.0):
    out = torch.empty_like(x)
    n = x.numel()
    written = int(n * fraction)
    grid = (triton.cdiv(written, 1024),)
    cluster0_kernel[grid](x, out, n, written, MODE=mode, BLOCK_SIZE=1024)
    return out


def cluster0(x):
    return _launch(x)


def traceable(x, wrap):
    """`cluster0` as tracing runs it (``codegen.operators``): its launch through `wrap`."""
    out = torch.empty_like(x)
    n = x.numel()
    wrap(cluster0_kernel)[(triton.cdiv(n, 1024),)](x, out, n, n, MODE=0, BLOCK_SIZE=1024)
    return out


def cluster0_wrong(x):
    return _launch(x, mode=1)


def cluster0_nan(x):
    return _launch(x, mode=2)


def cluster0_half(x):
    return _launch(x, fraction=0.5)


_calls = {"n": 0}


def cluster0_second_call_wrong(x):
    """Right on its first call (gate 1 passes), wrong afterwards (gate 2 must catch it)."""
    _calls["n"] += 1
    return _launch(x, mode=0 if _calls["n"] == 1 else 1)
