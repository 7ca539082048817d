"""Reduction rules in the registry: every reduction op carries one, and its fields mean
what codegen uses them for (identity, combine, finalize, accumulation dtype)."""

import torch

from fusion_core.codegen.reduce import EMITTERS
from fusion_core.ir.graph import Node, OpKind
from fusion_core.ir.reductions import (
    COMBINES,
    RULES,
    ReductionRule,
    correction,
    keeps_dims,
    node_reduced_dims,
    reduced_dims,
    rule_of,
)
from fusion_core.ir.registry import SPECS


def test_every_reduction_spec_carries_a_rule_with_an_emitter():
    reductions = [s for s in SPECS.values() if s.kind is OpKind.REDUCTION]
    assert reductions
    for spec in reductions:
        assert isinstance(spec.lower, ReductionRule), spec.name
        assert spec.lower is RULES[spec.name]
        assert spec.lower.family in EMITTERS
    # rule_of reads RULES by op name: that holds only while the names match one to one.
    assert {s.name for s in reductions} == set(RULES)


def test_identities_change_nothing_under_their_combine():
    assert COMBINES["sum"].identity_of(torch.float32) == "0.0"
    assert COMBINES["sum"].identity_of(torch.int32) == "0"
    assert COMBINES["max"].identity_of(torch.float32) == "-float('inf')"
    assert COMBINES["min"].identity_of(torch.float16) == "float('inf')"
    # integer max/min identities are the dtype's extremes (written so they fit the type)
    assert eval(COMBINES["max"].identity_of(torch.int8)) == -128  # noqa: S307
    assert eval(COMBINES["min"].identity_of(torch.int64)) == 2**63 - 1  # noqa: S307
    # max and min keep NaN, as torch's reductions do (Triton's plain forms skip it)
    assert COMBINES["max"].merge("a", "b") == (
        "tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)")
    assert COMBINES["max"].block_of(torch.float32) == "_max_keep_nan"
    assert COMBINES["min"].block_of(torch.int8) == "tl.min"  # integers hold no NaN


def test_accumulation_dtype_widens_half_and_refuses_integer_means():
    assert RULES["sum"].accumulation_dtype(torch.bfloat16) == torch.float32
    assert RULES["sum"].accumulation_dtype(torch.int64) == torch.int64
    assert RULES["mean"].accumulation_dtype(torch.int64) is None
    assert RULES["softmax"].accumulation_dtype(torch.float16) == torch.float32


def test_collapsing_rules_are_the_ones_without_a_row():
    collapsing = {name for name, rule in RULES.items() if not rule.keeps_row}
    assert collapsing == {"sum", "mean", "amax", "amin", "var", "std", "adaptive_avg_pool2d"}
    assert RULES["mean"].finalize.format(acc="a") == "a / n_cols"


def test_reduced_dims_follow_each_rules_params():
    assert reduced_dims(RULES["sum"], {"dim": (3, -2)}, 4) == (2, 3)
    assert reduced_dims(RULES["mean"], {"dim": None}, 3) == (0, 1, 2)
    assert reduced_dims(RULES["amax"], {"dim": ()}, 2) == (0, 1)
    assert reduced_dims(RULES["sum"], {"dim": (1, -2)}, 3) is None  # one dim named twice
    assert reduced_dims(RULES["sum"], {"dim": 4}, 4) is None  # out of range
    assert reduced_dims(RULES["softmax"], {"dim": 1}, 4) == (1,)
    assert reduced_dims(RULES["softmax"], {"dim": None}, 4) is None  # the implicit dim
    assert reduced_dims(RULES["softmax"], {"dim": (1, 2)}, 4) is None  # one dim only
    assert reduced_dims(RULES["layer_norm"], {"normalized_shape": (4, 5)}, 3) == (1, 2)
    assert reduced_dims(RULES["adaptive_avg_pool2d"], {"output_size": (1, 1)}, 4) == (2, 3)
    assert reduced_dims(RULES["adaptive_avg_pool2d"], {"output_size": 1}, 3) == (1, 2)
    assert reduced_dims(RULES["adaptive_avg_pool2d"], {"output_size": (2, 2)}, 4) is None
    assert reduced_dims(RULES["group_norm"], {"num_groups": 4}, 4) == (1, 2, 3)


def test_a_nodes_reduced_dims_come_from_its_ops_rule_and_none_for_other_ops():
    mean = Node("m", "mean", OpKind.REDUCTION, params=(("dim", (-1, 1)), ("keepdim", True)))
    assert rule_of(mean) is RULES["mean"]
    assert node_reduced_dims(mean, 3) == (1, 2)
    relu = Node("r", "relu", OpKind.POINTWISE_UNARY)
    assert rule_of(relu) is None and node_reduced_dims(relu, 3) is None


def test_pools_and_norms_keep_their_dims_and_collapses_follow_keepdim():
    assert keeps_dims(RULES["adaptive_avg_pool2d"], {"output_size": 1})
    assert keeps_dims(RULES["group_norm"], {})
    assert keeps_dims(RULES["mean"], {"keepdim": True})
    assert not keeps_dims(RULES["var"], {"keepdim": False})


def test_var_correction_follows_torch():
    x = torch.randn(3, 7, dtype=torch.float64)
    for params in ({}, {"unbiased": True}, {"unbiased": False}, {"correction": 0},
                   {"correction": 2}):
        want = torch.var(x, dim=1, **params)
        c = correction({"unbiased": None, "correction": None, **params})
        m2 = ((x - x.mean(1, keepdim=True)) ** 2).sum(1)
        got = eval(RULES["var"].finalize.format(m2="m2", correction=repr(c)),  # noqa: S307
                   {"m2": m2, "n_cols": 7})
        torch.testing.assert_close(got, want)
