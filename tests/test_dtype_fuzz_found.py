"""Defects random mixed-dtype models found (tests/dtype_fuzz.py), each reduced to a model.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
from codegen_harness import DEVICE, Lambda, compare, run_kernel

from fusion_core.codegen import generate, half_reads, load_kernel, write_kernels
from fusion_core.ir.registry import SPECS
from fusion_core.pipeline import analyze
from fusion_core.validate import validate
from fusion_core.validate.inputs import flag_inputs
from fusion_core.validate.subgraph import patch

# 16-bit values x whose product by `factor` eager rounds onto 1.0, where float32 keeps it
# just above or below (float16: halfway, ties to even; bfloat16: 0.9986 rounds to 1.0, and
# Triton's interpreter truncated it to 0.9961).
CASES = {torch.float16: ([0.33349609375, 0.33325195312], 3.0),
         torch.bfloat16: ([0.333984375], 2.99)}


@pytest.mark.parametrize("read, dtype", [
    (lambda h: h >= 1.0, torch.bool),
    (lambda h: h.long(), torch.int64),
], ids=["compared", "long"])
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_a_16_bit_value_read_by_an_op_of_another_dtype_is_rounded_first(read, dtype, half,
                                                                          tmp_path: Path):
    # Kernels keep 16-bit values in float32 registers and round at the store; a 16-bit
    # product read by a comparison or a `.long()` went in unrounded, and the kernel's
    # bools and ints differed from eager's (0 where eager has 1). Under the interpreter a
    # bfloat16 rounding must round, not truncate as Triton's interpreter casts do.
    values, factor = CASES[half]
    x = torch.tensor(values * 16, dtype=half)[:16].view(2, 8)
    model = Lambda(lambda self, x: read(x * factor))
    analysis = analyze(model, x)
    (cluster,) = analysis.clusters
    want = model(x)
    (got,) = run_kernel(generate(analysis, cluster), tmp_path, (x.to(DEVICE),))
    assert want.dtype == got.dtype == dtype
    assert torch.equal(got, want), (got, want)


class MaskedAttention(nn.Module):
    """HF-style: an int64 attention mask made additive with `finfo.min`, token ids embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(40, 8)

    def forward(self, ids, mask):
        x = self.emb(ids)
        ext = (1.0 - mask[:, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        p = torch.softmax(x @ x.transpose(-1, -2) * 0.5 + ext, dim=-1)
        return p @ x


def test_an_int_attention_mask_is_drawn_0_or_1_and_its_softmax_verifies():
    # Validation drew every integer input in [0, 16): `(1.0 - mask) * finfo.min` overflowed
    # to inf, eager's softmax gave NaN, and the softmax cluster failed its check.
    ids, mask = torch.randint(0, 40, (2, 4)), torch.ones(2, 4, dtype=torch.int64)
    a = analyze(MaskedAttention().eval(), ids, mask)
    assert flag_inputs(a.graph) == {1}  # the ids index the embedding: drawn as ids
    assert any("softmax" in c.ops for c in a.clusters)
    report = validate(a, timing=False)
    assert all(r.usable for r in report.results), [r.status for r in report.results]


class FlippedMask(nn.Module):
    """An int mask read by an opaque op that takes no indices (`flip`), and made additive."""

    def forward(self, x, mask):
        ext = (1.0 - mask[..., None].to(x.dtype)) * torch.finfo(x.dtype).min
        return x * mask.flip(-1)[..., None] + ext


def test_an_int_mask_an_opaque_op_reads_is_still_drawn_0_or_1():
    # Any opaque reader made the mask "token ids" (drawn up to 15): `(1 - mask) * finfo.min`
    # overflowed again. Only ops that take indices (embedding, gather, index) decide that.
    a = analyze(FlippedMask(), torch.randn(2, 4, 8), torch.ones(2, 4, dtype=torch.int64))
    assert any(n.op == "opaque" and "flip" in n.target for n in a.graph.nodes)
    assert flag_inputs(a.graph) == {1}


class PositionsBeforeScores(nn.Module):
    """HF-style: position ids (left unused) and the additive mask from one `mask.long()`,
    the position ids computed before the attention scores the softmax kernel reads."""

    def forward(self, x, mask):
        m = mask.long()
        pos = (m.cumsum(-1) - 1).masked_fill(m == 0, 1)  # noqa: F841 - traced all the same
        ext = (1.0 - m[:, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        p = torch.softmax(x @ x.transpose(-1, -2) + ext, dim=-1)
        return p @ x


def test_a_result_read_before_the_kernel_inputs_exist_moves_its_reader_after_the_call():
    # The kernel computing `mask.long()` with the softmax writes it for `cumsum`, which ran
    # before the scores: the patched graph had no place for one call (PatchError), and the
    # model check failed every cluster.
    x, mask = torch.randn(2, 3, 8), torch.ones(2, 3, dtype=torch.int32)
    a = analyze(PositionsBeforeScores(), x, mask)
    assert any("cumsum" in a.graph[u].op for c in a.clusters for o in c.outputs
               for u in a.graph.users.get(o, ()))
    report = validate(a, timing=False)
    assert report.model.passed, report.model
    assert all(r.usable for r in report.results), [r.status for r in report.results]


class BoolMaskedSoftmax(nn.Module):
    """SDPA-style: scores where a bool key mask holds, -inf elsewhere, softmax in float32."""

    def forward(self, x, mask):
        s = torch.where(mask[:, None, :], x @ x.transpose(-1, -2), float("-inf"))
        return torch.softmax(s, -1, dtype=torch.float32).type_as(x) @ x


def test_a_softmax_over_a_fully_masked_row_verifies_with_eagers_nan():
    # Validation draws bool masks at random: a row masked whole is NaN in eager, the kernel
    # kept it, and "NaN never passes" failed the softmax cluster that agreed with eager.
    x, mask = torch.randn(3, 2, 16), torch.ones(3, 2, dtype=torch.bool)
    a = analyze(BoolMaskedSoftmax(), x, mask)
    assert any("softmax" in c.ops for c in a.clusters)
    report = validate(a, seed=1, timing=False)
    assert all(r.usable for r in report.results), [r.status for r in report.results]


class FinfoMaskedScores(nn.Module):
    """HF-style: masked scores filled with `finfo(dtype).min`, which FX cannot trace (the
    analysis falls back to torch.export: `aten.where.ScalarOther`)."""

    def forward(self, x, mask):
        s = torch.where(mask[:, None, :], x * 0.3, torch.finfo(x.dtype).min)
        return torch.softmax(s, -1)


def test_where_with_a_scalar_branch_fuses_under_torch_export():
    # torch.export writes `torch.where(mask, s, scalar)` as aten.where.ScalarOther, which the
    # op table lacked: it was opaque, and the mask → softmax chain split without a reason.
    x, mask = torch.randn(2, 4, 4), torch.rand(2, 4) < 0.8
    a = analyze(FinfoMaskedScores(), x, mask)
    assert a.capture_fallback, "FX traced it: the test no longer reaches torch.export"
    assert [c.ops for c in a.clusters] == [("mul", "where", "softmax")]
    report = validate(a, timing=False)
    assert all(r.usable for r in report.results), [r.status for r in report.results]


class Float32SoftmaxOfFloat64(nn.Module):
    """A float64 model's softmax computed in float32 and cast back (`dtype=`, `type_as`)."""

    def forward(self, x):
        return torch.softmax(x * 0.7, -1, dtype=torch.float32).type_as(x)


def test_a_float64_result_computed_in_float32_is_judged_at_float32s_tolerance():
    # The float64 result was judged at float64's tolerance (1e-9): a kernel one float32 ulp
    # from eager's float32 softmax failed its check.
    x = torch.randn(4, 8, 64, dtype=torch.float64)
    a = analyze(Float32SoftmaxOfFloat64(), x)
    assert [c.ops for c in a.clusters] == [("mul", "softmax", "to")]
    report = validate(a, timing=False)
    assert all(r.usable for r in report.results), [r.status for r in report.results]


class XorMask(nn.Module):
    """Bool masks combined with `^`, and an int xor, between pointwise ops."""

    def forward(self, x, mask):
        return torch.where(mask[..., None] ^ (x > 0), x, -x) * 2.0 + (x.int() ^ 3)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_xor_fuses_like_and_and_or(capture):
    # `^` (bitwise_xor) was missing from the op table beside `&` and `|`: opaque, it split
    # the chain with no reason given.
    x, mask = torch.randn(2, 4, 8), torch.rand(2, 4) < 0.5
    a = analyze(XorMask(), x, mask, capture=capture)
    assert [c.ops.count("bitwise_xor") for c in a.clusters] == [2]
    report = validate(a, timing=False)
    assert all(r.usable for r in report.results), [r.status for r in report.results]


class HalfAdditiveMask(nn.Module):
    """A float16 model's additive mask (`(1 - mask) * finfo.min`) added to scaled scores."""

    def forward(self, s, mask):
        ext = (1.0 - mask[:, None, :].to(s.dtype)) * torch.finfo(s.dtype).min
        return torch.softmax(s * 0.3 + ext, -1)


def test_a_reduction_reads_its_16_bit_operand_rounded(tmp_path: Path):
    # `s * 0.3 + ext` rounds onto a few float16 numbers near finfo.min; the kernel's softmax
    # read the float32 sums instead, and over a row the mask hides whole gave another
    # distribution than eager's (errors of 0.3).
    s, mask = torch.randn(2, 4, 4).half(), torch.tensor([[True] * 4, [False] * 4])
    model = HalfAdditiveMask()
    a = analyze(model, s, mask)
    assert [c.ops[-1] for c in a.clusters] == ["softmax"]
    (c,) = a.clusters
    (path,) = write_kernels([generate(a, c)], tmp_path)
    gm = patch(a.graph_module, {0: (c, getattr(load_kernel(path), f"cluster{c.index}"))})
    got = gm(s.to(DEVICE), mask.to(DEVICE)).cpu()
    compare(got, model(s, mask), c.chain)


@pytest.mark.parametrize("fn", [
    lambda self, x: (x * 1.0 >= 0.1).int() + (x * 1.0 >= 257).int(),
    lambda self, x: (x + 0.0 == 0.1).to(x.dtype) * x,
], ids=["ge", "eq"])
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_a_number_compared_with_a_16_bit_value_is_rounded_to_its_dtype(fn, half,
                                                                        tmp_path: Path):
    # torch compares a bfloat16 tensor with 0.1 as bfloat16 (0.10009765625): the kernel
    # compared float32 registers with 0.1, and `h == 0.1`, `h >= 0.1` differed where `h` is
    # the 16-bit number nearest 0.1 (and `h >= 257` where bfloat16 holds 256).
    x = torch.tensor([0.1, 256.0, -1.0, 0.5] * 4, dtype=half).view(2, 8)
    model = Lambda(fn)
    analysis = analyze(model, x)
    (cluster,) = analysis.clusters
    (got,) = run_kernel(generate(analysis, cluster), tmp_path, (x.to(DEVICE),))
    want = model(x)
    assert torch.equal(got, want), (got, want)


def test_the_registry_says_which_ops_read_their_number_in_the_16_bit_dtype():
    """The rounding above reads one fact per op (``OpSpec.half_scalar``), no list of op names
    beside the registry: the comparisons and remainder (floor_divide and div's rounding modes
    keep the number in float32)."""
    flagged = {n for n, s in SPECS.items() if s.half_scalar}
    assert flagged == {"eq", "ne", "lt", "le", "gt", "ge", "remainder"}
    assert not hasattr(half_reads, "SCALAR_IN_DTYPE")


class PaddedNorm(nn.Module):
    """Hidden states of padding tokens filled with `fill` (HF's `finfo.min`), layer-normed."""

    def __init__(self, fill: float | None = None, out: torch.dtype | None = None) -> None:
        super().__init__()
        self.fill, self.out = fill, out

    def forward(self, x, mask):
        fill = torch.finfo(x.dtype).min if self.fill is None else self.fill
        h = x.masked_fill(~mask.bool()[..., None], fill)
        y = nn.functional.layer_norm(h, (x.shape[-1],), self.w.to(x.dtype))
        return y if self.out is None else y.to(self.out)


@pytest.mark.parametrize("half, fill, out", [
    (torch.float16, None, None), (torch.bfloat16, -3e5, None),
    (torch.float16, None, torch.float64),
], ids=["fp16-finfo-min", "bf16-large", "fp16-finfo-min-as-fp64"])
def test_a_16_bit_layer_norm_eager_gets_wrong_verifies_against_float64(half, fill, out):
    # Eager's CPU 16-bit layer_norm of a row filled whole is not 0 (float16 at finfo.min:
    # -0.71; bfloat16 at -3e5: 3.0); the kernel's float32 statistics give 0 as float64 does.
    # 16-bit outputs were held to eager alone (and a float64 one computed through float16
    # to float64's tolerance), and a traced `w.to(x.dtype)` kept the float64 reference's
    # layer_norm 16-bit too (fuzz seeds 28, 165).
    # On CUDA eager's statistics are float32 and right: there the kernel passes plainly.
    row = torch.full((1, 64), fill or torch.finfo(half).min).to(half).to(DEVICE)
    eager_errs = bool(nn.functional.layer_norm(row, (64,)).abs().max() > 0.5)
    assert eager_errs or DEVICE != "cpu"  # eager CPU's own error
    model = PaddedNorm(fill, out)
    model.w = nn.Parameter(torch.rand(64) + 0.5, False)
    x, mask = torch.randn(2, 4, 64).to(half), torch.ones(2, 4, dtype=torch.int64)
    a = analyze(model, x, mask)
    assert [c.ops.count("layer_norm") for c in a.clusters] == [1]
    report = validate(a, timing=False)  # random 0/1 masks: some rows filled whole
    assert all(r.usable for r in report.results), [r.status for r in report.results]
    gate = report.results[0].gate("cluster numerics")
    if eager_errs:
        assert "eager's narrower result errs" in gate.detail, gate
    else:
        assert gate.passed and gate.max_abs_err is not None and gate.max_abs_err < 0.5, gate


class LowValuesFilledNorm(nn.Module):
    """Positions and a layer_norm over values `finfo.min` fills wherever low or padded: the
    variance overflows, and eager's output is NaN in every row (fuzz seeds 263, 519, 654)."""

    def forward(self, x, mask):
        pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        h = x.masked_fill((x < -0.5) | ~mask.bool()[..., None], torch.finfo(x.dtype).min)
        return nn.functional.layer_norm(h, (x.shape[-1],)), pos


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_an_output_eager_makes_nan_everywhere_is_said_to_be_eagers(dtype):
    # The layer_norm's kernel agreed with eager's NaN in every element, and its check said
    # "NaN elements where eager has none"; the model check bisected eager's NaN output
    # onto the positions kernel, which cannot make a NaN.
    x, mask = torch.randn(2, 4, 64).to(dtype), torch.ones(2, 4, dtype=torch.int64)
    a = analyze(LowValuesFilledNorm(), x, mask)
    norm, pos = (next(c.index for c in a.clusters if op in c.ops)
                 for op in ("layer_norm", "cumsum"))
    statuses = {r.cluster: r.status for r in validate(a, timing=False).results}
    assert "is NaN everywhere, as eager's is" in statuses[norm], statuses
    assert "where eager has none" not in statuses[norm], statuses
    assert "with no kernel patched in" in statuses[pos], statuses
    assert "where eager has none" not in statuses[pos], statuses
