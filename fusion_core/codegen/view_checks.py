"""Size checks a generated launcher runs before it views its inputs (`_fits`).

An input's index map (``launch_maps.input_lines``) splits some of its dims: group_norm's
channel groups (``ir/views.Split``), a domain dim an upsample grew (``upsample_space.py``),
an ``Unflatten`` undoing a merge; or slices one at bounds worked out at its analysed length
(``Narrow``: `_narrowed` refuses another length, naming no input). At a size the split does
not divide, torch's own `unflatten` error would name no kernel, no input and no fix; two
inputs a nearest upsample relates (`F.interpolate(x, size=skip.shape[2:])`) that are not
the kernel's factor apart would fail in `torch.broadcast_shapes`; a result written with a
merged dim split (``regroup_space.py``) fails in `unflatten` where the input's dims there
hold another number of elements. These checks say it first,
in the launcher's names (the user's) and the input's own dims, with the analysed size beside
this call's.

Reads a ``KernelPlan`` and the launcher's names; writes the body of `_fits(*parameters)`,
which the launcher calls where it works out a new plan (the cold path: a warm call never
runs it). A dim reached through a merge has no one size to name: no check, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.views import (
    Merge,
    Narrow,
    Permute,
    Reorder,
    Repeat,
    Split,
    Squeeze,
    Step,
    Unflatten,
    Unsqueeze,
    inverse,
    shape_after,
)
from .plan import KernelPlan, TensorArg

_MARK = 1_000_003  # a size no real dim has: where a dim goes through a chain
FIX = "regenerate it at these sizes or keep the original ops"


@dataclass(frozen=True)
class Cut:
    """A dim of input `name` (launcher name) read split, repeated or sliced by its index
    map: own dim `dim` (analysed `size` long; negative where the step counts from the end,
    as a slice does for any number of leading dims) reaches domain dim `lands` whole."""

    name: str
    arg: TensorArg
    dim: int
    size: int
    lands: int | None
    step: Step


def _divisor(step: Step) -> int | None:
    """What the dim a step splits must divide by (a Repeat or a slice: 1); None for steps
    any size takes."""
    if isinstance(step, Split):
        return step.per or step.groups
    if isinstance(step, Unflatten):
        return math.prod(s for s in step.sizes if s != -1)
    return 1 if isinstance(step, Repeat | Narrow) else None


def _cuts(t: TensorArg, name: str, rank: int) -> list[Cut]:
    """The dims of `t` its chain splits or repeats, traced to its own dims and the domain's."""
    out = []
    shape = t.value_shape
    for k, step in enumerate(t.view):
        q = _divisor(step)
        if q is None:
            continue
        for r in range(len(shape)):
            marked = tuple(_MARK * q if j == r else n for j, n in enumerate(shape))
            if shape_after(t.view[:k], marked)[step.dim] != _MARK * q:
                continue
            after = shape_after(t.view, marked)
            hits = [j for j, n in enumerate(after) if n == _MARK]
            lands = hits[0] + rank - len(after) if len(hits) == 1 else None
            dim = r - len(shape) if step.dim < 0 else r
            out.append(Cut(name, t, dim, shape[r], lands, step))
            break
    return out


def fits_lines(plan: KernelPlan, firsts: dict[str, str]) -> list[str]:
    """The checks of `_fits` (none where no input's map splits a dim it can trace)."""
    cuts: list[Cut] = []
    for t in plan.inputs:  # a second load views its parameter again: its own map's checks
        if t.view:
            cuts += sorted(_cuts(t, firsts[t.value], plan.rank), key=lambda c: c.dim)
    repeats = [c for c in cuts if isinstance(c.step, Repeat)]
    checks = [_rank(t, firsts[t.value]) if _rank_bound(t.view) else
              _moved_rank(t, firsts[t.value]) for t in plan.inputs]
    checks += [_squeezed(t, firsts[t.value]) for t in plan.inputs if t.view]
    checks.append(_results(plan, firsts))
    checks.append(_split_results(plan, firsts))
    for c in cuts:
        if isinstance(c.step, Repeat):
            continue
        src = next((s for s in repeats if c.lands is not None and s.lands == c.lands
                    and isinstance(c.step, Split) and s.step.factor == c.step.per), None)
        checks.append(_upsampled(c, src) if src is not None else _divides(plan, c))
    # two loads sliced alike (a rotary embedding's halves) check their parameter once
    return [line for check in dict.fromkeys(map(tuple, checks)) for line in check]


def _rank_bound(steps: tuple[Step, ...]) -> bool:
    """The chain names dims counted from the start: at another rank they would be others
    (a slice's dim counts from the end, any leading dims pass)."""
    return any((isinstance(s, Permute | Merge | Unflatten | Split | Repeat)
                and not isinstance(s, Reorder))  # written from the end
               or (isinstance(s, Unsqueeze | Squeeze) and any(d >= 0 for d in s.dims))
               for s in steps)


def _rank(t: TensorArg, name: str) -> list[str]:
    n = len(t.value_shape)
    return [f"if {name}.dim() != {n}:",
            f'    raise ValueError(f"{{NAME}}: `{name}` has {{{name}.dim()}} dims; this kernel '
            f'views it by dim as analysed, with {n} ({t.value_shape}); {FIX}")']


def _moved_rank(t: TensorArg, name: str) -> list[str]:
    """A ``Reorder`` takes fewer leading dims, not fewer than the dims it moves."""
    n = max((s.moved for s in t.view if isinstance(s, Reorder)), default=0)
    if not n:
        return []
    return [f"if {name}.dim() < {n}:",
            f'    raise ValueError(f"{{NAME}}: `{name}` has {{{name}.dim()}} dims; this kernel '
            f'reads its last {n} in their memory order ({t.value_shape} analysed); {FIX}")']


def _squeezed(t: TensorArg, name: str) -> list[str]:
    """Own dims of `t` its chain drops as size 1 (a batch of 1 a flatten or a reshape
    merged away when analysed, or the `-1` part of a split that was 1: Swin's windows of a
    map one window high): at another size `squeeze` keeps the dim, and the view would
    reach the kernel with a dim too many."""
    out = []
    shape = t.value_shape
    for k, step in enumerate(t.view):
        if not isinstance(step, Squeeze):
            continue
        # the dim itself (1), or the `-1` part of an earlier split by the others' product
        parts = [1] + [math.prod(x for x in s.sizes if x != -1) for s in t.view[:k]
                       if isinstance(s, Unflatten) and -1 in s.sizes]
        for r in range(len(shape)):
            m = next((m for m in parts if _lands(t.view[:k], shape, r, m, step)), None)
            if m is None:
                continue
            dim = r - len(shape) if any(d < 0 for d in step.dims) else r
            a = f"{name}.shape[{dim}]"
            what = ("drops that dim, 1 long when analysed" if m == 1 else
                    f"reads it as analysed, {m} long, split with a dim of 1 that it drops")
            out += [f"if {a} != {m}:",
                    f'    raise ValueError(f"{{NAME}}: `{name}` is {{{a}}} long in dim {dim}; '
                    f'this kernel {what}; {FIX}")']
    return out


def _lands(steps: tuple[Step, ...], shape: tuple[int, ...], r: int, m: int,
           squeeze: Squeeze) -> bool:
    """Own dim `r`, `m` times a mark long, reaches a dim `squeeze` drops as the mark."""
    marked = tuple(_MARK * m if j == r else n for j, n in enumerate(shape))
    at = shape_after(steps, marked)
    return any(at[d % len(at)] == _MARK for d in squeeze.dims)


def _upsampled(c: Cut, src: Cut) -> list[str]:
    """`c`'s dim is read as `src`'s repeated by the factor: exactly that many times longer."""
    f = src.step.factor
    a, x = f"{c.name}.shape[{c.dim}]", f"{src.name}.shape[{src.dim}]"
    return [f"if {a} != {x} * {f}:",
            f'    raise ValueError(f"{{NAME}}: `{c.name}` is {{{a}}} long in dim {c.dim} and '
            f'`{src.name}` {{{x}}} in dim {src.dim}; this kernel reads `{c.name}` there as '
            f'`{src.name}` upsampled by exactly {f} (analysed {src.size} -> {c.size}); {FIX}")']


def grouped(plan: KernelPlan, t: TensorArg, name: str) -> Cut | None:
    """The split of a cat operand `t` into group_norm's groups of a fixed size, along the
    cat dim (a piece of a group-split cat: its length there is fixed, ``cat_bounds``)."""
    if t.piece is None:
        return None
    return next((c for c in _cuts(t, name, plan.rank) if isinstance(c.step, Split)
                 and c.step.per and c.lands == t.piece.dim), None)


def _divides(plan: KernelPlan, c: Cut) -> list[str]:
    a = f"{c.name}.shape[{c.dim}]"
    step = c.step
    if grouped(plan, c.arg, c.name) == c:  # said as the cat check in `_plan` says it
        assert isinstance(step, Split)
        return [f"if {a} != {c.size}:",
                f'    raise ValueError(f"{{NAME}}: a concatenated input, `{c.name}`, is {{{a}}} '
                f"channels long along the cat dim (dim {c.dim}); this kernel reads {c.size} "
                f"(group_norm's groups of {step.per}); {FIX}\")"]
    if isinstance(step, Narrow):  # `_narrowed` refuses it too, naming no input
        return [f"if {a} != {step.size}:",
                f'    raise ValueError(f"{{NAME}}: `{c.name}` is {{{a}}} long in dim {c.dim}; '
                f'this kernel slices it as analysed, where it was {step.size} long; {FIX}")']
    if isinstance(step, Unflatten) and -1 not in step.sizes:
        n = math.prod(step.sizes)
        return [f"if {a} != {n}:",
                f'    raise ValueError(f"{{NAME}}: `{c.name}` is {{{a}}} long in dim {c.dim}; '
                f'this kernel reads it as {step.sizes} there (analysed {c.size}); {FIX}")']
    q = _divisor(step)
    how = (f"{step.groups} groups" if isinstance(step, Split) and not step.per
           else f"groups of {q}")
    return [f"if {a} % {q}:",
            f'    raise ValueError(f"{{NAME}}: `{c.name}` is {{{a}}} long in dim {c.dim}; '
            f'this kernel reads it in {how} there (analysed {c.size}); {FIX}")']


def _reaching(t: TensorArg, dim: int, rank: int) -> list[int]:
    """The own dims of input `t` that its chain merges into domain dim `dim` (each marked in
    turn leaves a multiple of the mark there)."""
    out = []
    for r in range(len(t.value_shape)):
        marked = tuple(_MARK if j == r else n for j, n in enumerate(t.value_shape))
        after = shape_after(t.view, marked)
        at = dim - (rank - len(after))
        if 0 <= at < len(after) and after[at] % _MARK == 0:
            out.append(r)
    return out


def _results(plan: KernelPlan, firsts: dict[str, str]) -> list[str]:
    """A result the kernel computes merged but returns in its own shape (`h` beside
    `h.flatten(2).softmax(-1)`) is unflattened at its analysed sizes: the input whose dims
    make that domain dim must have them, or the result would come back in the analysed
    shape (a product that matches) or not at all (torch's `unflatten` error)."""
    out = []
    for o in plan.outputs:
        back = inverse(o.view, o.value_shape) if o.view else None
        if not back or not isinstance(back[0], Unflatten) or -1 in back[0].sizes:
            continue
        step = back[0]
        dim = step.dim + plan.rank - len(o.shape)
        for t in plan.inputs:
            dims = _reaching(t, dim, plan.rank) if t.view else []
            want = tuple(t.value_shape[r] for r in dims)
            if not dims or want != step.sizes or dims != list(range(dims[0], dims[-1] + 1)):
                continue
            a, span = firsts[t.value], f"{dims[0]}:{dims[-1] + 1}"
            out += [f"if tuple({a}.shape[{span}]) != {want}:",
                    f'    raise ValueError(f"{{NAME}}: `{a}` is {{tuple({a}.shape[{span}])}} in '
                    f"dims {dims[0]}-{dims[-1]}; this kernel returns `{o.value}` (analysed "
                    f'{o.value_shape}) with {want} there; {FIX}")']
            break
    return out


def _split_domain(o: TensorArg, rank: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(domain dims, sizes) of each dim of result `o` the kernel writes split
    (``regroup_space.py``: its map is unflattens, after the dims a reduction keeps as 1,
    then the permute into a domain another result set; or a flatten undone beside
    group_norm's groups, `group_norm(x.transpose(1, 2)).transpose(1, 2).flatten(0, 1)`).
    A group split, or an unflatten with a `-1` part, follows the size: not a fixed split."""
    if not o.view or not all(isinstance(s, Unflatten | Split | Unsqueeze | Permute)
                             for s in o.view):
        return []
    out = []
    for k, step in enumerate(o.view):
        if not isinstance(step, Unflatten) or -1 in step.sizes:
            continue
        # where the split's sizes land in the domain: marked, through the later steps
        marks = tuple(_MARK + j for j in range(len(step.sizes)))
        after = shape_after((Unflatten(step.dim, marks), *o.view[k + 1:]),
                            shape_after(o.view[:k], o.value_shape))
        if not all(m in after for m in marks):  # a later split cut one: not traced
            continue
        at = tuple(after.index(m) + rank - len(after) for m in marks)
        out.append((at, step.sizes))
    return out


def _split_results(plan: KernelPlan, firsts: dict[str, str]) -> list[str]:
    """A result written with a merged dim split (a permuted value's heads merged): the
    input whose dims make the split dims must hold as many elements there, or torch's own
    `unflatten` error would name no kernel and no input."""
    out = []
    for o in plan.outputs:
        for split, sizes in _split_domain(o, plan.rank):
            whole: dict[int, tuple[str, int]] = {}  # split dim -> (input, its dim there)
            for t in plan.inputs:
                dims = [_reaching(t, d, plan.rank) for d in split]
                # a dim reached whole, not broadcast there (a gate's size-1 dim of features)
                dims = [r if len(r) == 1 and t.value_shape[r[0]] == n else []
                        for r, n in zip(dims, sizes, strict=True)]
                for k, r in enumerate(dims):
                    if r:
                        whole.setdefault(k, (firsts[t.value], r[0]))
                if not all(dims):
                    continue
                a = firsts[t.value]
                got = " * ".join(f"{a}.shape[{r[0]}]" for r in dims)
                n = math.prod(sizes)
                out += [f"if {got} != {n}:",
                        f'    raise ValueError(f"{{NAME}}: `{a}` holds {{{got}}} elements in '
                        f"dims {', '.join(str(r[0]) for r in dims)}; this kernel writes "
                        f"`{o.value}` with them merged as {n} (analysed {sizes}); {FIX}\")"]
                break
            else:  # no input makes them all: each split dim one does make (a sequence
                # length beside heads split from channels, which ``_divides`` pins)
                for k, (a, r) in sorted(whole.items()):
                    out += [f"if {a}.shape[{r}] != {sizes[k]}:",
                            f'    raise ValueError(f"{{NAME}}: `{a}` is {{{a}.shape[{r}]}} long '
                            f"in dim {r}; this kernel writes `{o.value}` with it merged as "
                            f'analysed, {sizes[k]} of {sizes}; {FIX}")']
    return out
