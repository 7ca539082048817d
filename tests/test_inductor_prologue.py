"""A missed Inductor kernel beside a GEMM or attention call is called its epilogue only when
the kernel's ops read the call's result and the kernel computes on the call's behalf.

Kernels written out by hand over ``AttentionNet`` (inductor_reason_model.py) in the forms
Inductor makes them, and one real CPU compile: the kernel preparing the attention's inputs
lists the attention call among its origins (as Gemma 3's did on the H200)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from inductor_reason_model import AttentionNet

from fusion_core.inductor.capture import InductorKernel, InductorNode
from fusion_core.inductor.explain import EPILOGUE, miss_reason
from fusion_core.pipeline import analyze

FILE = Path(__file__).resolve().with_name("inductor_reason_model.py")
SOURCE = FILE.read_text().splitlines()
SHAPE = (1, 4, 16)
PROLOGUE = "Inductor fuses the ops that feed "


def _line(text: str) -> int:
    return next(i for i, s in enumerate(SOURCE, 1) if text in s)


SPLIT, NORM = _line(".view(x.shape[0]"), _line("torch.rsqrt(x.pow(2)")
Q_PROJ, K_PROJ = _line("q = self.split("), _line("k = self.split(")
Q_SCALE, K_SCALE = _line("q = self.norm(q)"), _line("k = self.norm(k)")
ATTN, FC = _line("scaled_dot_product_attention(q, k, v)"), _line("gelu(self.fc(o))")
SCAN = _line("torch.cumprod(h, -1).exp()")


def _kernel(*nodes: tuple[str, int] | tuple[str, int, str]) -> InductorKernel:
    """(op, line[, module]) origins; the module is the model's own ("") unless given."""
    return InductorKernel("triton_per_fused_0", tuple(
        InductorNode(f"{n[0]}_{i}", n[0], n[2] if len(n) > 2 else "", str(FILE), n[1])
        for i, n in enumerate(nodes)))


NORM_OPS = (("pow", NORM), ("mean", NORM), ("add", NORM), ("rsqrt", NORM), ("mul", NORM))
# What Inductor loads and computes in front of the attention: the projections' outputs
# (views on the projections' lines), both RMSNorms, the cos/sin scales, and the attention
# call itself among the origins.
PROLOGUE_KERNEL = _kernel(
    ("unsafe_view", Q_PROJ, "q_proj"), ("unsafe_view", K_PROJ, "k_proj"), ("view", SPLIT),
    ("transpose", SPLIT), *NORM_OPS, ("mul", Q_SCALE), ("mul", K_SCALE),
    ("scaled_dot_product_efficient_attention", ATTN))


@pytest.fixture(scope="module", params=["fx", "export"])
def analysis(request):
    torch.manual_seed(0)
    return analyze(AttentionNet().eval(), SHAPE, capture=request.param)


def test_the_activation_after_a_linear_is_its_epilogue(analysis):
    # The GPU lowering adds the bias in the next kernel, on addmm's behalf.
    assert miss_reason(analysis, _kernel(("addmm", FC, "fc"), ("gelu", FC))) == EPILOGUE


def test_the_ops_feeding_attention_are_its_prologue_not_an_epilogue(analysis):
    reason = miss_reason(analysis, PROLOGUE_KERNEL)
    call = "F.scaled_dot_product_attention"  # as FX spells it, never `….default`
    assert reason.startswith(f"{PROLOGUE}`{call}` (line {ATTN}) into one kernel; ")
    # Neither the attention call they feed nor the views before them separate them: the q
    # and k chains are two clusters of ours, which Inductor computes in one kernel.
    assert reason.endswith("; the ops fall into different clusters of ours")


def test_a_kernel_that_only_loads_a_projection_output_is_not_its_epilogue(analysis):
    # A view on q_proj's line is all Inductor lists of the projection: the kernel reads its
    # result but computes nothing on its behalf (Gemma 3's q_norm kernel on the CPU).
    k = _kernel(("unsafe_view", Q_PROJ, "q_proj"), ("view", SPLIT), ("transpose", SPLIT),
                *NORM_OPS, ("mul", Q_SCALE))
    reason = miss_reason(analysis, k)
    assert reason != EPILOGUE and not reason.startswith(PROLOGUE)


def test_a_gemm_whose_result_the_kernel_does_not_read_is_not_its_epilogue(analysis):
    # Origins are noisy: q_proj's addmm listed beside the cos/sin scales, which read the
    # RMSNorms' results, not the projection's.
    reason = miss_reason(analysis, _kernel(("addmm", Q_PROJ, "q_proj"), ("mul", Q_SCALE),
                                           ("mul", K_SCALE)))
    assert reason == ("Inductor fuses ops that share a loop but do not feed each other "
                      "(horizontal)")


def test_an_opaque_op_between_the_kernels_ops_is_named(analysis):
    # The GELU reads fc's result, but the kernel computes nothing on fc's behalf: the reason
    # comes from our graph, where the cumprod lies between the GELU and the exp.
    reason = miss_reason(analysis, _kernel(("view", FC, "fc"), ("gelu", FC), ("exp", SCAN)))
    call = "torch.cumprod"  # the call on the line, under either frontend
    assert reason == f"an opaque op `{call}` (line {SCAN}) separates the ops in our graph"


def test_a_gemm_our_graph_cannot_place_is_still_an_epilogue(analysis):
    # An addmm on a line where our graph has no matrix product: nothing to decide it with.
    assert miss_reason(analysis, _kernel(("addmm", NORM), ("mul", Q_SCALE))) == EPILOGUE


@pytest.mark.slow  # an Inductor compile on the CPU (~20 s)
def test_inductors_attention_input_kernel_on_the_cpu_is_a_prologue():
    from fusion_core.inductor.capture import capture

    torch.manual_seed(0)
    model = AttentionNet().eval()
    cap = capture(model, [torch.randn(SHAPE)])
    fed = [k for k in cap.compute_kernels if any("attention" in op for op in k.ops)]
    assert fed, [k.name for k in cap.compute_kernels]
    for frontend in ("fx", "export"):
        a = analyze(model, SHAPE, capture=frontend)
        for k in fed:
            reason = miss_reason(a, k)
            assert reason.startswith(PROLOGUE) and f"(line {ATTN})" in reason, reason
