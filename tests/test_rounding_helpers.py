"""The rounding divisions' helpers a generated file defines follow what lowering recorded.

A statement calling a helper of the file records it (``Stmt.helpers``, from the lowering's
``ir/rounding.Calls``); ``codegen/rounding.helpers`` defines the recorded ones, and the fmod
helper where a recorded one calls it (a declared table), never by reading the statements'
text. So does the bfloat16 rounding helper (``codegen/half_reads.helpers``).
"""

from dataclasses import replace

import pytest
import torch
from codegen_harness import Lambda

from fusion_core.codegen import half_reads, rounding
from fusion_core.codegen.lower import plan
from fusion_core.codegen.plan import KernelPlan
from fusion_core.ir.lowerings import ROUND_BF16
from fusion_core.ir.rounding import (
    DIV_RN,
    FLOOR_DIV_FLOAT,
    FLOOR_DIV_INT,
    REMAINDER_FLOAT,
    REMAINDER_INT,
    TRUNC_DIV_FLOAT,
    TRUNC_DIV_INT,
)
from fusion_core.pipeline import analyze

FMOD_DEF = f"def {rounding.FMOD}(a, b):"


def _plan(fn, *inputs) -> KernelPlan:
    analysis = analyze(Lambda(fn, len(inputs)), *inputs)
    (cluster,) = analysis.clusters
    return plan(analysis.graph, cluster)


def _ints(dtype=torch.int64):
    return torch.randint(-20, 21, (4, 8), dtype=dtype)


@pytest.mark.parametrize(("fn", "inputs", "op", "want"), [
    (lambda m, x: torch.remainder(x * 7, 2.5) + 1, (torch.randn(4, 8),), "remainder",
     (REMAINDER_FLOAT,)),
    (lambda m, x, y: torch.floor_divide(x * 7, y) * 2, (torch.randn(4, 8), torch.randn(4, 8)),
     "floor_divide", (FLOOR_DIV_FLOAT,)),
    (lambda m, a: torch.remainder(a * 3, -4) + 1, (_ints(),), "remainder", (REMAINDER_INT,)),
    (lambda m, a: torch.div(a * 3, 4, rounding_mode="floor") + 1, (_ints(torch.int32),),
     "div", (FLOOR_DIV_INT,)),
    (lambda m, a: torch.div(a * 3, 4, rounding_mode="trunc") + 1, (_ints(),), "div",
     (TRUNC_DIV_INT,)),
    # float16 trunc division: the quotient divided as IEEE, rounded, then truncated
    (lambda m, x, y: torch.div(x * 1, y, rounding_mode="trunc"),
     (torch.randn(4, 8).half(), torch.randn(4, 8).half()), "div", (TRUNC_DIV_FLOAT, DIV_RN)),
    (lambda m, x: torch.div(x * 7, 2.5) + 1, (torch.randn(4, 8),), "div", ()),  # true division
], ids=["f32-remainder", "f32-floor_divide", "int64-remainder", "int32-div-floor",
        "int64-div-trunc", "f16-div-trunc", "f32-true-div"])
def test_lowering_records_the_helpers_its_statement_calls(fn, inputs, op, want):
    p = _plan(fn, *inputs)
    (stmt,) = [s for s in p.stmts if s.op == op]
    assert stmt.helpers == want, stmt
    assert all(s.helpers == () for s in p.stmts if s is not stmt), p.stmts
    assert rounding.used(p) == [h for h in rounding._BODIES if h in want]


def test_the_file_defines_the_recorded_helpers_not_those_its_text_names():
    """The record decides: a remainder whose record is dropped defines nothing though its
    text calls the helper, and a statement recording a helper gets it (with fmod where
    that helper calls it) though its text names none."""
    p = _plan(lambda m, x: torch.remainder(x * 7, 2.5) + 1, torch.randn(4, 8))
    unrecorded = replace(p, stmts=tuple(replace(s, helpers=()) for s in p.stmts))
    assert rounding.helpers(unrecorded) == []

    q = _plan(lambda m, x: x * 7 + 1, torch.randn(4, 8))
    assert rounding.helpers(q) == []

    def recording(*names: str) -> KernelPlan:
        return replace(q, stmts=(replace(q.stmts[0], helpers=names), *q.stmts[1:]))

    for names, fmod in [((FLOOR_DIV_FLOAT,), True), ((REMAINDER_FLOAT,), True),
                        ((TRUNC_DIV_FLOAT, DIV_RN), False), ((REMAINDER_INT,), False),
                        ((FLOOR_DIV_INT, TRUNC_DIV_INT), False)]:
        p = recording(*names)
        assert rounding.used(p) == [h for h in rounding._BODIES if h in names]
        lines = rounding.helpers(p)
        assert all(f"def {h}(a, b):" in lines for h in names), (names, lines)
        assert (FMOD_DEF in lines) is fmod, names


BF16 = (ROUND_BF16,)


@pytest.mark.parametrize(("fn", "inputs", "want"), [
    # a cast to bfloat16 rounds through the helper
    (lambda m, x: (x * 3).to(torch.bfloat16) * 2, (torch.randn(4, 8),), {"to": BF16}),
    # a bfloat16 value read by a float32 op: a rounded copy first (``half_reads.rounding``)
    (lambda m, h, x: h * 0.1 + x, (torch.randn(4, 8).bfloat16(), torch.randn(4, 8)),
     {"round": BF16}),
    # bfloat16 trunc division: the quotient rounded to bfloat16, as its operand `x * 1`
    (lambda m, x, y: torch.div(x * 1, y, rounding_mode="trunc"),
     (torch.randn(4, 8).bfloat16(), torch.randn(4, 8).bfloat16()),
     {"div": (TRUNC_DIV_FLOAT, DIV_RN, ROUND_BF16), "round": BF16}),
], ids=["bf16-cast", "bf16-read", "bf16-div-trunc"])
def test_a_bf16_rounding_is_recorded_by_the_statement_calling_it(fn, inputs, want):
    p = _plan(fn, *inputs)
    recording = [s for s in p.stmts if s.helpers]
    assert {s.op for s in recording} == set(want), p.stmts
    assert all(s.helpers == want[s.op] for s in recording), p.stmts
    assert f"def {ROUND_BF16}(x):" in half_reads.helpers(p)


def test_the_file_defines_the_bf16_rounding_recorded_not_the_one_its_text_names():
    """A bfloat16 cast whose record is dropped defines no helper though its text calls it; a
    statement recording it gets it though its text names none."""
    p = _plan(lambda m, x: (x * 3).to(torch.bfloat16) * 2, torch.randn(4, 8))
    assert f"def {ROUND_BF16}(x):" in half_reads.helpers(p)
    unrecorded = replace(p, stmts=tuple(replace(s, helpers=()) for s in p.stmts))
    assert half_reads.helpers(unrecorded) == []

    q = _plan(lambda m, x: x * 7 + 1, torch.randn(4, 8))
    assert half_reads.helpers(q) == []
    recorded = replace(q, stmts=(replace(q.stmts[0], helpers=(ROUND_BF16,)), *q.stmts[1:]))
    assert f"def {ROUND_BF16}(x):" in half_reads.helpers(recorded)
