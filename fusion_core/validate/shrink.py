"""Smaller problems for Triton's interpreter (~2 ms per program instance).

Reads input specs, kernel iteration shapes and recorded tensors; writes smaller ones.
Two shrinks, for the two numerics gates:

- ``shrink_steps`` / ``smaller_sizes`` / ``resized``: the sizes each model input dim may
  try (the batch 1, any other dim above ``SMALL_DIM`` a few smaller sizes down to about
  ``SMALL_DIM``); ``model_shape.py`` keeps those the model runs at with the same graph.
  The whole model runs there with every kernel patched in (gate 2): the launchers read
  sizes at run time, so the very kernels written for the real shape run.
- ``row_shape`` / ``slice_rows``: one kernel's own inputs cut to a few rows (gate 1). The
  last dim of the iteration shape, the row a reduction walks, is never cut, and every other
  dim larger than 1 keeps at least 2: the launcher then makes the choices it makes at the
  real shape (block, rows per program, column loop) and each broadcast is still exercised.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..ir.shapes import InputSpec
from .inputs import TARGET_ROWS  # rows a kernel's numerics check aims at

SMALL_DIM = 16  # input dims above this shrink for the model numerics run
_ALIGN = 16  # remainder kept when a dim shrinks


def _small_dim(d: int) -> int:
    return d if d <= SMALL_DIM else min(d, SMALL_DIM + d % _ALIGN)


Position = tuple[int, int]  # (input, dim)


def smaller_sizes(d: int) -> tuple[int, ...]:
    """Sizes below `d` to try for one input dim, smallest first: ``SMALL_DIM`` plus `d`'s
    remainder mod 16 (multiples of 16 stay multiples of 16), then `d` halved as long as it
    divides evenly and stays at least ``SMALL_DIM`` (models that need a divisor of `d`,
    such as a patch or window size). Dims of ``SMALL_DIM`` or less stay."""
    halves = {d >> k for k in range(1, d.bit_length()) if d % (1 << k) == 0 and d >> k >= SMALL_DIM}
    return tuple(sorted(x for x in {_small_dim(d), *halves} if x < d))


def shrink_steps(specs: Sequence[InputSpec]
                 ) -> tuple[tuple[tuple[Position, ...], tuple[int, ...]], ...]:
    """(input dims shrunk together, sizes to try smallest first) for the model numerics
    run, in the order to try them: the batch (dim 0 of every input, when all agree) to 1,
    then the other dims grouped by size, largest first (a sequence length shared by two
    inputs only shrinks in both at once)."""
    leading = {s.shape[0] for s in specs if s.shape}
    batch = len(leading) == 1 and leading != {1}
    steps: list[tuple[tuple[Position, ...], tuple[int, ...]]] = []
    if batch:
        steps.append((tuple((i, 0) for i, s in enumerate(specs) if s.shape), (1,)))
    by_size: dict[int, list[Position]] = {}
    for i, s in enumerate(specs):
        for k, d in enumerate(s.shape):
            if (k > 0 or not batch) and smaller_sizes(d):
                by_size.setdefault(d, []).append((i, k))
    for d in sorted(by_size, reverse=True):
        steps.append((tuple(by_size[d]), smaller_sizes(d)))
    return tuple(steps)


def resized(specs: Sequence[InputSpec], positions: Sequence[Position], size: int
            ) -> tuple[InputSpec, ...]:
    """`specs` with each dim at `positions` set to `size`."""
    out = []
    for i, s in enumerate(specs):
        dims = [size if (i, k) in positions else d for k, d in enumerate(s.shape)]
        out.append(s.resized(tuple(dims)))  # its memory order kept
    return tuple(out)


def row_shape(domain: Sequence[int], target_rows: int = TARGET_ROWS) -> tuple[int, ...]:
    """`domain` with its row dims (all but the last) cut so rows ~ target: each dim larger
    than 1 starts at 2 (or 16 when it is a multiple of 16), then the innermost ones grow
    back toward their real size while the rows stay within the target."""
    if len(domain) < 2:
        return tuple(domain)
    rows = list(domain[:-1])
    cut = [d if d <= 2 else (_ALIGN if d % _ALIGN == 0 else 2) for d in rows]
    cut = [min(c, d) for c, d in zip(cut, rows, strict=True)]
    for k in reversed(range(len(rows))):
        if cut[k] == rows[k]:
            continue
        others = math.prod(cut) // cut[k]
        step = _ALIGN if rows[k] % _ALIGN == 0 else 1
        fit = max(cut[k], target_rows // max(others, 1) // step * step)
        cut[k] = min(rows[k], fit)
    return (*cut, domain[-1])


def _cut_index(shape: Sequence[int], domain: Sequence[int], small: Sequence[int],
               per_row: bool) -> list[slice]:
    dom, sm = (domain[:-1], small[:-1]) if per_row else (domain, small)
    pad = len(dom) - len(shape)
    index = []
    for k, size in enumerate(shape):
        full, want = dom[pad + k], sm[pad + k]
        # The iteration's last dim is never cut (see row_shape); a broadcast dim stays.
        index.append(slice(0, want) if size == full and want < full else slice(None))
    return index


def cut_shape(shape: Sequence[int], domain: Sequence[int], small: Sequence[int],
              per_row: bool = False) -> tuple[int, ...]:
    """The shape of a value of `shape` once the iteration shape is cut to `small`."""
    return tuple(len(range(size)[s]) for size, s in
                 zip(shape, _cut_index(shape, domain, small, per_row), strict=True))


def slice_rows(t: torch.Tensor, domain: Sequence[int], small: Sequence[int],
               per_row: bool = False) -> torch.Tensor:
    """`t` (broadcast against `domain`, right-aligned; a per-row value against its rows)
    cut to the part `small` covers, laid out densely in the same dim order as `t`."""
    if tuple(domain) == tuple(small) or t.dim() == 0:
        return t.clone()
    part = t[tuple(_cut_index(t.shape, domain, small, per_row))]
    order = sorted(range(t.dim()), key=lambda k: (t.stride(k) != 0, -t.stride(k)))
    strides, step = [0] * t.dim(), 1
    for k in reversed(order):
        strides[k], step = step, step * max(part.shape[k], 1)
    return torch.empty_strided(part.shape, strides, dtype=t.dtype, device=t.device).copy_(part)
