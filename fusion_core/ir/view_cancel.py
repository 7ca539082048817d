"""An upsample's chain made a plain strided read: its merges cancelled against the splits
of the kernel's domain (``codegen/upsample_space.py``).

Reads a chain of steps (``ir/views.py``) holding a ``Repeat`` and the shape it starts from;
returns the same view with each run of consecutive reshapes that ends at the shape it
began with left out: reshapes compose, and one to the same shape is no view at all. A
``Split`` after a ``Permute`` moves before it first (the same split of the dim the permute
reads, then the permute widened), so a permute between the upsample and the split domain
(`F.interpolate(x).permute(0, 2, 3, 1)`) does not keep them apart. Why: an upsample's
merge of (h, s), with stride 0 along `s`, needs strides no tensor has; without it and the
split the chain reads the source with stride 0. Only in such chains (``views.cancelled``):
elsewhere a split's size test stays (a launcher refusing another number of groups).
"""

from __future__ import annotations

from collections.abc import Sequence

from .views import Merge, Permute, Reshape, Split, Step, Unflatten

# Steps that regroup elements in row-major order and nothing else.
_RESHAPES = (Reshape, Merge, Unflatten, Split)


def _split_first(perm: Permute, split: Split, rank: int) -> tuple[Split, Permute]:
    """(split, permute) doing what `perm` then `split` do (module docstring)."""
    a = split.dim % rank
    b = perm.perm[a]

    def moved(x: int) -> int:
        return x + 1 if x > b else x

    order = ([moved(p) for p in perm.perm[:a]] + [b, b + 1]
             + [moved(p) for p in perm.perm[a + 1:]])
    return Split(b, split.groups, split.per), Permute(tuple(order))


def _splits_before_permutes(steps: Sequence[Step], shape: tuple[int, ...]) -> list[Step]:
    out = list(steps)
    moved = True
    while moved:
        moved, at = False, shape
        for k in range(len(out) - 1):
            if isinstance(out[k], Permute) and isinstance(out[k + 1], Split):
                out[k], out[k + 1] = _split_first(out[k], out[k + 1], len(at))
                moved = True
                break
            at = out[k].shape(at)
    return out


def cancel(steps: Sequence[Step], shape: tuple[int, ...]) -> tuple[Step, ...]:
    """`steps` without their identity runs of reshapes (module docstring)."""
    steps = _splits_before_permutes(steps, shape)
    out: list[Step] = []
    k = 0
    while k < len(steps):
        if not isinstance(steps[k], _RESHAPES):
            out.append(steps[k])
            shape = steps[k].shape(shape)
            k += 1
            continue
        start, at, back, end = shape, shape, k, k
        while end < len(steps) and isinstance(steps[end], _RESHAPES):
            at = steps[end].shape(at)
            end += 1
            if at == start:
                back = end  # the run so far is the identity
        out.extend(steps[back:end])
        shape = at
        k = end
    return tuple(out)
