"""Split rows: the two kernels and the launch of a looped reduction whose rows are few and wide.

Reads a plan of kind "split" (``choices.kind``: one softmax, log_softmax, layer_norm,
rms_norm, group_norm, or sum/mean/amax/amin read per element, whose outputs are all per
element) and its looped kernel's signature (``signature.py``); writes, through the same
``CodeWriter`` and the same column loop as that kernel (``emit.py``), two more
``@triton.jit`` functions and the ``_launch`` that picks between them. One program per row
leaves most SMs idle when rows are few (64 rows on 132 SMs), so each row is cut into `splits`
chunks of `chunk` columns (about equal, a multiple of 16), one program each:

* ``<name>_partials`` (grid rows x splits): the statistics pass over its chunk only, then the
  chunk's per-row statistics (``reduce.Partials``: max and rescaled sum, Welford mean and M2,
  sum of squares, a collapse's accumulator) into a small workspace of [rows, splits,
  statistics] in the accumulation dtype. Its loads ask L2 to keep the chunk for the second
  kernel.
* ``<name>_finish`` (the same grid): loads all of its row's partials (a [ROWS, SPLITS_BLOCK]
  block), merges them into the row's statistics, then runs the looped kernel's last pass over
  its own chunk: prologue recomputed, reduction finished, epilogue, store.

Like Inductor's split reductions (a first kernel writes per-chunk partial results, a second
combines them), but the second kernel also writes the normalized row. ``splits == 1`` in a
configuration launches the ordinary looped kernel instead; the launcher allocates the
workspace per launch (the caching allocator makes that cheap, and CUDA graphs capture it).
"""

from __future__ import annotations

from ..names import jit_function_name
from . import direct_launch
from .emit import Chunk, column_loop, def_line, last_pass, rewritten, row_prologue, rows_boilerplate
from .lower import KernelPlan
from .plan import Role
from .reduce import Partials, emitter, widened
from .signature import CHUNK, EVEN_COLS, N_COLS, N_ROWS, ConstParam, KernelParams, KernelSignature
from .writer import CodeWriter

WORKSPACE = "partial_ptr"  # the workspace's kernel parameter
WORKSPACE_LOCAL = "partials"  # the launcher's workspace tensor
# The launcher's locals besides the kernel's: input names must not take them.
LOCALS = ("splits", CHUNK.launch, WORKSPACE_LOCAL, "grid")
_CHUNK = Chunk(bound="chunk_cols", start="start + ", end="end")
# A chunk's width is a multiple of this: Triton then knows every chunk starts 16-aligned (as
# it knows of a row when n_cols is a multiple of 16), and keeps its loads vectorized.
CHUNK_ALIGN = 16
# The finish kernel's block of a row's partials: one lane per chunk.
SPLITS_BLOCK = ConstParam("SPLITS_BLOCK", "triton.next_power_of_2(splits)")


def _partials(plan: KernelPlan) -> Partials:
    r = plan.reduction
    assert r is not None
    found = emitter(r).partials(r)
    assert found is not None, "not a split plan (reduce.splittable)"
    return found


def _chunk_lines(n: int) -> list[str]:
    """The program's chunk of its rows, and where the rows' `n` partials start."""
    return ["split = tl.program_id(1)  # this program's chunk of the row",
            f"start = split * {CHUNK.name}",
            f"chunk_cols = tl.minimum({CHUNK.name}, n_cols - start)",
            "end = start + chunk_cols",
            f"slot = rows * (tl.num_programs(1) * {n})  # the rows' partials in {WORKSPACE}"]


def _scalars(merged: tuple[str, ...], narrow: bool) -> list[str]:
    """The merged per-row values as scalars (a program takes one row): the last pass then
    broadcasts them in its own layout. Kept as [1, 1] blocks they keep the partials' layout,
    and Triton 3.6 broadcast layer_norm's mean and rstd to [1, BLOCK_SIZE] there and converted
    that through shared memory, BLOCK_SIZE values a thread (5-37x the time on an H200).
    `narrow`: statistics of an integer under 32 bits or bool, which tl.sum (like tl.max)
    returns as (u)int32; cast back, or an int8 amax would stop wrapping in the row's
    arithmetic as the looped kernel's does (floats and wider integers keep their dtype)."""
    cast = ".to({}.dtype)" if narrow else ""
    return ["", "# one row per program: its statistics as scalars",
            'tl.static_assert(ROWS_PER_PROGRAM == 1, "a split row takes one program per chunk")',
            *(f"{name} = tl.sum({name}){cast.format(name)}  # [1, 1] -> scalar"
              for name in merged)]


def signatures(plan: KernelPlan, looped: KernelSignature) -> tuple[KernelSignature,
                                                                   KernelSignature]:
    """The partials and finish kernels' signatures: the looped kernel's `args` (both index
    the same tensors, so one argument tuple serves all three), a workspace, the chunk width."""
    ins = [p for p in looped.pointers if p.role == Role.IN]
    # a chunk's columns end anywhere: its masks stay (no EVEN_COLS)
    partials = looped.variant(jit_function_name(plan.cluster_index, "partials"), ins,
                              WORKSPACE, (CHUNK,), (), unread=(EVEN_COLS,))
    finish = looped.variant(jit_function_name(plan.cluster_index, "finish"), looped.pointers,
                            WORKSPACE, (CHUNK,), (SPLITS_BLOCK,), unread=(EVEN_COLS,))
    return partials, finish


def kernels(plan: KernelPlan, looped: KernelSignature) -> list[str]:
    """The partials and finish kernels' source, given the looped kernel's signature."""
    r = plan.reduction
    assert r is not None
    found = _partials(plan)
    n = len(found.names)
    params = KernelParams(looped.scalars)  # the same tensors' strides get the same names
    partials, finish = signatures(plan, looped)
    out = CodeWriter()
    def_line(partials, out)
    with out.indented():
        rows_boilerplate(plan, "split rows, pass 1: one chunk's statistics", out)
        out.lines(_chunk_lines(n))
        row_prologue(plan, params, out)
        out.lines(["", "# the chunk's statistics, per lane of the column block",
                   *found.stats.before])
        column_loop(plan, params, out, [r.source], found.stats.inside, rewritten(plan), _CHUNK)
        out.lines([*found.stats.after, "", f"# to the workspace: [rows, splits, {n}]"])
        out.lines(f"tl.store({WORKSPACE} + slot + split * {n} + {k}, {name}, mask=row_mask)"
                  for k, name in enumerate(found.names))
    out.lines(["", ""])
    def_line(finish, out)
    with out.indented():
        rows_boilerplate(plan, "split rows, pass 2: merge the partials, write one chunk", out)
        out.lines(_chunk_lines(n))
        out.lines([f"parts = tl.arange(0, {SPLITS_BLOCK.name})[None, :]",
                   "part_mask = row_mask & (parts < tl.num_programs(1))"])
        out.lines(f"{name}_parts = tl.load({WORKSPACE} + slot + parts * {n} + {k}, "
                  f"mask=part_mask, other={empty})"
                  for k, (name, empty) in enumerate(zip(found.names, found.empty, strict=True)))
        out.lines(found.merge)
        out.lines(_scalars(found.merged, widened(r.dtype)))
        row_prologue(plan, params, out)
        last_pass(plan, params, out, _CHUNK)
    if tuple(params) != looped.scalars:  # the launcher passes the looped kernel's scalars
        raise AssertionError(f"{plan.name}: the split kernels index tensors the looped kernel "
                             f"does not ({params.names} vs {[p.name for p in looped.scalars]})")
    return out.result()


def launch_fn(plan: KernelPlan, looped: KernelSignature, names: list[str],
              out: CodeWriter) -> None:
    """`_launch(config, args, *tensors)` of a split plan: the looped kernel when the
    configuration's programs per row is 1 (returning its direct launcher's thunk), else the
    partials and finish kernels (None: two launches and a workspace per call, through
    Triton)."""
    r = plan.reduction
    assert r is not None
    n = len(_partials(plan).names)
    outputs = [f"out{i}" for i in range(len(plan.outputs))]
    tensors = names + outputs
    rows, cols = looped.size_arg(N_ROWS), looped.size_arg(N_COLS)
    out.line(f"def _launch(config, args, {', '.join(tensors)}, wrap=None):")
    with out.indented():
        out.lines(['"""One launch under `config` = (block, rows, num_warps, splits): with',
                   "splits > 1 each row is cut into chunks of equal width (a multiple of",
                   f'{CHUNK_ALIGN}), one program each, and the partials and finish kernels run.',
                   '`wrap`: what makes the launches traceable (`traceable`)."""',
                   "block, rows, num_warps, splits = config",
                   "if splits == 1:"])
        with out.indented():  # one kernel: kept for a direct launch like any other
            out.line(f"kernel = {direct_launch.launched_kernel(looped.function)}")
            direct_launch.launch_lines("kernel", f"(triton.cdiv({rows}, rows),)", tensors,
                                       looped.launch_consts, out)
        out.lines([f"{CHUNK.launch} = triton.cdiv(triton.cdiv({cols}, splits), {CHUNK_ALIGN}) * "
                   f"{CHUNK_ALIGN}",
                   f"splits = triton.cdiv({cols}, {CHUNK.launch})  # none empty",
                   f"{WORKSPACE_LOCAL} = torch.empty(({rows}, splits, {n}), "
                   f"dtype={r.dtype}, device={outputs[0]}.device)",
                   f"grid = (triton.cdiv({rows}, rows), splits)"])
        partials, finish = signatures(plan, looped)
        for kernel, pointers in ((partials, names), (finish, tensors)):
            out.line(f"{direct_launch.launched_kernel(kernel.function)}[grid](")
            with out.indented():
                out.wrapped([*pointers, WORKSPACE_LOCAL, "*args",
                             *(p.launch for p in kernel.extra),
                             *(f"{name}={value}" for name, value in kernel.launch_consts),
                             "num_warps=num_warps"])
            out.line(")")
