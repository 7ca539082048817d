"""The `_plan(*inputs)` function of a generated launcher (``launcher.py`` writes the rest).

Reads a ``KernelPlan``, the kernel's ``KernelSignature`` and the launcher's parameter names
(``launcher.arg_names``); writes the text of ``_plan``: where each cat's operands end at
this call (``cat_bounds.py``), the checks that the inputs still
broadcast the way the kernel indexes them (or must be copied into the analysed layout),
then (``launch_sized.py``) the device the kernel runs on and the inputs copied there, the
output shapes and their contiguous strides, the scalar kernel arguments, the tuning key and the
candidate configurations of its shape bucket. Everything it computes depends only on the
inputs' shapes, strides and devices (and the scalar operands it passes on, ``plan.ScalarArg``),
which is why the launcher caches its result per layout (and scalar values).

A KV cache's layout changes every call (`past_k` one token longer), so a kernel whose cat
operands' lengths follow the call (``framed``) also writes `_frame`: what holds at every such
length, kept in the launcher's FRAMES by the inputs outside the cats' dims (the other inputs'
whole layouts, the cat operands' shapes but for their length there: their strides follow the
length, so their layouts are checked at each call). A new length then costs its ends, the
iteration shape with them, the cat operands' layouts, output shapes, spans and arguments; the
broadcast, the other inputs' layouts, the tuning constants' check and each shape bucket's
configurations come from the frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from . import cat_bounds, launch_maps, view_checks
from .launch_sized import NO_INPUTS_DEVICE, pow2_check, sized
from .lower import KernelPlan, TensorArg
from .plan import PieceRead, Role
from .signature import PIECE_ENDS as ENDS
from .signature import KernelSignature, strides_local
from .writer import CodeWriter


def plan_args(plan: KernelPlan, names: list[str]) -> str:
    """`_plan`'s parameters (or arguments): the tensors (or the device), then the scalar
    operands (``plan.ScalarArg``), which `args` passes on."""
    return ", ".join((names or [NO_INPUTS_DEVICE]) + [a.launch for a in plan.scalars])


def plan_fn(plan: KernelPlan, sig: KernelSignature, looped: bool, names: list[str],
            out: CodeWriter) -> None:
    """`_plan(*inputs)`: every check and launch choice that depends only on the key; for a
    kernel with a cat whose operands' lengths follow the call, `_frame` too (``framed``)."""
    shapes = _shapes(plan, names, lambda piece: cat_bounds.total(plan, piece))
    if not framed(plan):
        out.line(f"def _plan({plan_args(plan, names)}):")
        with out.indented():
            _plan_body(plan, sig, looped, names, shapes, out)
        return
    _frame_fn(plan, sig, looped, names, shapes, out)
    out.lines(["", "", f"def _plan({plan_args(plan, names)}, frames=None):"])
    with out.indented():
        _framed_body(plan, sig, looped, names, shapes, out)


def framed(plan: KernelPlan) -> bool:
    """Whether `_plan` keeps what holds at every length of a KV cache in a frame
    (``_frame_fn``): it has a cat whose operands' lengths follow the call."""
    return any(b.varying for b in plan.cats)


def _shapes(plan: KernelPlan, names: list[str], total: Callable[[PieceRead], str]
            ) -> list[str]:
    """The shapes `_iteration_shape` broadcasts, each cat's length along its dim `total`."""
    # A cat's operand counts at the result's size along the cat dim (its piece covers part).
    shapes = [_pieced(f"{a}.shape", t, total(t.piece), plan.rank) if t.piece else f"{a}.shape"
              for a, t in zip(names, plan.inputs, strict=True)]
    # A generated value's shape is the analysed one (the graph fixed it too: `arange(16)`),
    # but for the cat dim of a cat whose operands' lengths follow the call.
    return shapes + [_generated_shape(plan, t, total) for t in plan.generated]


def _broadcast(plan: KernelPlan, names: list[str], shapes: list[str]) -> str:
    """The `_iteration_shape` call over `shapes`, with their owners named for its refusal."""
    owners = [f"`{a}`" for a in names] + [f"the generated `{t.value}`" for t in plan.generated]
    return f"_iteration_shape({', '.join(shapes)}, names={tuple(owners)!r})"


def _plan_docstring(out: CodeWriter, with_frame: bool = False) -> None:
    out.lines(['"""Copies, device, output shapes and strides, kernel arguments, tuning key',
               "(shape bucket, dtypes, device) and candidate configurations for these inputs'",
               'layout; raises if the kernel cannot run them. The launcher caches the result.'
               + ('' if with_frame else '"""')])
    if with_frame:
        out.lines(["`frames`: the launcher's FRAMES, which keeps what `_frame` works out (None:",
                   'worked out afresh and not kept, as for tracing)."""'])


def _plan_body(plan: KernelPlan, sig: KernelSignature, looped: bool, names: list[str],
               shapes: list[str], out: CodeWriter) -> None:
    _plan_docstring(out)
    out.lines(cat_bounds.ends_lines(plan, names))
    out.line(f"shape, lead = {_broadcast(plan, names, shapes)}")
    _input_layouts(plan, sig, names, range(len(names)), out)
    sized(plan, sig, looped, names, out, with_frame=False)


def _frame_fn(plan: KernelPlan, sig: KernelSignature, looped: bool, names: list[str],
              shapes: list[str], out: CodeWriter) -> None:
    """`_frame(*inputs, piece_ends)`: the part of `_plan` that holds at every length of the
    varying cats' operands, given what `_plan` keys it on (``_frame_key``)."""
    out.line(f"def _frame({', '.join(names)}, {ENDS}):")
    with out.indented():
        out.lines(['"""What `_plan` works out once for every length of the cat operands that',
                   "follow the call (a KV cache): the iteration shape but for the cats' dims,",
                   "the layouts of the inputs read through no such cat, the tuning constants'",
                   "check, and (filled by `_plan`) each shape bucket's configurations. `free`:",
                   "no input but the cats' operands is longer than one along the cats' dims,",
                   "so `_plan` sets those to the cats' lengths at each call (else it",
                   'broadcasts)."""'])
        one = _shapes(plan, names, lambda piece: (
            "1" if plan.cats[piece.cat].varying else cat_bounds.total(plan, piece)))
        out.lines(["# the cats' operands one long along the cats' dims: only another input can",
                   "# make the broadcast longer there",
                   f"shape, lead = {_broadcast(plan, names, one)}"])
        out.line("free = " + " and ".join(f"shape[{d}] == 1" for d in _varying_dims(plan)))
        if _inputs(plan, follow=False):  # their layouts are checked at this call's shape
            _lengths_or_broadcast(plan, names, shapes, out)
        _input_layouts(plan, sig, names, _inputs(plan, follow=False), out)
        pow2_check(plan, looped, out)
        out.line(f"return shape, lead, free, {''.join(k + ', ' for k in _kept(plan, sig))}{{}}")


def _framed_body(plan: KernelPlan, sig: KernelSignature, looped: bool, names: list[str],
                 shapes: list[str], out: CodeWriter) -> None:
    """`_plan` of a framed kernel: its frame looked up (or worked out), then the rest."""
    _plan_docstring(out, with_frame=True)
    out.lines(cat_bounds.ends_lines(plan, names))
    build = f"_frame({', '.join(names)}, {ENDS})"
    out.line("if frames is None:  # nothing kept (tracing: fake tensors)")
    out.line(f"    frame = {build}")
    out.line("else:")
    with out.indented():
        out.lines(["# what the frame reads: the inputs but for the cat operands' lengths and",
                   "# strides (checked below at each call), and whether each cat is one long",
                   "# (`_layout` skips dims of length one)"])
        out.bracketed("key = (", _frame_key(plan, names))
        out.lines(["frame = frames.get(key)",
                   "if frame is None:  # other dims, dtypes, devices or layouts of the rest",
                   "    if len(frames) >= LAUNCH_CACHE_SIZE:  # the oldest frame makes room",
                   "        del frames[next(iter(frames))]",
                   f"    frame = frames[key] = {build}"])
    out.line(f"shape, lead, free, {''.join(k + ', ' for k in _kept(plan, sig))}by_bucket = frame")
    _lengths_or_broadcast(plan, names, shapes, out)
    _input_layouts(plan, sig, names, _inputs(plan, follow=True), out)
    sized(plan, sig, looped, names, out, with_frame=True)


def _inputs(plan: KernelPlan, follow: bool) -> list[int]:
    """The inputs read through a varying cat's piece (`follow`), or the others."""
    return [i for i, t in enumerate(plan.inputs) if cat_bounds.follows_call(plan, t) == follow]


def _kept(plan: KernelPlan, sig: KernelSignature) -> list[str]:
    """What the frame keeps of the other inputs' layouts: copy flags, group strides."""
    return [name for i in _inputs(plan, follow=False)
            for name in (f"copy{i}", strides_local(Role.IN, i))
            if name.startswith("copy") or sig.has_strides(Role.IN, i)]


def _varying_dims(plan: KernelPlan) -> list[int]:
    return sorted({b.dim for b in plan.cats if b.varying})


def _lengths_or_broadcast(plan: KernelPlan, names: list[str], shapes: list[str],
                          out: CodeWriter) -> None:
    """The iteration shape at this call: the frame's with each varying cat's dim at the
    cat's length, or (`free` false: another input is as long there; or two cats along one
    dim differ) broadcast as eager."""
    totals: dict[int, list[str]] = {}
    for c, b in enumerate(plan.cats):
        if b.varying:
            totals.setdefault(b.dim, []).append(f"{ENDS}[{c}][-1]")
    parts, start = [], 0
    for d in _varying_dims(plan):
        parts += [f"shape[{start or ''}:{d}]"] if d > start else []
        parts.append(f"({totals[d][0]},)")
        start = d + 1
    parts += [f"shape[{start}:]"] if start < plan.rank else []
    same = "".join(f" and {t[0]} == {u}" for t in totals.values() for u in t[1:])
    if same:
        out.line("# cats along one dim as long as each other (else the broadcast refuses them)")
    out.lines([f"if free{same}:" + ("" if same else "  # the cats' lengths along their dims are "
                                    "this call's"),
               f"    shape = {' + '.join(parts)}",
               "else:  # another input is as long along a cat's dim: broadcast as eager does",
               f"    shape, lead = {_broadcast(plan, names, shapes)}"])


def _frame_key(plan: KernelPlan, names: list[str]) -> list[str]:
    """Every input's (shape, stride, dtype, device) as the launch cache keys it, but a cat
    operand's without its length along the cat's dim and its strides; then, per varying
    cat, whether it is one long."""
    parts = []
    for a, t in zip(names, plan.inputs, strict=True):
        if cat_bounds.follows_call(plan, t):
            assert t.piece is not None
            at = t.piece.dim - plan.rank
            rest = f" + {a}.shape[{at + 1}:]" if at + 1 < 0 else ""
            parts += [f"{a}.shape[:{at}]{rest}", f"{a}.dtype", f"{a}.device"]
        else:
            parts += [f"{a}.{p}" for p in ("shape", "stride()", "dtype", "device")]
    return parts + [f"{ENDS}[{c}][-1] == 1" for c, b in enumerate(plan.cats) if b.varying]


def _input_layouts(plan: KernelPlan, sig: KernelSignature, names: list[str],
                   indices: Iterable[int], out: CodeWriter) -> None:
    """Each of these inputs' cat length checks, copy flag and index group strides."""
    firsts = launch_maps.first_names(plan, names)
    for i in indices:
        a, t = names[i], plan.inputs[i]
        strides = strides_local(Role.IN, i) if sig.has_strides(Role.IN, i) else "_"
        if t.piece is not None:  # its groups hold at its own size along the cat dim
            _piece_check(plan, i, a, firsts[t.value], out)
        seen = _pieced("shape", t, cat_bounds.length(plan, t.piece), plan.rank, whole=False) if (
            t.piece) else "shape"
        out.line(f"copy{i}, {strides} = _layout({a}, {seen}, IN_GROUPS[{i}], IN_ORDERS[{i}], "
                 f"{f'`{firsts[t.value]}`'!r})")


def _piece_check(plan: KernelPlan, i: int, a: str, shown: str, out: CodeWriter) -> None:
    """Input `i` (launcher name `a`, its parameter `shown`) is as long along its cat dim as
    its piece: the analysed length, or this call's, which another input of the same operand
    sets."""
    piece = plan.inputs[i].piece
    assert piece is not None
    bounds, at = plan.cats[piece.cat], piece.along - plan.rank
    source = bounds.sources[piece.part]
    # group_norm's groups along the cat dim: `_fits` checks them in channels, as passed (a
    # split of another dim, an upsample's, leaves the cat dim's length as passed here)
    if source == i or view_checks.grouped(plan, plan.inputs[i], shown) is not None:
        return
    size = cat_bounds.length(plan, piece)
    why = (f"this kernel reads {size}; regenerate it at these sizes or keep the original ops"
           if source is None else
           f"another input of its operand is {{{size}}} (this kernel needs them equal)")
    out.lines([f"if {a}.shape[{at}] != {size}:",
               f"    raise ValueError(f\"{{NAME}}: a concatenated input, `{shown}`, is "
               f"{{{a}.shape[{at}]}} long along the cat dim; {why}\")"])


def _generated_shape(plan: KernelPlan, t: TensorArg, total: Callable[[PieceRead], str]
                     ) -> str:
    """A generated value's shape for `_iteration_shape`: a cat's coordinate, or a cat's
    generated operand, at length `total` along a varying cat's dim."""
    if t.piece is not None:
        return _pieced(repr(tuple(t.shape)), t, total(t.piece), plan.rank)
    piece = cat_bounds.coordinate_piece(plan, t)
    if piece is None:
        return repr(tuple(t.shape))
    return "(" + ", ".join([total(piece), *("1" for _ in t.shape[1:])]) + ",)"


def _pieced(shape: str, t: TensorArg, size: int | str, rank: int, whole: bool = True) -> str:
    """`shape` (a launcher expression) with `size` along the dim of `t`'s cat piece, the
    cat's length there (`whole`) or the piece's. A piece straddling group_norm's groups
    spans two dims: (groups, channels per group) for the cat's length, (1, its length) for
    the piece's (its view's size-1 group dim); such a cat's lengths are literals."""
    assert t.piece is not None
    at = t.piece.dim - rank  # negative: shapes are right-aligned
    per = t.piece.per
    sizes = ((size,) if not per else (int(size) // per, per) if whole else (1, size))
    end = at + len(sizes)
    tail = f" + {shape}[{end}:]" if end < 0 else ""
    return f"{shape}[:{at}] + ({', '.join(map(str, sizes))},){tail}"
