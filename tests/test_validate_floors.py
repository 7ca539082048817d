"""The tolerance floor of a cluster result: the narrowest float dtype it is computed from
along float values only."""

import torch
from codegen_harness import Lambda

from fusion_core.pipeline import analyze
from fusion_core.validate.floors import precision_floors


def _floors(fn, *inputs):
    analysis = analyze(Lambda(fn, arity=len(inputs)), *inputs)
    (cluster,) = analysis.clusters
    return precision_floors(analysis.graph, cluster)


def test_a_float32_result_through_a_bfloat16_value_is_judged_at_bfloat16():
    fn = lambda m, h, x: (h * 2.0).float() + x  # noqa: E731
    assert _floors(fn, torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(4, 8)) == (
        torch.bfloat16,)


def test_a_bfloat16_mask_choosing_float32_values_keeps_float32():
    """Only the mask went through bfloat16: the values it selects are float32-exact, so the
    result keeps float32's tolerance (a bfloat16 one would pass errors 500 times larger)."""
    fn = lambda m, h, x: torch.where((h * 2.0) > 0, x * 3.0, x)  # noqa: E731
    assert _floors(fn, torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(4, 8)) == (
        torch.float32,)
