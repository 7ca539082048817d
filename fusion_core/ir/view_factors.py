"""A chain of reshapes and permutes as factors of the source's dims: index math, no copy.

Reads a chain of steps (``views.py``) and the shape it starts from. Each source dim is
cut into *factors* (a dim of 12 read as (3, 4) holds two), and each dim of the chain's
result is the row-major merge of a list of factors. A reshape of a permuted value
(`x.permute(0, 2, 1, 3).reshape(b, t, h * d)`) merges factors that are not adjacent in
memory, which no strides express; a kernel reads it anyway where its iteration space splits
that result dim into the factors again (``codegen/regroup_space.py``), as Inductor's index
math splits the flat coordinate with div/mod.

- ``regrouped``: the same view as a chain no strides can refuse, where one exists: each
  source dim unflattened into its factors, one permute, then size-1 dims removed or added.
  None while a result dim still merges factors.
- ``result_factors``: the factor sizes each result dim merges (several where the kernel
  would have to split that dim), or None where a reshape cuts a factor unevenly (a (3, 2)
  read as (2, 3)); ``uneven`` says whether a chain holds such a reshape.

Only runs of permutes, reshapes, merges, unflattens and size-1 changes are factored: a
slice, an expand, a cat's piece, a repeat or group_norm's channel split ends a run, and
the runs on either side are factored apart.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .views import (
    Merge,
    Permute,
    Reshape,
    Squeeze,
    Step,
    Unflatten,
    Unsqueeze,
    _insert_order,
    shape_after,
)

# Steps that only regroup or reorder dims: what a run of factored steps may hold.
FACTORED = (Permute, Reshape, Merge, Unflatten, Squeeze, Unsqueeze)


class _Uneven(Exception):
    """A reshape cuts a factor at a size that does not divide it."""


class _Factors:
    """Source dims as lists of factor ids, result dims as lists of factor ids."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.size: dict[int, int] = dict(enumerate(shape))
        self.source: list[list[int]] = [[k] for k in range(len(shape))]
        self.dims: list[list[int]] = [[k] for k in range(len(shape))]
        self.next = len(shape)  # the next new factor's id

    def _cut(self, f: int, outer: int) -> tuple[int, int]:
        """Factor `f` as (outer, inner) factors, in the source and wherever it is read."""
        a, b = self.next, self.next + 1
        self.next += 2
        self.size[a], self.size[b] = outer, self.size.pop(f) // outer
        for lists in (self.source, self.dims):
            for ids in lists:
                if f in ids:
                    at = ids.index(f)
                    ids[at:at + 1] = [a, b]
        return a, b

    def _split(self, ids: list[int], sizes: Sequence[int], ones: bool = False
               ) -> list[list[int]]:
        """`ids` (merged, row-major) cut into groups of `sizes`; factors cut where needed.
        `ones`: a size 1 before a factor is a factor of its own (the 1 of an unflatten)."""
        out: list[list[int]] = []
        rest = list(ids)
        for want in sizes:
            group: list[int] = []
            if ones and want == 1 and rest and self.size[rest[0]] != 1:
                a, b = self._cut(rest.pop(0), 1)
                group.append(a)
                rest.insert(0, b)
            while want > 1:
                if not rest:
                    raise _Uneven
                f = rest.pop(0)
                n = self.size[f]
                if want % n == 0:
                    group.append(f)
                    want //= n
                elif n % want == 0:  # the factor's outer part ends this group
                    a, b = self._cut(f, want)
                    group.append(a)
                    rest.insert(0, b)
                    want = 1
                else:
                    raise _Uneven
            out.append(group)
        if any(self.size[f] != 1 for f in rest):
            raise _Uneven
        return out

    def step(self, s: Step, shape: tuple[int, ...]) -> None:
        """Apply `s` to a view of `shape`."""
        d = self.dims
        if isinstance(s, Permute):
            self.dims = [d[p] for p in s.perm]
        elif isinstance(s, Merge):
            d[s.first:s.last] = [[f for ids in d[s.first:s.last] for f in ids]]
        elif isinstance(s, Unflatten):
            sizes = s.shape(shape)[s.dim:s.dim + len(s.sizes)]
            d[s.dim:s.dim + 1] = self._split(d[s.dim], sizes, ones=True)
        elif isinstance(s, Reshape):
            self.dims = self._split([f for ids in d for f in ids], s.target)
        elif isinstance(s, Unsqueeze):
            for k in _insert_order(s.dims):
                d.insert(k if k >= 0 else len(d) + 1 + k, [])
        elif isinstance(s, Squeeze):
            gone = {k % len(d) for k in s.dims}
            if any(self.size[f] != 1 for k in gone for f in d[k]):
                raise _Uneven
            self.dims = [ids for k, ids in enumerate(d) if k not in gone]

    def coalesce(self) -> None:
        """Neighbouring factors of one source dim read side by side, outer first, as one."""
        for src in self.source:
            k = 0
            while k + 1 < len(src):
                a, b = src[k], src[k + 1]
                home = next((ids for ids in self.dims if a in ids), None)
                seen = [x for x in home or () if self.size[x] != 1 or x in (a, b)]
                if b in seen and seen.index(b) == seen.index(a) + 1:
                    self.size[a] *= self.size.pop(b)
                    del src[k + 1]
                    home.remove(b)
                else:
                    k += 1

    def without_ones(self) -> list[list[int]]:
        return [[f for f in ids if self.size[f] != 1] for ids in self.dims]


def _factored(steps: Sequence[Step], shape: tuple[int, ...]) -> _Factors | None:
    f = _Factors(shape)
    try:
        for s in steps:
            f.step(s, shape)
            shape = s.shape(shape)
    except _Uneven:
        return None
    f.coalesce()
    return f


def result_factors(steps: Sequence[Step], shape: tuple[int, ...]
                   ) -> tuple[tuple[int, ...], ...] | None:
    """Per result dim of a run of factored steps, the sizes of the factors it merges (module
    docstring); None where the run cannot be factored."""
    if not all(isinstance(s, FACTORED) for s in steps):
        return None
    f = _factored(steps, shape)
    if f is None:
        return None
    return tuple(tuple(f.size[x] for x in ids) for ids in f.without_ones())


def _regroup_run(steps: Sequence[Step], shape: tuple[int, ...]) -> tuple[Step, ...] | None:
    f = _factored(steps, shape)
    if f is None:
        return None
    dims = f.without_ones()
    if any(len(ids) > 1 for ids in dims):
        return None
    # A size-1 source dim read whole as a result dim (a batch of 1) stays that dim, not a
    # squeeze and an unsqueeze: at another batch the launcher's view keeps its rank.
    ones = {ids[0]: -1 - k for k, ids in enumerate(f.source) if len(ids) == 1
            and f.size[ids[0]] == 1}
    dims = [ids or [ones[x] for x in full if x in ones][:1]
            for ids, full in zip(dims, f.dims, strict=True)]
    out: list[Step] = []
    order: list[int] = []  # the factor (or -1 - k: size-1 source dim k) of each unflattened dim
    for k in range(len(f.source) - 1, -1, -1):
        # A dim split with a part of 1 (Swin's window rows of a map one window high) keeps
        # that part, dropped below: read whole, the dim would pass for its other part at any
        # size, where the launcher checks the split.
        ids = f.source[k] if len(f.source[k]) > 1 else [
            x for x in f.source[k] if f.size[x] != 1]
        if len(ids) > 1:
            out.append(Unflatten(k, tuple(f.size[x] for x in ids)))
        order[:0] = ids or [-1 - k]
    used = [ids[0] for ids in dims if ids]
    perm = tuple([order.index(x) for x in used]
                 + [j for j, x in enumerate(order) if x not in used])
    if perm != tuple(range(len(perm))):
        out.append(Permute(perm))
    if len(order) > len(used):
        out.append(Squeeze(tuple(range(len(used), len(order)))))
    if len(dims) > len(used):
        out.append(Unsqueeze(tuple(k for k, ids in enumerate(dims) if not ids)))
    return tuple(out)


def _runs(steps: Sequence[Step], shape: tuple[int, ...]
          ) -> Iterator[tuple[tuple[Step, ...], tuple[int, ...], bool]]:
    """(steps, the shape they start at, whether they are a run of factored steps holding a
    merge) for `steps` cut into such runs and the steps between them."""
    k = 0
    while k < len(steps):
        end = k + 1
        if isinstance(steps[k], FACTORED):
            while end < len(steps) and isinstance(steps[end], FACTORED):
                end += 1
        part = tuple(steps[k:end])
        yield part, shape, any(isinstance(s, (Merge, Reshape)) for s in part)
        shape = shape_after(part, shape)
        k = end


def regrouped(steps: Sequence[Step], shape: tuple[int, ...]) -> tuple[Step, ...] | None:
    """`steps` with each run of factored steps holding a merge written without merges
    (module docstring); None where such a run still merges factors or cannot be factored,
    or where the chain holds no merge."""
    out: list[Step] = []
    changed = False
    for part, start, merges in _runs(steps, shape):
        if merges:
            part = _regroup_run(part, start)
            if part is None:
                return None
            changed = True
        out.extend(part)
    return tuple(out) if changed else None


def uneven(steps: Sequence[Step], shape: tuple[int, ...]) -> bool:
    """A run of `steps` merges dims a reshape then cuts where no factor ends (a (3, 2) read
    as (2, 3)): no split of the result's dims reads it without div/mod."""
    return any(merges and _factored(part, start) is None
               for part, start, merges in _runs(steps, shape))


def source_dims(steps: Sequence[Step], shape: tuple[int, ...]
                ) -> tuple[tuple[int, ...], ...] | None:
    """Per result dim of a run of factored steps, the source dim of each factor (not 1) it
    merges, in order; None where the run cannot be factored."""
    if not all(isinstance(s, FACTORED) for s in steps):
        return None
    f = _factored(steps, shape)
    if f is None:
        return None
    owner = {x: k for k, ids in enumerate(f.source) for x in ids}
    return tuple(tuple(owner[x] for x in ids) for ids in f.without_ones())
