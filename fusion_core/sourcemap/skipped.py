"""An `if` between the fused lines that the calls forming the cluster skip: a ResNet block's
`if self.downsample is not None:` in the blocks built without one.

    out = self.bn2(out)
    if self.downsample is not None:   # None in this block: the body never runs
        identity = self.downsample(x)
    out += identity
    out = self.relu(out)

The cluster (`bn2 → add → relu`) runs around the `if`, whose body the traced call did not
run. An edit of the four lines is the same code wherever the condition is False, so it is
written under the negated condition (`if self.downsample is None:`), the lines as written
under `else` (``train_mode.guarded`` writes it, with ``SourceMapping.condition``). Only an
`if` with no `else` whose condition reads nothing but the module's attributes and constants
(``guard.settled_value``: fixed per instance) counts, and only where it is False on the
instance whose call formed the cluster.

Reads a run's statements and that instance; writes the indices of the skipped statements and
the negated condition's text.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import torch

from .guard import settled_value
from .pysource import SourceFile, Statement

_NEGATED: dict[type, str] = {ast.Is: "is not", ast.IsNot: "is", ast.Eq: "!=", ast.NotEq: "==",
                             ast.In: "not in", ast.NotIn: "in"}


def skipped_ifs(stmts: Sequence[Statement], receiver: str | None,
                instance: torch.nn.Module | None) -> dict[int, ast.expr]:
    """Index -> condition of each `if` among `stmts` (not the first or the last) that has no
    `else` and whose condition, read from the module's attributes only, is False on
    `instance`; empty when the receiver or the instance is not known."""
    if receiver is None or instance is None:
        return {}
    out: dict[int, ast.expr] = {}
    for k, st in enumerate(stmts[1:-1], start=1):
        node = st.node
        if not isinstance(node, ast.If) or node.orelse:
            continue
        if settled_value(node.test, receiver, instance) is False:
            out[k] = node.test
    return out


# Operands a comparison or an `and` must keep in parentheses: their segment drops them.
_LOOSE = (ast.BoolOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Lambda, ast.NamedExpr)


def _operand(src: SourceFile, expr: ast.expr) -> str:
    text = src.segment(expr)
    return f"({text})" if isinstance(expr, _LOOSE) else text


def negated(src: SourceFile, test: ast.expr) -> str:
    """The text of `not test`, as a user would write it: `self.downsample is None` for
    `self.downsample is not None`, `self.se` for `not self.se`, else `not (...)`."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _NEGATED:
        return (f"{_operand(src, test.left)} {_NEGATED[type(test.ops[0])]} "
                f"{_operand(src, test.comparators[0])}")
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _operand(src, test.operand)
    return f"not ({src.segment(test)})"


def skipped_condition(src: SourceFile, tests: Sequence[ast.expr]) -> str:
    """`self.downsample is None and self.se is None`: every skipped `if`'s condition False."""
    return " and ".join(dict.fromkeys(negated(src, t) for t in tests))
