"""View ops as index steps: what a permute, reshape, slice or expand does to coordinates.

A view node becomes a short tuple of ``Step`` objects in our own terms
(``view_recognition.py`` reads the node and says which), which ``ir/normalize.py`` stores
in the node's params under ``INDEX_STEPS``. Each step maps a
tensor to a view of the same memory: ``apply`` does it to a torch tensor (meta tensors
in the code generator), ``source`` writes the same call as Python text for a generated
launcher, and ``inverse`` gives the step that maps the result back, when there is one
(a slice drops elements, so it has none). ``Piece`` (a concatenation's operand as part
of its result) and ``Repeat`` live in ``view_pieces.py``. ``Split`` is no view op of a
model: it is group_norm's channel split, the one step a reduction's own order needs besides a
permute (``ir/iteration.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .view_pieces import Piece, Repeat  # steps no strides of the operand express

INDEX_STEPS = "index_steps"  # the params key of a view node's steps


class ViewError(ValueError):
    """A step that cannot be applied to this tensor's strides (a reshape that would copy)."""


def _literal(values: Sequence[int]) -> str:
    inner = ", ".join(map(str, values))
    return f"({inner},)" if len(values) == 1 else f"({inner})"


@dataclass(frozen=True)
class Permute:
    perm: tuple[int, ...]

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return t.permute(self.perm)

    def source(self, var: str) -> str:
        return f"{var}.permute{_literal(self.perm)}"

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        inv = [0] * len(self.perm)
        for i, p in enumerate(self.perm):
            inv[p] = i
        return Permute(tuple(inv))

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[p] for p in self.perm)


@dataclass(frozen=True)
class Reorder(Permute):
    """A permute of a kernel's iteration space into its tensors' memory order
    (``codegen/memory_order_space.py``), written from the end (`movedim` of the dims it
    moves): a launcher given fewer leading dims than analysed, which it right-aligns, views
    them as well, as long as the dims it moves are there."""

    @property
    def moved(self) -> int:
        """How many trailing dims it moves (the ones before stay in place)."""
        first = next((k for k, p in enumerate(self.perm) if p != k), len(self.perm))
        return len(self.perm) - first

    def _ends(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        rank, n = len(self.perm), self.moved
        return tuple(p - rank for p in self.perm[rank - n:]), tuple(range(-n, 0))

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return t.movedim(*self._ends())

    def source(self, var: str) -> str:
        src, dst = self._ends()
        return f"{var}.movedim({_literal(src)}, {_literal(dst)})"

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return Reorder(super().inverse(shape).perm)

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        src, _ = self._ends()  # right-aligned, as `apply`
        return (*shape[:len(shape) - len(src)], *(shape[k] for k in src))


@dataclass(frozen=True)
class Reshape:
    """To a fixed shape; only where the strides allow it without a copy (`.view`)."""

    target: tuple[int, ...]

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        try:
            return t.view(self.target)
        except RuntimeError:
            raise ViewError(f"a reshape of shape {tuple(t.shape)}, strides {t.stride()} to "
                            f"{self.target}") from None

    def source(self, var: str) -> str:
        return f"{var}.reshape{_literal(self.target)}"

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return Reshape(tuple(shape))

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self.target


@dataclass(frozen=True)
class Merge:
    """Dims [first, last) merged into one (`flatten`): any sizes, so launchers stay generic."""

    first: int
    last: int

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return Reshape(self.shape(tuple(t.shape))).apply(t)

    def source(self, var: str) -> str:
        return f"{var}.flatten({self.first}, {self.last - 1})"

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return Unflatten(self.first, tuple(shape[self.first:self.last]))

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (*shape[:self.first], math.prod(shape[self.first:self.last]),
                *shape[self.last:])


@dataclass(frozen=True)
class Unflatten:
    """Dim `dim` split into `sizes` (`unflatten`, a merge undone); the other dims keep any
    size, so a launcher called at another batch stays generic. One size may be -1, the
    size the others leave (a split sized at run time, ``ir/sizes.py``)."""

    dim: int
    sizes: tuple[int, ...]

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return Reshape(self.shape(tuple(t.shape))).apply(t)

    def source(self, var: str) -> str:
        return f"{var}.unflatten({self.dim}, {_literal(self.sizes)})"

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return Merge(self.dim, self.dim + len(self.sizes))

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        sizes = self.sizes
        if -1 in sizes:  # the size the others leave (`ir/sizes.py` writes it)
            rest = shape[self.dim] // math.prod(s for s in sizes if s != -1)
            sizes = tuple(rest if s == -1 else s for s in sizes)
        return (*shape[:self.dim], *sizes, *shape[self.dim + 1:])


@dataclass(frozen=True)
class Split:
    """Dim `dim` split into (`groups`, size / `groups`): group_norm's channels, each group's
    own dim. A size-1 dim (an operand broadcast over the channels) becomes (1, 1), so it
    stays broadcast along both parts; ``plain`` writes that case as the unsqueeze it is.
    With `per`, groups of `per` channels instead, as many as the size holds: a cat's operand
    split into its own groups (``ir/concat.pieces``), which another size must not regroup."""

    dim: int
    groups: int
    per: int = 0  # channels per group, where that is what stays fixed (0: size / groups)

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        size = t.shape[self.dim]
        if size == 1:
            return t.unsqueeze(self.dim)
        if size % (self.per or self.groups):
            parts = f"groups of {self.per}" if self.per else f"{self.groups} groups"
            raise ViewError(f"a split of {size} channels into {parts}")
        return t.unflatten(self.dim, self._sizes(size))

    def _sizes(self, size: int) -> tuple[int, int]:
        if self.per:
            return size // self.per, self.per
        return self.groups, size // self.groups

    def source(self, var: str) -> str:
        # unflatten raises for sizes the groups do not divide, as group_norm itself does
        parts = f"(-1, {self.per})" if self.per else f"({self.groups}, -1)"
        return f"{var}.unflatten({self.dim}, {parts})"

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return Merge(self.dim, self.dim + 2)

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        size = shape[self.dim]
        parts = (1, 1) if size == 1 else self._sizes(size)
        return (*shape[:self.dim], *parts, *shape[self.dim + 1:])


def _insert_order(dims: tuple[int, ...]) -> tuple[int, ...]:
    """The order to insert size-1 dims at result positions `dims` (all counted from the
    start, or all from the end): outermost first from the start, innermost first from the
    end, so each lands where the finished result has it. Removal runs the other way."""
    return tuple(sorted(dims, key=lambda d: (d < 0, -d if d < 0 else d)))


@dataclass(frozen=True)
class Unsqueeze:
    """Size-1 dims inserted at these positions of the result; negative ones count from its
    end (a reduction's dims put back: right-aligned, they hold for inputs with fewer
    leading dims too)."""

    dims: tuple[int, ...]

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        for d in _insert_order(self.dims):
            t = t.unsqueeze(d)
        return t

    def source(self, var: str) -> str:
        return "".join(f".unsqueeze({d})" for d in _insert_order(self.dims)).join((var, ""))

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return Squeeze(self.dims)

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        out = list(shape)
        for d in _insert_order(self.dims):
            out.insert(d if d >= 0 else len(out) + 1 + d, 1)
        return tuple(out)


@dataclass(frozen=True)
class Squeeze:
    """Size-1 dims removed at these positions of the input; negative ones count from its
    end."""

    dims: tuple[int, ...]

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        for d in reversed(_insert_order(self.dims)):
            t = t.squeeze(d)
        return t

    def source(self, var: str) -> str:
        return "".join(f".squeeze({d})"
                       for d in reversed(_insert_order(self.dims))).join((var, ""))

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return Unsqueeze(self.dims)

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        gone = {d % len(shape) for d in self.dims}
        return tuple(s for k, s in enumerate(shape) if k not in gone)


@dataclass(frozen=True)
class Strided:
    """A selection: result dim j walks input dim `dims[j][0]` in steps of `dims[j][1]`
    (dim -1: a broadcast, stride 0), starting at input coordinates `offsets`."""

    sizes: tuple[int, ...]
    dims: tuple[tuple[int, int], ...]
    offsets: tuple[int, ...]

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        st = t.stride()
        strides = tuple(m * st[k] if k >= 0 else 0 for k, m in self.dims)
        start = t.storage_offset() + sum(c * s for c, s in zip(self.offsets, st, strict=True))
        return t.as_strided(self.sizes, strides, start)

    def source(self, var: str) -> str:
        strides = [f"{m} * {var}.stride({k})" if k >= 0 else "0" for k, m in self.dims]
        start = "".join(f" + {c} * {var}.stride({k})" for k, c in enumerate(self.offsets) if c)
        return (f"{var}.as_strided({_literal(self.sizes)}, ({', '.join(strides)}"
                f"{',' if len(strides) == 1 else ''}), {var}.storage_offset(){start})")

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return None  # it drops or repeats elements

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self.sizes


@dataclass(frozen=True)
class Narrow:
    """A plain slice of one dim (`x[..., h:]`, `x[:, :4]`), the other dims whole at any
    size: input dim `dim` (negative, counted from the end) read from `start` for `length`.
    Its bounds were worked out where that dim was `size` long: a launcher refuses another
    size there (``_narrowed``, ``codegen/runtime.py``) and runs at any other."""

    dim: int
    start: int
    length: int
    size: int

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        if t.shape[self.dim] != self.size:
            raise ViewError(f"a slice worked out where dim {self.dim} is {self.size} long, "
                            f"of a tensor {t.shape[self.dim]} long there")
        return t.narrow(self.dim, self.start, self.length)

    def source(self, var: str) -> str:
        return f"_narrowed({var}, {self.dim}, {self.start}, {self.length}, {self.size})"

    def inverse(self, shape: tuple[int, ...]) -> Step | None:
        return None  # it drops elements

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        out = list(shape)
        out[self.dim] = self.length
        return tuple(out)


Step = (Permute | Reshape | Merge | Unflatten | Split | Unsqueeze | Squeeze | Strided | Narrow
        | Piece | Repeat)


def split_piece(steps: Sequence[Step]) -> tuple[tuple[Step, ...], Piece | None]:
    """(the steps before a chain's ``Piece``, the piece), or (steps, None) without one."""
    if steps and isinstance(steps[-1], Piece):
        return tuple(steps[:-1]), steps[-1]
    return tuple(steps), None


def cancelled(steps: Sequence[Step], shape: tuple[int, ...]) -> tuple[Step, ...]:
    """`steps` with an upsample's merges cancelled against the splits after them, where they
    hold a ``Repeat`` (``ir/view_cancel.py``); `steps` otherwise."""
    if not any(isinstance(s, Repeat) for s in steps):
        return tuple(steps)
    from .view_cancel import cancel  # it builds on the steps above

    return cancel(steps, shape)


def apply(steps: Sequence[Step], t: torch.Tensor) -> torch.Tensor:
    return applied(steps, t)[0]


def applied(steps: Sequence[Step], t: torch.Tensor) -> tuple[torch.Tensor, tuple[Step, ...]]:
    """(`t` seen through `steps`, the steps that did it): where a reshape of a permuted value
    meets strides it cannot view, the same view written without merges, if there is one
    (``view_factors.regrouped``); the strides' ViewError otherwise."""
    from .view_factors import regrouped  # it builds on the steps above

    steps = cancelled(steps, tuple(t.shape))
    try:
        return _through(steps, t), steps
    except ViewError:
        again = regrouped(steps, tuple(t.shape))
        if again is None:
            raise
    return _through(again, t), again


def _through(steps: Sequence[Step], t: torch.Tensor) -> torch.Tensor:
    for s in steps:
        t = s.apply(t)
    return t


def shape_after(steps: Sequence[Step], shape: tuple[int, ...]) -> tuple[int, ...]:
    for s in steps:
        shape = s.shape(shape)
    return tuple(shape)


def plain(steps: Sequence[Step], shape: tuple[int, ...]) -> tuple[Step, ...]:
    """`steps` for a tensor of `shape`, a ``Split`` of a size-1 dim written as the
    ``Unsqueeze`` it amounts to there (what a launcher runs: no size test at run time), an
    upsample's merges ``cancelled``."""
    out: list[Step] = []
    for s in cancelled(steps, shape):
        out.append(Unsqueeze((s.dim,)) if isinstance(s, Split) and shape[s.dim] == 1 else s)
        shape = s.shape(shape)
    return tuple(out)


def inverse(steps: Sequence[Step], shape: tuple[int, ...]) -> tuple[Step, ...] | None:
    """Steps mapping the result of `steps` (applied to `shape`) back to `shape`."""
    out: list[Step] = []
    for s in steps:
        back = s.inverse(shape)
        if back is None:
            return None
        out.insert(0, back)
        shape = s.shape(shape)
    return tuple(out)
