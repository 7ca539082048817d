"""The end of a launcher's `_plan` (``launch_plan.py`` writes the rest): from the inputs'
layouts at this call's iteration shape `shape` to its return.

Reads a ``KernelPlan`` and the kernel's ``KernelSignature``; writes the output shapes (each
result's dims that follow the iteration shape, ``KernelPlan.followed``, less the leading ones
no input has) and their contiguous strides, the checks that the results' layouts still fall in
the kernel's groups, the tuning constants' power-of-two check, the spans and row counts, the
kernel arguments, the tuning key and the candidate configurations. Before them, the device
the kernel runs on (``runtime._run_device``: where torch would compute, at the first input
that is not a CPU 0-dim tensor; a kernel without inputs takes it as its parameter), which
`_plan` returns for the launcher's outputs, and the inputs the launcher copies there
(``runtime._device_copies``): decided once per launch plan, read from it by warm calls.
"""

from __future__ import annotations

from . import launch_maps
from .choices import kind
from .plan import KernelPlan, Role, TensorArg
from .signature import N_COLS, N_ROWS, Family, KernelSignature, strides_local
from .writer import CodeWriter, tuple_literal

# Where the kernel runs: a local of `_plan` and of the launcher (from the plan). A kernel with
# no tensor input (its values all generated, `arange → add → to`) takes it as its one
# parameter, of the same name.
DEVICE = "device"
NO_INPUTS_DEVICE = DEVICE


def sized(plan: KernelPlan, sig: KernelSignature, looped: bool, names: list[str],
          out: CodeWriter, with_frame: bool) -> None:
    """From the inputs' layouts at the iteration shape `shape` to `_plan`'s return (with_frame:
    the tuning constants were checked by `_frame`, the configurations kept per bucket)."""
    if names:  # a CPU 0-dim input is read where the others are, as torch does: copied there
        flags = tuple_literal(f"copy{i}" for i in range(len(names)))
        owners = tuple(f"`{a}`" for a in names)
        moved = tuple_literal(names)
        out.lines([f"{DEVICE} = _run_device({', '.join(names)})",
                   f"copies = _device_copies({flags}, {moved}, {DEVICE}, {owners!r})"])
    else:
        out.line("copies = ()")
    out.line("out_shapes = " + tuple_literal(_shape_expr(t, plan) for t in plan.outputs))
    # Each result's first dim as a position in the iteration shape: inputs with fewer dims
    # than analysed give results without the dims no input has, as eager does.
    firsts = [plan.rank - len(t.shape) for t in plan.outputs]
    # Counted from the analysed inputs' padding: a view in the group can give the results
    # more dims than any input has (`reshape_as` adding a size-1 dim).
    base = _analysed_lead(plan)
    extra = f" - {base}" if base else ""
    out.line(f"if lead{f' > {base}' if base else ''}:  # inputs with fewer dims than analysed")
    with out.indented():
        out.line(f"out_shapes = tuple(s[max(0, lead{extra} - first):] for s, first in "
                 f"zip(out_shapes, ({', '.join(map(str, firsts))},)))")
    out.lines(launch_maps.dropped_dim_checks(plan) + launch_maps.output_shape_lines(plan))
    # Dense strides in eager's order (OUT_ORDERS), worked out once: `torch.empty_strided`
    # given them allocates in about half the host time `torch.empty` takes to parse them.
    out.line("out_strides = tuple(_dense_strides(s, order) for s, order in "
             "zip(out_shapes, OUT_ORDERS, strict=True))")
    grown = launch_maps.grown_inputs(plan, names)
    for i, t in enumerate(plan.outputs):
        strided = sig.has_strides(Role.OUT, i)
        if strided or t.view:
            # A result is allocated in its own shape; seen through its map, its dims must
            # still fall in the kernel's groups (a dim 1 long where analysed may have hidden
            # that two grouped dims are apart at another size: `_written` then names the
            # input longer there).
            seen = launch_maps.output_layout(t, i)
            got = strides_local(Role.OUT, i) if strided else "_"
            sizes = f"(out_shapes[{i}], {tuple(t.value_shape)})"
            out.line(f"{got} = _written({seen}, shape, OUT_GROUPS[{i}], "
                     f"{f'the result `{t.value}`'!r}, {sizes}, {grown})")
    if not with_frame:
        pow2_check(plan, looped, out)
    out.line(f"{Family.SPAN} = _spans(shape)")
    empty = f"copies, {DEVICE}, out_shapes, out_strides, (), None, ()"
    if not plan.two_d:
        out.line("if span[0] == 0:")
        with out.indented():
            out.line(f"return {empty}")
        out.line("bucket = _bucket(1, span[0])")
    else:
        _rows_checks(plan, sig, looped, empty, out)
        out.line(f"bucket = _bucket({N_ROWS.launch}, {N_COLS.launch})")
    out.bracketed("args = (", sig.launch_args)
    dtypes = "".join(f"{a}.dtype, " for a in names).rstrip()
    out.line(f"tune_key = (bucket, ({dtypes}), {DEVICE})")
    if not with_frame:
        out.line(f"return copies, {DEVICE}, out_shapes, out_strides, args, tune_key, "
                 "_configs(bucket)")
        return
    out.lines(["configs = by_bucket.get(bucket)",
               "if configs is None:  # the frame's first call in this shape bucket",
               "    configs = by_bucket[bucket] = _configs(bucket)",
               f"return copies, {DEVICE}, out_shapes, out_strides, args, tune_key, configs"])


def pow2_check(plan: KernelPlan, looped: bool, out: CodeWriter) -> None:
    pow2 = _pow2_constants(plan, looped)
    out.line("_powers_of_two(" + ", ".join(f"{c}={c}" for c in pow2) + ")")


def _rows_checks(plan: KernelPlan, sig: KernelSignature, looped: bool, empty: str,
                 out: CodeWriter) -> None:
    """Row count and checks of a kernel indexed by rows and columns."""
    cols = "shape[-1] if shape else 1" if plan.reduced == 1 else f"span[{plan.rank - plan.reduced}]"
    out.lines([f"{N_COLS.launch} = {cols}", "if span[0] == 0:"])
    with out.indented():
        if plan.skeleton == "reduction":
            out.line("if any(0 not in s for s in out_shapes):")
            with out.indented():
                out.lines(['raise ValueError(f"{NAME}: the rows to reduce are empty (last '
                           'axis of size 0); "',
                           '                 "call the original ops for empty inputs")'])
        out.line(f"return {empty}")
    out.line(f"{N_ROWS.launch} = span[0] // {N_COLS.launch}")
    if sig.uses(Family.RSPAN):  # the kernel reads spans of the rows' dims
        out.line(f"{Family.RSPAN} = [s // {N_COLS.launch} for s in {Family.SPAN}]")
    if not plan.tiled and not looped:
        out.line("if n_cols > MAX_BLOCK:  # a power of two: as its block would be")
        with out.indented():
            # the fix: an analysis at rows this wide generates a kernel for them (a wider block
            # or the column loop), where the kernel can loop at all
            fix = ("analyse the model again at an input shape with rows at least this wide, "
                   "which generates a kernel for them" if plan.can_loop else
                   "its reductions need the whole row in one block: keep the original ops for "
                   "rows this wide")
            out.lines(['raise ValueError(f"{NAME}: rows of {n_cols} columns are wider than "',
                       '                 f"this kernel keeps in one block ({MAX_BLOCK}): "',
                       f'                 {fix!r})'])


def _analysed_lead(plan: KernelPlan) -> int:
    """The dims `_iteration_shape` pads at the analysed shapes (what the launcher passes it:
    each input's own shape)."""
    ranks = [len(t.value_shape) for t in plan.inputs]
    ranks += [len(t.shape) for t in plan.generated]
    return max(0, plan.rank - max(ranks, default=plan.rank))


def _pow2_constants(plan: KernelPlan, looped: bool) -> list[str]:
    """Tuning constants that end up as block shapes or warp counts."""
    if plan.tiled:
        return ["BLOCK", "TILE_COLS", "NUM_WARPS"]
    if plan.skeleton == "elementwise":
        return ["BLOCK", "NUM_WARPS"]
    loop = ["LOOP_BLOCK", "MAX_LOOP_BLOCK"] if looped else []
    if kind(plan, looped) == "split":
        loop += ["SPLIT_PROGRAMS", "SPLIT_LOOP_BLOCK", "SPLIT_JOINED_PROGRAMS"]
    # MAX_BLOCK too: a row is refused where it is wider (`n_cols > MAX_BLOCK`, the block a
    # power of two would take)
    return loop + ["MAX_BLOCK", "PACK_ELEMENTS", "MAX_ROWS", "NUM_WARPS"]


def _shape_expr(arg: TensorArg, plan: KernelPlan) -> str:
    """The output's runtime shape as the kernel indexes it, from the iteration shape `shape`
    (``launch_maps.output_shape_lines`` maps it back through the output's index map)."""
    rank = plan.rank
    kept = plan.followed(arg)
    dims = [f"shape[{k}]" if arg.access.aligned[k] == plan.domain[k] and k < kept else "1"
            for k in range(rank)]
    dims = dims[len(dims) - len(arg.shape):]
    if dims == [f"shape[{k}]" for k in range(rank)]:
        return "shape"
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
