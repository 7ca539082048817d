"""Split rows: the two kernels and the launch of a looped reduction whose rows are few and wide.

Reads a plan of kind "split" (``choices.kind``: one softmax, log_softmax, layer_norm,
rms_norm, group_norm, or sum/mean/amax/amin read per element, whose outputs are all per
element) and the scalar parameters its looped kernel
registered; writes, through the same ``CodeWriter`` and the same column loop as that kernel
(``emit.py``), two more ``@triton.jit`` functions and the ``_launch`` that picks between them.
One program per row leaves most SMs idle when rows are few (64 rows on 132 SMs), so each row
is cut into `splits` chunks of `chunk` columns (about equal, a multiple of 16), one program
each:

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

from . import direct_launch
from .emit import Chunk, column_loop, last_pass, rewritten, row_prologue, rows_boilerplate
from .lower import KernelPlan
from .reduce import Partials, emitter
from .writer import CodeWriter, KernelParams

WORKSPACE = "partial_ptr"  # the workspace's kernel parameter
# The launcher's locals besides the kernel's: input names must not take them.
LOCALS = ("splits", "chunk", "partials", "grid")
_CHUNK = Chunk(bound="chunk_cols", start="start + ", end="end")
# A chunk's width is a multiple of this: Triton then knows every chunk starts 16-aligned (as
# it knows of a row when n_cols is a multiple of 16), and keeps its loads vectorized.
CHUNK_ALIGN = 16


def _partials(plan: KernelPlan) -> Partials:
    r = plan.reduction
    assert r is not None
    found = emitter(r).partials(r)
    assert found is not None, "not a split plan (reduce.splittable)"
    return found


def _chunk_lines(n: int) -> list[str]:
    """The program's chunk of its rows, and where the rows' `n` partials start."""
    return ["split = tl.program_id(1)  # this program's chunk of the row",
            "start = split * chunk",
            "chunk_cols = tl.minimum(chunk, n_cols - start)",
            "end = start + chunk_cols",
            f"slot = rows * (tl.num_programs(1) * {n})  # the rows' partials in {WORKSPACE}"]


def _signature(name: str, pointers: list[str], params: KernelParams, consts: list[str],
               out: CodeWriter) -> None:
    out.lines(["@triton.jit", f"def {name}("])
    with out.indented():
        out.wrapped([*pointers, "n_rows", "n_cols", *params.names, "chunk",
                     *(f"{c}: tl.constexpr" for c in consts)])
    out.line("):")


def kernels(plan: KernelPlan, params: KernelParams) -> list[str]:
    """The partials and finish kernels' source; `params` are the looped kernel's (both take
    the same scalars, so one argument tuple serves all three)."""
    r = plan.reduction
    assert r is not None
    found = _partials(plan)
    n = len(found.names)
    known = list(params.names)
    ins = [t.ptr for t in plan.inputs]
    outs = [t.ptr for t in plan.outputs]
    out = CodeWriter()
    _signature(f"{plan.name}_partials", [*ins, WORKSPACE], params,
               ["BLOCK_SIZE", "ROWS_PER_PROGRAM", "COLS_ALIGN"], out)
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
    _signature(f"{plan.name}_finish", [*ins, *outs, WORKSPACE], params,
               ["BLOCK_SIZE", "ROWS_PER_PROGRAM", "COLS_ALIGN", "SPLITS_BLOCK"], out)
    with out.indented():
        rows_boilerplate(plan, "split rows, pass 2: merge the partials, write one chunk", out)
        out.lines(_chunk_lines(n))
        out.lines(["parts = tl.arange(0, SPLITS_BLOCK)[None, :]",
                   "part_mask = row_mask & (parts < tl.num_programs(1))"])
        out.lines(f"{name}_parts = tl.load({WORKSPACE} + slot + parts * {n} + {k}, "
                  f"mask=part_mask, other={empty})"
                  for k, (name, empty) in enumerate(zip(found.names, found.empty, strict=True)))
        out.lines(found.merge)
        row_prologue(plan, params, out)
        last_pass(plan, params, out, _CHUNK)
    if params.names != known:  # the launcher passes the looped kernel's scalars to all three
        raise AssertionError(f"{plan.name}: the split kernels index tensors the looped kernel "
                             f"does not ({params.names} vs {known})")
    return out.result()


def launch_fn(plan: KernelPlan, names: list[str], consts: list[tuple[str, str]],
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
    out.line(f"def _launch(config, args, {', '.join(tensors)}, wrap=None):")
    with out.indented():
        out.lines(['"""One launch under `config` = (block, rows, num_warps, splits): with',
                   "splits > 1 each row is cut into chunks of equal width (a multiple of",
                   f'{CHUNK_ALIGN}), one program each, and the partials and finish kernels run.',
                   '`wrap`: what makes the launches traceable (`traceable`)."""',
                   "block, rows, num_warps, splits = config",
                   "if splits == 1:"])
        with out.indented():  # one kernel: kept for a direct launch like any other
            out.line(f"kernel = {direct_launch.launched_kernel(f'{plan.name}_kernel')}")
            direct_launch.launch_lines("kernel", "(triton.cdiv(args[0], rows),)", tensors,
                                       consts, out)
        out.lines([f"chunk = triton.cdiv(triton.cdiv(args[1], splits), {CHUNK_ALIGN}) * "
                   f"{CHUNK_ALIGN}",
                   "splits = triton.cdiv(args[1], chunk)  # none empty",
                   f"partials = torch.empty((args[0], splits, {n}), "
                   f"dtype={r.dtype}, device={outputs[0]}.device)",
                   "grid = (triton.cdiv(args[0], rows), splits)"])
        for kernel, pointers, extra in (
                ("partials", names, []),
                ("finish", tensors, ["SPLITS_BLOCK=triton.next_power_of_2(splits)"])):
            out.line(f"{direct_launch.launched_kernel(f'{plan.name}_{kernel}')}[grid](")
            with out.indented():
                out.wrapped([*pointers, "partials", "*args", "chunk",
                             *(f"{name}={value}" for name, value in consts), *extra,
                             "num_warps=num_warps"])
            out.line(")")

