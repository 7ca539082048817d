"""The generated launcher's index-map lines: inputs seen through their maps, results
allocated in their own shape and stored through theirs.

Reads a ``KernelPlan`` whose ``TensorArg``s carry index maps (``indexing.py``) and the
launcher's argument names; writes lines and expressions that ``launcher.py`` places in
the generated file. Each map is the chain of torch view calls itself (no copy), so the
layout checks and the kernel then see domain-shaped tensors as for any other kernel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..ir.views import Squeeze, Step, Strided, ViewError, apply, inverse, plain
from .domain_view import source
from .plan import KernelPlan, TensorArg


def first_names(plan: KernelPlan, names: Sequence[str]) -> dict[str, str]:
    """Graph value -> the launcher parameter that takes it (an input loaded twice has
    one parameter; its second load is a local view of it)."""
    return {t.value: a for a, t in reversed(list(zip(names, plan.inputs, strict=True)))}


def grown_inputs(plan: KernelPlan, names: Sequence[str]) -> str:
    """`_written`'s `grown` (``runtime.py``): per input with a dim 1 long at analysis that is
    an iteration dim 1 long there too, (its `_plan` parameter, its name as the graph spells
    it, its analysed shape, {iteration dim: its dim})."""
    firsts = first_names(plan, names)
    parts = []
    for a, t in zip(names, plan.inputs, strict=True):
        dims = _grown_dims(t, plan.domain)
        if dims:
            parts.append(f"({a}, {f'`{firsts[t.value]}`'!r}, {tuple(t.value_shape)}, {dims})")
    return "(" + "".join(p + ", " for p in parts).rstrip() + ")"


def _grown_dims(t: TensorArg, domain: tuple[int, ...]) -> dict[int, int]:
    """{iteration dim: `t`'s own dim} for each own dim 1 long at analysis that its map makes
    an iteration dim 1 long there too: found by seeing the shape with that dim 2 long through
    the map (one that takes no other size there, a reshape to fixed sizes, gives none)."""
    shape, out = tuple(t.value_shape), {}
    for d in (d for d, n in enumerate(shape) if n == 1):
        grown = shape[:d] + (2,) + shape[d + 1:]
        try:
            seen = tuple(apply(plain(t.view, grown), torch.empty(grown, device="meta")).shape)
        except (ViewError, RuntimeError):
            continue
        if len(seen) != len(t.shape):  # a split that only a size-1 dim leaves an unsqueeze
            continue
        pad = len(domain) - len(seen)
        moved = [k + pad for k, n in enumerate(seen) if n == 2 and t.shape[k] == 1]
        if len(moved) == 1 and moved[0] >= 0 and domain[moved[0]] == 1:
            out[moved[0]] = d
    return out


def _fixed(t: TensorArg) -> bool:
    """Read through a selection (slice, select, expand) sized at analysis: only that shape."""
    return any(isinstance(s, Strided) for s in t.view)


def input_lines(plan: KernelPlan, names: Sequence[str]) -> list[str]:
    """Shape guards for sliced inputs, then every input rebound to its domain view (second
    loads first: they view the parameter before it is rebound)."""
    firsts = first_names(plan, names)
    pairs = list(zip(names, plan.inputs, strict=True))
    out: list[str] = []
    for a, t in {firsts[t.value]: t for t in plan.inputs if _fixed(t)}.items():
        out += [f"if tuple({a}.shape) != {tuple(t.value_shape)}:  # a slice's index map",
                f'    raise ValueError(f"{{NAME}}: `{a}` of shape {{tuple({a}.shape)}}; '
                f'this kernel slices it as analysed, at {tuple(t.value_shape)}")']
    again = [f"{a} = {source(t.view, firsts[t.value])}" for a, t in pairs
             if a != firsts[t.value]]
    views = [f"{a} = {source(t.view, a)}" for a, t in pairs if t.view and a == firsts[t.value]]
    if again or views:
        out += ["# inputs seen through their index maps (views: no copy)", *again, *views]
    return out


def seen_through_views(plan: KernelPlan, names: Sequence[str]) -> list[int]:
    """Positions of the launcher names the kernel reads through a view of a parameter: a
    second load or an index map."""
    firsts = first_names(plan, names)
    return [i for i, (a, t) in enumerate(zip(names, plan.inputs, strict=True))
            if t.view or a != firsts[t.value]]


def _meta_out(i: int) -> str:
    return f'torch.empty(out_shapes[{i}], device="meta")'


def output_shape_lines(plan: KernelPlan) -> list[str]:
    """`out_shapes` (domain-aligned) turned into each result's own shape."""
    if not any(t.view for t in plan.outputs):
        return []
    lines = ["out_shapes = list(out_shapes)  # results in their own shape"]
    for i, t in enumerate(plan.outputs):
        if t.view:
            back = inverse(t.view, t.value_shape)
            lines += [*_squeeze_checks(t, back, i),
                      f"out_shapes[{i}] = tuple({source(back, _meta_out(i))}.shape)"]
    return [*lines, "out_shapes = tuple(out_shapes)"]


def dropped_dim_checks(plan: KernelPlan) -> list[str]:
    """Guards that each leading dim of the iteration shape a result has no dim for is still 1
    long, where it was 1 long at analysis and the result covered every iteration point: then
    the result merged it away (`h.flatten(0, 1)` of a batch of 1 is right-aligned as (T, C)),
    and a longer one would have its rows written over each other, not kept."""
    lines: list[str] = []
    for t in plan.outputs:
        if math.prod(t.shape) != math.prod(plan.domain[:plan.followed(t)]):
            continue  # a broadcast result (one value for many points): nothing merged away
        for k in range(plan.rank - len(t.shape)):
            if plan.domain[k] != 1:
                continue
            lines += [f"if shape[{k}] != 1:",
                      f'    raise ValueError(f"{{NAME}}: the inputs are {{shape[{k}]}} long in '
                      f'dim {k} of the iteration shape {{shape}}; `{t.value}` has no dim for it '
                      f'(it was 1 long at the analysed {tuple(plan.domain)}, where '
                      f'`{t.value}` was {tuple(t.value_shape)}); regenerate it at these sizes or '
                      'keep the original ops")']
    return lines


def _squeeze_checks(t: TensorArg, back: Sequence[Step], i: int) -> list[str]:
    """Guards that each dim result `i`'s map squeezes is still 1 long: one analysed 1 long
    may be longer at another size (a reduction over a length of 1 reads like an elementwise
    op there), where torch's squeeze would silently keep it."""
    lines: list[str] = []
    for k, step in enumerate(back):
        if isinstance(step, Squeeze):
            at = source(back[:k], _meta_out(i))
            dims = ", ".join(map(str, step.dims))
            lines += [f"squeezed = tuple({at}.shape)",
                      f"if any(squeezed[d] != 1 for d in ({dims},)):",
                      f'    raise ValueError(f"{{NAME}}: `{t.value}` is written through its '
                      f'index map, which squeezes dims ({dims}) of {{squeezed}}, 1 long '
                      'where it was analysed; regenerate it at these sizes or keep the '
                      'original ops")']
    return lines


def output_layout(t: TensorArg, i: int) -> str:
    """A meta tensor laid out as result `i` is stored: its own shape through its map."""
    return source(t.view, f'torch.empty_strided(out_shapes[{i}], out_strides[{i}], device="meta")')


def kernel_output(t: TensorArg, i: int) -> str:
    """What the kernel stores into for result `i` (`out{i}` through its map)."""
    return source(t.view, f"out{i}")
