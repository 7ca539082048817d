"""A 0-dim tensor beside integer tensors is converted to their dtype as eager converts it.

Eager types a 0-dim tensor like a Python number: int8's `x < torch.tensor(259)` compares
with 3, `x // torch.tensor(259)` divides by 3 (the result stays int8). The kernel loaded it
as int64 and computed in int64 (compared with 259, divided by 259) where no store wrapped it.
"""

import pytest
import torch
from codegen_harness import Lambda, run_kernel

from fusion_core.codegen import generate
from fusion_core.ir.rounding import wrapped
from fusion_core.pipeline import analyze

# how each spelling combines tensor `a` with 0-dim tensor `s` (`a * 1`: computed, no input)
SIGNED = {"//": lambda a, s: (a * 1) // s}
EXPRS = {"<": lambda a, s: (a * 1) < s, "+ then <": lambda a, s: ((a * 1) + s) < 0,
         "maximum": lambda a, s: torch.maximum(a * 1, s),
         "logical_and": lambda a, s: torch.logical_and(a * 1, s - 1),
         "where then ==": lambda a, s: torch.where(a > 0, a * 1, s) == a,
         "clamp then <": lambda a, s: (a * 1).clamp(max=s) < a,
         "+ stored": lambda a, s: (a * 1) + s}  # the control: the store wrapped it already
# (dtype, a value its range cannot hold)
CASES = [(torch.int8, 259), (torch.int16, 70000), (torch.uint8, -1)]
IDS = [f"{str(d).removeprefix('torch.')}-{s}" for d, s in CASES]


def _values(dtype, s):
    info, w = torch.iinfo(dtype), wrapped(s, dtype)
    near = [min(max(v, info.min), info.max) for v in (w - 1, w, w + 1)]
    return torch.tensor([[info.min, info.max, 0, 1, 100, *near]], dtype=dtype)


def _kernel_result(fn, *args, tmp_path):
    analysis = analyze(Lambda(fn, len(args)), *args)
    (cluster,) = analysis.clusters
    return run_kernel(generate(analysis, cluster), tmp_path, args)[0]


@pytest.mark.parametrize(("dtype", "s"), CASES, ids=IDS)
def test_a_zero_dim_tensor_is_converted_to_the_dtype_as_eagers(dtype, s, tmp_path):
    a, t = _values(dtype, s), torch.tensor(s)
    exprs = EXPRS | (SIGNED if dtype.is_signed else {})  # Triton divides signed ints only
    for i, (name, f) in enumerate(exprs.items()):
        fn = lambda m, a, t, f=f: f(a, t)  # noqa: E731
        want = fn(None, a, t)
        # the premise: eager converts it as the number it wraps to
        assert torch.equal(want, f(a, torch.tensor(wrapped(s, dtype), dtype=dtype))), name
        # a folder a name ("//") could not spell: `tmp_path / "//"` is the root
        got = _kernel_result(fn, a, t, tmp_path=tmp_path / f"expr{i}")
        assert got.dtype == want.dtype and torch.equal(got, want), (name, got, want)


def test_a_zero_dim_fill_is_converted_to_the_filled_dtype(tmp_path):
    # masked_fill converts its value to the input's dtype: 2.7 fills int8 with 2, 2 fills
    # bools with True; the kernel held 2.7 and 2, which the next op read
    a = torch.tensor([[5, -100, 2, 0, 3]], dtype=torch.int8)
    fills = {"int8 by 2.7": (lambda m, a, t: (a * 1).masked_fill(a > 2, t) * 2, 2.7),
             "bool by 2": (lambda m, a, t: (a > 0).masked_fill(a < 0, t).int(), 2)}
    for name, (fn, s) in fills.items():
        t = torch.tensor(s)
        want = fn(None, a, t)
        got = _kernel_result(fn, a, t, tmp_path=tmp_path / name.replace(" ", "_"))
        assert got.dtype == want.dtype and torch.equal(got, want), (name, got, want)
