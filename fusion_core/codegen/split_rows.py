"""Split rows: the kernels and the launch of a looped reduction whose rows are few and wide.

Reads a plan of kind "split" (``choices.kind``: one softmax, log_softmax, layer_norm,
rms_norm, group_norm, or sum/mean/amax/amin read per element, whose outputs are all per
element) and its looped kernel's signature (``signature.py``); writes, through the same
``CodeWriter`` and the same column loop as that kernel (``emit.py``), three more
``@triton.jit`` functions and the ``_launch`` that picks among them. One program per row
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

* ``<name>_joined`` (a 1-D grid of rows x splits, a row's programs adjacent): the two in one
  launch. Each program stores its chunk's statistics, adds itself to its row's arrival
  counter and polls it (WAIT_POLLS times at most) until the row's other programs have
  stored theirs; a GPU starts programs in index order, so they run side by side. A program
  still short of partners computes their chunks' statistics itself, in registers over a
  narrower block (FALLBACK_BLOCK; the same statistics, rounded otherwise), so a late
  partner costs time, never a wrong result or a hang; under Triton's interpreter, which
  runs programs one at a time, WAIT_POLLS is 0 and that is the path. Then it merges and
  finishes its chunk as the finish kernel does.

Like Inductor's split reductions (a first kernel writes per-chunk partial results, a second
combines them), but the second kernel also writes the normalized row. ``splits == 1`` in a
configuration launches the ordinary looped kernel instead, a fifth number 1 the joined
kernel; the launcher allocates the workspace per launch (the caching allocator makes that
cheap, and CUDA graphs capture it). The joined kernel's counters (an arrival and a departure
count a row) are kept per stream (``runtime._arrivals``): the row's last program to leave
zeroes them, so a launch needs no fill kernel before it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..names import jit_function_name
from . import direct_launch, runtime
from .emit import Chunk, column_loop, def_line, last_pass, rewritten, row_prologue, rows_boilerplate
from .interpreted import range_bound
from .lower import KernelPlan
from .plan import Role
from .reduce import Partials, emitter, widened
from .signature import (
    CHUNK,
    EVEN_COLS,
    N_COLS,
    N_ROWS,
    ConstParam,
    Family,
    KernelParams,
    KernelSignature,
    ScalarParam,
)
from .writer import CodeWriter

WORKSPACE = "partial_ptr"  # the workspace's kernel parameter
WORKSPACE_LOCAL = "partials"  # the launcher's workspace tensor
ARRIVALS = "arrival_ptr"  # the joined kernel's counters, an arrival and a departure a row...
ARRIVALS_LOCAL = "arrivals"  # ...the launcher's tensor of them (runtime._arrivals)
# The launcher's locals besides the kernel's: input names must not take them.
LOCALS = ("splits", "joined", CHUNK.launch, WORKSPACE_LOCAL, ARRIVALS_LOCAL, "grid", "count")
_CHUNK = Chunk(bound="chunk_cols", start="start + ", end="end")
# A chunk's width is a multiple of this: Triton then knows every chunk starts 16-aligned (as
# it knows of a row when n_cols is a multiple of 16), and keeps its loads vectorized.
CHUNK_ALIGN = 16
# The finish kernel's block of a row's partials: one lane per chunk.
SPLITS_BLOCK = ConstParam("SPLITS_BLOCK", "triton.next_power_of_2(splits)")
# The joined kernel's chunks a row (the two-kernel form reads tl.num_programs(1))...
N_SPLITS = ScalarParam("n_splits", "splits", Family.CHUNK)
# ...and how long a program polls its row's arrivals before it computes the missing chunks'
# statistics itself (the generated file's WAIT_POLLS: none under the interpreter).
WAIT_POLLS = ConstParam("WAIT_POLLS", "WAIT_POLLS")
# The fallback's column block (``_wait``): at most 1024 columns. A path the GPU rarely runs
# still takes registers: at the kernel's own block (4096 a step, 8 warps) it raised a float32
# LayerNorm's from 60 to 94 a thread, 4 blocks an SM to 2 (sm_90, Triton 3.6; RESULTS.md,
# 2026-12-07); over 1024 columns it costs none.
FALLBACK_BLOCK = ConstParam("FALLBACK_BLOCK", "min(block, 1024)")
_FALLBACK_CHUNK = Chunk(bound="chunk_cols", start="start + ", end="end",
                        block=FALLBACK_BLOCK.name)
# Polls of about a microsecond each: a second, far past a row's other chunks (they run
# beside it), short of a hang should the GPU not start a row's programs together.
POLLS = 1 << 20


@dataclass(frozen=True)
class _Form:
    """How a split kernel finds its chunk: the split's index and the row's chunk count."""

    split: str
    splits: str


_TWO_KERNELS = _Form("tl.program_id(1)", "tl.num_programs(1)")
# one launch: a 1-D grid whose programs of one row are adjacent (a GPU starts programs in
# index order, so a row's programs run side by side and none waits on one not started)
_JOINED = _Form(f"tl.program_id(0) % {N_SPLITS.name}", N_SPLITS.name)


def _partials(plan: KernelPlan, late: bool = False) -> Partials:
    """The plan's split statistics over BLOCK_SIZE columns a step; `late`: those a program
    computes for a partner not arrived (``_wait``, looping over ``_FALLBACK_CHUNK``), over
    FALLBACK_BLOCK columns a step in names of their own (`<temp>_late_...`: compiled,
    Triton keeps a variable's type through a loop, and the pass before it left the same
    names a block of BLOCK_SIZE lanes)."""
    r = plan.reduction
    assert r is not None
    if late:
        r = replace(r, temp=f"{r.temp}_late")
    found = emitter(r).partials(r, FALLBACK_BLOCK.name) if late else emitter(r).partials(r)
    assert found is not None, "not a split plan (reduce.splittable)"
    return found


def _chunk_cols(part: str) -> list[str]:
    """Where chunk `part` of the row starts, its width and its end."""
    return [f"start = {part} * {CHUNK.name}",
            f"chunk_cols = tl.minimum({CHUNK.name}, n_cols - start)",
            "end = start + chunk_cols"]


def _chunk_lines(n: int, form: _Form) -> list[str]:
    """The program's chunk of its rows, and where the rows' `n` partials start."""
    return [f"split = {form.split}  # this program's chunk of the row", *_chunk_cols("split"),
            f"slot = rows * ({form.splits} * {n})  # the rows' partials in {WORKSPACE}"]


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


def signatures(plan: KernelPlan, looped: KernelSignature
               ) -> tuple[KernelSignature, KernelSignature, KernelSignature]:
    """The partials, finish and joined kernels' signatures: the looped kernel's `args` (all
    index the same tensors, so one argument tuple serves all four), a workspace (the joined
    kernel's arrivals too), the chunk width (and the joined kernel's chunks a row)."""
    ins = [p for p in looped.pointers if p.role == Role.IN]
    # a chunk's columns end anywhere: its masks stay (no EVEN_COLS)
    partials = looped.variant(jit_function_name(plan.cluster_index, "partials"), ins,
                              (WORKSPACE,), (CHUNK,), (), unread=(EVEN_COLS,))
    finish = looped.variant(jit_function_name(plan.cluster_index, "finish"), looped.pointers,
                            (WORKSPACE,), (CHUNK,), (SPLITS_BLOCK,), unread=(EVEN_COLS,))
    joined = looped.variant(jit_function_name(plan.cluster_index, "joined"), looped.pointers,
                            (WORKSPACE, ARRIVALS), (CHUNK, N_SPLITS),
                            (SPLITS_BLOCK, WAIT_POLLS, FALLBACK_BLOCK),
                            unread=(EVEN_COLS,))
    return partials, finish, joined


def _statistics(plan: KernelPlan, params: KernelParams, found: Partials, out: CodeWriter,
                where: Chunk = _CHUNK) -> None:
    """The statistics pass over the chunk at `start` (`where`: its loop; `found` emitted for
    the loop's block): the chunk's per-row values `found.names`."""
    r = plan.reduction
    assert r is not None
    out.lines(["", "# the chunk's statistics, per lane of the column block", *found.stats.before])
    column_loop(plan, params, out, [r.source], found.stats.inside, rewritten(plan), where)
    out.lines(found.stats.after)


def _stored(found: Partials, out: CodeWriter) -> None:
    """The program's chunk statistics to its slot of the workspace (only a chunk's own
    program writes its slot)."""
    n = len(found.names)
    out.lines(["", f"# to the workspace: [rows, splits, {n}]"])
    out.lines(f"tl.store({WORKSPACE} + slot + split * {n} + {k}, {name}, mask=row_mask)"
              for k, name in enumerate(found.names))


def _part_lines(form: _Form) -> list[str]:
    """Each chunk's lane of a [ROWS, SPLITS_BLOCK] block of a row's partials."""
    return [f"parts = tl.arange(0, {SPLITS_BLOCK.name})[None, :]",
            f"part_mask = row_mask & (parts < {form.splits})"]


def _loaded(found: Partials, cache: str = "") -> list[str]:
    """A row's partials loaded from the workspace (`cache`: a load's cache modifier)."""
    n = len(found.names)
    modifier = f", cache_modifier={cache!r}" if cache else ""
    return [f"{name}_parts = tl.load({WORKSPACE} + slot + parts * {n} + {k}, "
            f"mask=part_mask, other={empty}{modifier})"
            for k, (name, empty) in enumerate(zip(found.names, found.empty, strict=True))]


def _merge(plan: KernelPlan, found: Partials, out: CodeWriter) -> None:
    """A row's partials (`<name>_parts` blocks) merged, as scalars."""
    r = plan.reduction
    assert r is not None
    out.lines(found.merge)
    out.lines(_scalars(found.merged, widened(r.dtype)))


def _wait(plan: KernelPlan, params: KernelParams, found: Partials, out: CodeWriter) -> None:
    """The joined kernel between its passes: the program's arrival counted, its row's
    other programs waited for (at most WAIT_POLLS polls), then the row's partials: loaded
    when every program has stored its own, else computed here, in registers, over
    FALLBACK_BLOCK columns a step (the same statistics, rounded otherwise than a partner's
    own: the programs of such a row may merge values that differ in their last bits; never
    stored, so what a partner reads from the workspace is its partners' own). Thread 0 adds
    (Triton gives a scalar atomic to one thread): the barrier before it orders every
    thread's stores of the partials; `acq_rel` and `acquire` make the other programs'
    stores visible to the loads after the last barrier."""
    out.lines(["", "# arrival: this row's programs counted, each waiting for the others",
               "tl.debug_barrier()  # every thread's partials stored before the count",
               f'seen = tl.atomic_add({ARRIVALS} + 2 * pid, 1, sem="acq_rel") + 1',
               "polls = 0",
               f"while (seen < {N_SPLITS.name}) & (polls < {WAIT_POLLS.name}):"])
    with out.indented():
        out.lines([f'seen = tl.atomic_add({ARRIVALS} + 2 * pid, 0, sem="acquire")',
                   "polls += 1"])
    out.lines(["tl.debug_barrier()  # the partials read after every thread's wait",
               *_part_lines(_JOINED), f"if seen < {N_SPLITS.name}:"])
    late = _partials(plan, late=True)
    with out.indented():  # the interpreter runs one program at a time: none has arrived
        out.lines(["# a partner not counted yet (interpreted, programs run one at a time; or",
                   "# a GPU that did not start the row's programs together): its chunk's",
                   "# statistics computed here, kept in registers",
                   *(f"{name}_parts = tl.where(parts == split, {name}, {empty})"
                     for name, empty in zip(found.names, found.empty, strict=True)),
                   f"for other in range({range_bound(N_SPLITS.name)}):"])
        with out.indented():
            out.line("if other != split:")
            with out.indented():
                out.lines(_chunk_cols("other"))
                _statistics(plan, params, late, out, _FALLBACK_CHUNK)
                out.lines(f"{name}_parts = tl.where(parts == other, {mine}, {name}_parts)"
                          for name, mine in zip(found.names, late.names, strict=True))
        out.lines(["# this program's own chunk again", *_chunk_cols("split")])
    out.line("else:")
    with out.indented():
        out.lines(_loaded(found, ".cg"))  # past L1: other SMs wrote them


def _departure(out: CodeWriter) -> None:
    """The joined kernel's end: the program counted out of its row, and the row's last to
    leave sets both counters back to zero for the launcher's next launch (every partner has
    arrived by then, and none reads the arrivals after its wait: each program's arrival
    and polls are `acq_rel` or `acquire`, so its departure comes after them). `acquire`,
    not `acq_rel`: the reset comes after the count, and no store of the program's need wait
    for the count (a release drains them first). On an H100 the joined candidates at 8
    programs a row ran up to 30% slower once the departure came with `acq_rel`, the only
    change in their path; `acquire` is not measured yet (RESULTS.md, 2026-12-07)."""
    out.lines(["", "# departure: the row's last program out zeroes its counters (the next",
               "# launch counts from zero)",
               f'left = tl.atomic_add({ARRIVALS} + 2 * pid + 1, 1, sem="acquire") + 1',
               f"if left == {N_SPLITS.name}:"])
    with out.indented():
        out.lines([f'tl.atomic_xchg({ARRIVALS} + 2 * pid, 0, sem="relaxed")',
                   f'tl.atomic_xchg({ARRIVALS} + 2 * pid + 1, 0, sem="relaxed")'])


def kernels(plan: KernelPlan, looped: KernelSignature) -> list[str]:
    """The partials, finish and joined kernels' source, given the looped kernel's
    signature."""
    found = _partials(plan)
    n = len(found.names)
    params = KernelParams(looped.scalars)  # the same tensors' strides get the same names
    partials, finish, joined = signatures(plan, looped)
    out = CodeWriter()
    def_line(partials, out)
    with out.indented():
        rows_boilerplate(plan, "split rows, pass 1: one chunk's statistics", out)
        out.lines(_chunk_lines(n, _TWO_KERNELS))
        row_prologue(plan, params, out)
        _statistics(plan, params, found, out)
        _stored(found, out)
    out.lines(["", ""])
    def_line(finish, out)
    with out.indented():
        rows_boilerplate(plan, "split rows, pass 2: merge the partials, write one chunk", out)
        out.lines(_chunk_lines(n, _TWO_KERNELS))
        out.lines([*_part_lines(_TWO_KERNELS), *_loaded(found)])
        _merge(plan, found, out)
        row_prologue(plan, params, out)
        last_pass(plan, params, out, _CHUNK)
    out.lines(["", ""])
    def_line(joined, out)
    with out.indented():
        rows_boilerplate(plan, "split rows in one launch: a row's programs side by side", out,
                         f"tl.program_id(0) // {N_SPLITS.name}")
        out.lines(_chunk_lines(n, _JOINED))
        row_prologue(plan, params, out)
        _statistics(plan, params, found, out)
        _stored(found, out)
        _wait(plan, params, found, out)
        _merge(plan, found, out)
        last_pass(plan, params, out, _CHUNK)
        _departure(out)
    if tuple(params) != looped.scalars:  # the launcher passes the looped kernel's scalars
        raise AssertionError(f"{plan.name}: the split kernels index tensors the looped kernel "
                             f"does not ({params.names} vs {[p.name for p in looped.scalars]})")
    return out.result()


def launch_fn(plan: KernelPlan, looped: KernelSignature, names: list[str],
              out: CodeWriter) -> None:
    """`_launch(config, args, *tensors)` of a split plan: the looped kernel when the
    configuration's programs per row is 1 (returning its direct launcher's thunk), else the
    partials and finish kernels, or (a fifth number 1 in the configuration) the joined
    kernel (None: launched through Triton, a workspace per call)."""
    r = plan.reduction
    assert r is not None
    n = len(_partials(plan).names)
    outputs = [f"out{i}" for i in range(len(plan.outputs))]
    tensors = names + outputs
    rows, cols = looped.size_arg(N_ROWS), looped.size_arg(N_COLS)
    out.lines(["# Polls of a row's arrivals before a program of the joined kernel computes its",
               "# partners' statistics itself; interpreted, programs run one at a time: none.",
               f"WAIT_POLLS = 0 if _INTERPRETED else {POLLS}",
               "# The joined kernel's counters kept between launches (`_arrivals`).",
               "ARRIVALS = {}", "", "",
               *runtime.source_of(runtime.SPLIT_HELPERS).splitlines(), "", ""])
    out.line(f"def _launch(config, args, {', '.join(tensors)}, wrap=None):")
    with out.indented():
        out.lines(['"""One launch under `config` = (block, rows, num_warps, splits[, joined]):',
                   "with splits > 1 each row is cut into chunks of equal width (a multiple of",
                   f"{CHUNK_ALIGN}), one program each, and the partials and finish kernels run,",
                   "or with joined = 1 the joined kernel, in one launch. `wrap`: what makes the",
                   'launches traceable (`traceable`)."""',
                   "block, rows, num_warps, splits, *joined = config",
                   "if splits == 1:"])
        with out.indented():  # one kernel: kept for a direct launch like any other
            out.line(f"kernel = {direct_launch.launched_kernel(looped.function)}")
            direct_launch.launch_lines("kernel", f"(triton.cdiv({rows}, rows),)", tensors,
                                       looped.launch_consts, out)
        out.lines([f"{CHUNK.launch} = triton.cdiv(triton.cdiv({cols}, splits), {CHUNK_ALIGN}) * "
                   f"{CHUNK_ALIGN}",
                   f"splits = triton.cdiv({cols}, {CHUNK.launch})  # none empty",
                   f"{WORKSPACE_LOCAL} = torch.empty(({rows}, splits, {n}), "
                   f"dtype={r.dtype}, device={outputs[0]}.device)"])
        partials, finish, joined = signatures(plan, looped)
        out.line("if joined and joined[0]:")
        with out.indented():
            out.lines(["# two counters a row, arrivals and departures: run, kept for the next",
                       "# launch (each row's last program out zeroes them); traced, fresh",
                       f"count = 2 * triton.cdiv({rows}, rows)",
                       "if wrap is None:",
                       f"    {ARRIVALS_LOCAL} = _arrivals(count, {outputs[0]}.device)",
                       "else:",
                       f"    {ARRIVALS_LOCAL} = torch.zeros((count,), dtype=torch.int32, "
                       f"device={outputs[0]}.device)",
                       f"grid = (triton.cdiv({rows}, rows) * splits,)"])
            _launch(joined, tensors, (WORKSPACE_LOCAL, ARRIVALS_LOCAL), out)
            out.line("return None")
        out.line(f"grid = (triton.cdiv({rows}, rows), splits)")
        for kernel, pointers in ((partials, names), (finish, tensors)):
            _launch(kernel, pointers, (WORKSPACE_LOCAL,), out)


def _launch(kernel: KernelSignature, pointers: list[str], workspaces: tuple[str, ...],
            out: CodeWriter) -> None:
    """One launch of a split kernel over `grid`, through Triton."""
    out.line(f"{direct_launch.launched_kernel(kernel.function)}[grid](")
    with out.indented():
        out.wrapped([*pointers, *workspaces, "*args", *(p.launch for p in kernel.extra),
                     *(f"{name}={value}" for name, value in kernel.launch_consts),
                     "num_warps=num_warps"])
    out.line(")")
