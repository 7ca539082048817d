"""The iteration order of a reduction kernel: which dims come last, and how many are reduced.

Reads a group's iteration shape (the user's dims, ``analysis.group.iteration_shape``) and
its first reduction (the registry rule and the call's params); returns a ``Domain``: the
user dims reordered so the reduced ones come last (kept dims first, each set in its own
order, so a contiguous input still walks memory with its last dim), group_norm's channel
dim split into (groups, channels per group), and ``reduced``: how many trailing dims of
the resulting kernel domain the reduction's columns cover. ``tensor`` carries one
value's shape and strides into that order; ``lower.py`` indexes every kernel argument
through it and the generated launcher views its tensors the same way at run time
(``runtime.DOMAIN_HELPERS``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.reductions import ReductionRule, axes_said, reduced_dims
from .layout import LoweringError


@dataclass(frozen=True)
class Domain:
    perm: tuple[int, ...]  # user dims in kernel order
    split: tuple[int, int] | None  # (position after perm, groups): that dim -> (G, size / G)
    reduced: int  # trailing kernel dims the reduction's columns cover

    @property
    def trivial(self) -> bool:
        """Today's kernels: the user's own order, one reduced dim (the last)."""
        return self.plain and self.reduced == 1

    @property
    def plain(self) -> bool:
        """No reordering or split: user dims and kernel dims coincide."""
        return self.perm == tuple(range(len(self.perm))) and self.split is None

    def shape(self, user: tuple[int, ...]) -> tuple[int, ...]:
        return self.tensor(user, (0,) * len(user))[0]

    def tensor(self, shape: tuple[int, ...], stride: tuple[int, ...]
               ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """A value of the group (right-aligned to the user rank) in kernel order."""
        pad = len(self.perm) - len(shape)
        if pad < 0:
            raise LoweringError(f"a value of shape {tuple(shape)} has more dims than the "
                                f"kernel's {len(self.perm)}-d iteration space")
        dims, steps = (1,) * pad + tuple(shape), (0,) * pad + tuple(stride)
        dims, steps = tuple(dims[k] for k in self.perm), tuple(steps[k] for k in self.perm)
        if self.split is None:
            return dims, steps
        at, groups = self.split
        size, step = dims[at], steps[at]
        if size == 1:
            parts, part_steps = (1, 1), (0, 0)
        elif size % groups:
            raise LoweringError(f"{size} channels do not split into {groups} groups")
        else:
            parts, part_steps = (groups, size // groups), (step * (size // groups), step)
        return (dims[:at] + parts + dims[at + 1:], steps[:at] + part_steps + steps[at + 1:])

    def value(self, shape, stride, row_space: bool
              ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """A kernel argument's shape and strides in this order. A per-row value is in row
        order already; it gets a size-1 dim per reduced dim but the last (``layout.access``
        adds that one)."""
        shape, stride = tuple(shape), tuple(stride)
        if not row_space:
            return self.tensor(shape, stride)
        if self.split is not None:
            raise LoweringError("a value reduced without keepdim next to a group split")
        pad = self.reduced - 1
        return shape + (1,) * pad, stride + (0,) * pad

    def user_dims(self, kernel: list[str]) -> list[str]:
        """Per-kernel-dim size expressions back in the user's order: the split pair
        multiplied together again, the permutation undone."""
        exprs = list(kernel)
        if self.split is not None:
            at = self.split[0]
            a, b = exprs[at], exprs[at + 1]
            exprs[at:at + 2] = ["1" if a == b == "1" else f"{a} * {b}"]
        user = [""] * len(self.perm)
        for pos, k in enumerate(self.perm):
            user[k] = exprs[pos]
        return user


def domain_of(rule: ReductionRule, params: dict, user: tuple[int, ...]) -> Domain:
    """The kernel order for a group whose first reduction is `rule` with `params` over an
    input of shape `user` (see the module docstring)."""
    rank = len(user)
    dims = reduced_dims(rule, params, rank)
    if dims is None or not dims:
        raise LoweringError(f"{rule.name} with {axes_said(params)} names no dims the code "
                            "generator can reduce")
    if rule.axes == "groups":  # (N, C, *S) -> (N, G, C/G, *S); reduce C/G and S
        groups = params["num_groups"]
        return Domain(tuple(range(rank)), (1, groups), rank - 1)
    kept = tuple(k for k in range(rank) if k not in dims)
    return Domain(kept + tuple(dims), None, len(dims))

