"""Reduction rules in the registry: every reduction op carries one, and its fields mean
what codegen uses them for (identity, combine, finalize, accumulation dtype)."""

import torch

from fusion_core.codegen.reduce import EMITTERS
from fusion_core.ir.graph import OpKind
from fusion_core.ir.reductions import COMBINES, RULES, ReductionRule
from fusion_core.ir.registry import SPECS


def test_every_reduction_spec_carries_a_rule_with_an_emitter():
    reductions = [s for s in SPECS.values() if s.kind is OpKind.REDUCTION]
    assert reductions
    for spec in reductions:
        assert isinstance(spec.lower, ReductionRule), spec.name
        assert spec.lower is RULES[spec.name]
        assert spec.lower.family in EMITTERS


def test_identities_change_nothing_under_their_combine():
    assert COMBINES["sum"].identity_of(torch.float32) == "0.0"
    assert COMBINES["sum"].identity_of(torch.int32) == "0"
    assert COMBINES["max"].identity_of(torch.float32) == "-float('inf')"
    assert COMBINES["min"].identity_of(torch.float16) == "float('inf')"
    # integer max/min identities are the dtype's extremes (written so they fit the type)
    assert eval(COMBINES["max"].identity_of(torch.int8)) == -128  # noqa: S307
    assert eval(COMBINES["min"].identity_of(torch.int64)) == 2**63 - 1  # noqa: S307
    assert COMBINES["max"].merge("a", "b") == "tl.maximum(a, b)"


def test_accumulation_dtype_widens_half_and_refuses_integer_means():
    assert RULES["sum"].accumulation_dtype(torch.bfloat16) == torch.float32
    assert RULES["sum"].accumulation_dtype(torch.int64) == torch.int64
    assert RULES["mean"].accumulation_dtype(torch.int64) is None
    assert RULES["softmax"].accumulation_dtype(torch.float16) == torch.float32


def test_collapsing_rules_are_the_ones_without_a_row():
    collapsing = {name for name, rule in RULES.items() if not rule.keeps_row}
    assert collapsing == {"sum", "mean", "amax", "amin"}
    assert RULES["mean"].finalize.format(acc="a") == "a / n_cols"
