"""Conditions on `training` flags that eval mode settles, as the fused call's guard holds it.

Reads a function's AST; writes nothing. The analysis traces the model in eval mode, and an
edit whose kernel computes BatchNorm or dropout runs only where the flags that decide them
are False (``train_mode.py``). Code that picks a value by such a flag then picks the same
value in every call that reaches the kernel, provided the guard tests that flag too. timm's
copy of `BatchNorm2d.forward` is the case in point:

    if self.training:
        bn_training = True
    else:
        bn_training = (self.running_mean is None) and (self.running_var is None)
    x = F.batch_norm(x, self.running_mean if not self.training or ... else None, ...)

With `self.training` False, `bn_training` is bound by the `else` line only and the argument
is `self.running_mean`. Each answer carries the flags it assumed False (`self.training`),
spelled from the function's receiver; the caller hands them to the guard.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from .bindings import statement_of
from .pyexpr import module_chain


def _flag(expr: ast.expr, receiver: str | None) -> str | None:
    """`self.training`, `self.bn.training`: a module's flag read from the receiver."""
    if not (isinstance(expr, ast.Attribute) and expr.attr == "training"):
        return None
    chain = module_chain(expr)
    if receiver is None or not chain or chain[0] != receiver:
        return None
    return ast.unparse(expr)


def under_eval(test: ast.expr, receiver: str | None) -> tuple[bool, frozenset[str]] | None:
    """What `test` is with every module's `training` flag False, and the flags that decided
    it; None when something else decides it too (`self.training and self.track_stats` is
    False either way, `not self.training and self.track_stats` is not settled)."""
    if (flag := _flag(test, receiver)) is not None:
        return False, frozenset((flag,))
    if isinstance(test, ast.Constant) and isinstance(test.value, bool):
        return test.value, frozenset()
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = under_eval(test.operand, receiver)
        return None if inner is None else (not inner[0], inner[1])
    if isinstance(test, ast.BoolOp):
        # `and` is settled by a False operand, `or` by a True one, read left to right: an
        # unsettled operand before it may guard it (`self.bn is not None and
        # self.bn.training`), and the edit's guard would read that flag unguarded
        decisive = isinstance(test.op, ast.Or)
        flags: frozenset[str] = frozenset()
        for v in test.values:
            k = under_eval(v, receiver)
            if k is None:
                return None
            flags |= k[1]
            if k[0] is decisive:
                return decisive, flags
        return not decisive, flags
    return None


def flag_reads(expr: ast.AST, receiver: str | None) -> frozenset[str]:
    """Every module `training` flag `expr` reads from the receiver (`self.bn.training`)."""
    return frozenset(f for n in ast.walk(expr) if isinstance(n, ast.expr)
                     and (f := _flag(n, receiver)) is not None)


def chosen_branch(expr: ast.IfExp, receiver: str | None
                  ) -> tuple[ast.expr, frozenset[str]] | None:
    """The branch of `a if c else b` that eval mode picks, and the flags that pick it."""
    settled = under_eval(expr.test, receiver)
    if settled is None:
        return None
    return (expr.body if settled[0] else expr.orelse), settled[1]


def chosen_store(func: ast.AST, stores: Sequence[ast.Name], receiver: str | None
                 ) -> tuple[ast.If, ast.Assign, frozenset[str]] | None:
    """Where several lines bind one name, all in the branches of one `if` (or `if`/`elif`
    chain) that eval mode settles: that `if`, the one plain assignment of the branch taken,
    and the flags that take it; None otherwise."""
    outer = [st for st in ast.walk(func) if isinstance(st, ast.If)
             and all(any(n is s for n in ast.walk(st)) for s in stores)]
    if not outer:
        return None
    top = min(outer, key=lambda st: st.lineno)
    branch: list[ast.stmt] = [top]
    flags: frozenset[str] = frozenset()
    while len(branch) == 1 and isinstance(branch[0], ast.If) and any(
            any(n is s for n in ast.walk(branch[0])) for s in stores):
        settled = under_eval(branch[0].test, receiver)
        if settled is None:
            return None
        flags |= settled[1]
        branch = branch[0].body if settled[0] else branch[0].orelse
    taken = [s for s in stores if any(any(n is s for n in ast.walk(st)) for st in branch)]
    if len(taken) != 1:
        return None
    st = statement_of(func, taken[0])
    if not (isinstance(st, ast.Assign) and any(st is b for b in branch)
            and len(st.targets) == 1 and st.targets[0] is taken[0]):
        return None
    return top, st, flags
