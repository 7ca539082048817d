"""The host side of a generated file: the launcher and its autograd wrapper (the file's
header and constants come from ``file_head.py``, its ``_plan`` from ``launch_plan.py``).

Reads a ``KernelPlan``, the tuning choices and the kernel's signature
(from ``emit.kernel``, ``signature.py``); writes the text around the kernel. ``_plan(*inputs)``
works out the iteration shape from the arguments, checks each tensor still
broadcasts the way the kernel indexes it (or must be copied into the analysed
layout, if only its strides differ), and picks the output shapes, the scalar kernel
arguments and the configurations (block, rows per program, warps; and programs per row for
split rows, whose ``_launch`` comes from ``split_rows.py``) its shape bucket may launch with
(``tuning.py``; ``_launch`` computes the grid from the one chosen). All of
that depends only on the inputs' shapes and strides, so ``clusterN(*inputs)`` caches it
in ``LAUNCH_CACHE``, keyed by every input's (shape, stride, dtype, device) and the value of
each Python number of sizes it takes after its tensors (``plan.ScalarArg``). Inputs the
kernel reads through views (their index maps) are keyed as passed: ``_views``
takes the views on a new layout only, and the plan keeps where each view lies in its
input (``runtime._seats``), so a repeated call rebuilds it with one ``as_strided`` on that
call's tensor (its data, its storage offset). Before a new layout is viewed, `_fits`
(``view_checks.py``) refuses sizes the views cannot take, naming the input and its dim. A
repeated call builds the key, looks it up, copies what the plan says (also a CPU 0-dim input of
a kernel that runs on a GPU: torch reads it there as an operand, a Triton kernel only its own
device's memory), allocates contiguous outputs on the plan's device (where torch would compute:
``runtime._run_device``) and launches with its bucket's configuration, chosen on the bucket's
first call and kept in ``CHOSEN`` (the Python work used to dominate small kernels' host time).
Once a plan has launched with its bucket's kept configuration, ``DIRECT_LAUNCH`` keeps its
entry (``direct_launch._entry``): a C++ guard of its layout, its scalar values, the plan and
the compiled kernel's direct launch, if any. A warm call checks the last entry's guard before
building any key, looks a kept plan up in DIRECT_LAUNCH alone, and launches it directly,
past Triton's dispatch, its outputs allocated in C++ (``launch_warm.py``). A failed
check raises and caches nothing; a full cache drops its oldest plan. A launcher whose cat
operands change length from call to call (a KV cache: every call a new layout) also keeps
``FRAMES``, what its ``_plan`` works out once for every such length (``launch_plan.py``), keeps
a plan's entry from its second call on (most lengths are launched once) and has no guard.
``ClusterNFunction`` wraps the launcher for autograd with a ``backward`` that refuses:
inference only.
"""

from __future__ import annotations

import keyword
import re

from . import direct_launch, launch_maps, launch_warm, runtime, split_rows, view_checks
from . import tuning as autotune
from .choices import Tuning, kind
from .file_head import dtype_literal, wrapper_class
from .launch_plan import NO_INPUTS_DEVICE, framed, plan_args, plan_fn
from .launch_sized import DEVICE
from .literal_sizes import pin_lines
from .lower import KernelPlan
from .signature import (
    BLOCK_SIZE,
    N_COLS,
    N_ELEMENTS,
    N_ROWS,
    PIECE_ENDS,
    ROWS_PER_PROGRAM,
    Family,
    KernelSignature,
)
from .writer import CodeWriter, tuple_literal

__all__ = ["Tuning", "arg_names", "kind", "launcher"]


# The launcher for tracing (torch.compile): `traceable(*inputs, wrap)`.
TRACEABLE = "traceable"
# What `_plan` returns (``launch_sized.sized``), as the launcher unpacks it.
_PLANNED = f"copies, {DEVICE}, out_shapes, out_strides, args, tune_key, configs"
# Names a generated file defines at module level or the launcher uses as locals: an input
# named like one of them gets a prefix. The runtime's part comes from the runtime module;
# the size arguments' names, the span locals and the configuration's block and rows come
# from signature.py.
_RESERVED = {"torch", "triton", "tl", "shape", Family.SPAN.value, Family.RSPAN.value, "grid",
             BLOCK_SIZE.launch, ROWS_PER_PROGRAM.launch, "num_warps",
             *(size.name for size in (N_ROWS, N_COLS, N_ELEMENTS)), "key", "plan", "copies",
             "out_shapes", "args", "IN_GROUPS", "OUT_GROUPS", "IN_ORDERS", "OUT_ORDERS",
             "out_strides", "LAUNCH_CACHE",
             "config", "configs", "tune_key", "bucket", "_launch", "os", "seats", "seen",
             "_views", "_fits", "DIRECT_LAUNCH", "launched", "compiled", "consts", "oldest",
             "kernel", "wrap", TRACEABLE, PIECE_ENDS, "FRAMES", "frames", "frame", "free",
             "by_bucket", "_frame", "fresh", DEVICE,
             *direct_launch.GLOBALS, *(fn.__name__ for fn in direct_launch.HELPERS),
             *launch_warm.LOCALS,
             "LAUNCH_CACHE_SIZE", "BLOCK", "NUM_WARPS", "TILE_COLS", "MAX_BLOCK", "LOOP_BLOCK",
             "LOOP_STEPS", "MAX_LOOP_BLOCK", "SPLIT_PROGRAMS", "SPLIT_MIN_COLS", "SPLIT_LOOP_BLOCK",
             "SPLIT_JOINED_ROWS", "SPLIT_JOINED_PROGRAMS", "WAIT_POLLS", "ARRIVALS",
             *split_rows.LOCALS,
             "PACK_WIDTH", "PACK_ELEMENTS", "MAX_ROWS", *runtime.GLOBALS,
             *autotune.GLOBALS, *(fn.__name__ for fn in runtime.HELPERS + autotune.HELPERS
                                  + runtime.VIEW_HELPERS + runtime.SPLIT_HELPERS),
             *(fn.__name__ for pair in (*autotune.KINDS.values(), autotune.WIDE_SINGLE)
               for fn in pair)}
CACHE_SIZE = 64  # launch plans a generated launcher keeps (distinct input layouts)
# A launcher whose cat operands' lengths follow the call (``launch_plan.framed``).
_FRAMES = ["# What `_plan` works out once for every length of those cat operands (a KV",
           "# cache grows each call), by the inputs outside the cats' dims: `_frame`. At",
           "# most LAUNCH_CACHE_SIZE frames; clear it with the others.",
           "FRAMES = {}"]


def arg_names(plan: KernelPlan) -> list[str]:
    """Launcher parameter names: the graph's value names, made safe as identifiers. An input
    loaded again through another index map is a local of the launcher: `<name>_map<k>`."""
    out: list[str] = []
    first: dict[str, str] = {}
    for t in plan.inputs:
        if t.value in first:
            name = f"{first[t.value]}_map{sum(u.value == t.value for u in plan.inputs[:t.index])}"
            while name in out:
                name += "_"
            out.append(name)
            continue
        name = re.sub(r"\W", "_", t.value)
        if not name.isidentifier() or keyword.iskeyword(name) or name in _RESERVED \
                or re.fullmatch(r"(in|out)\d+(_strides)?|copy\d+|scalar_\w+", name):
            name = "in_" + name
        first[t.value] = name
        out.append(name)
    return out


def _key(names: list[str], scalars: list[str]) -> list[str]:
    """The launch cache key's parts: every input's shape, strides, dtype and device (the raw
    parameters': what a view of one gives follows from them); a kernel without inputs
    keys on its device; scalar operands by value."""
    parts = [f"{a}.{p}" for a in names for p in ("shape", "stride()", "dtype", "device")]
    # A scalar operand's value too: `args` holds it (sizes give few distinct values).
    parts += scalars
    return parts or [NO_INPUTS_DEVICE]


def _planned(plan: KernelPlan, names: list[str], inputs: str, fits: bool, viewed: list[int],
             raw: list[str], frames: str, out: CodeWriter) -> None:
    """A plan not kept yet: from LAUNCH_CACHE, or worked out (and cached) for a new layout."""
    out.line("if plan is None:  # a new layout: check it and work out the launch once")
    with out.indented():
        if fits:  # sizes the views cannot take, refused by input and dim
            out.line(f"_fits({inputs})")
        if viewed:  # where the views lie in the raw inputs, kept for later calls
            out.line(f"seen = _views({inputs})")
            out.bracketed("seats = _seats(", [tuple_literal(raw[i] for i in viewed),
                                              tuple_literal(f"seen[{i}]" for i in viewed)])
            out.line(f"plan = (seats, _plan({plan_args(plan, ['*seen'])}{frames}))")
        else:
            out.line(f"plan = _plan({plan_args(plan, names)}{frames})")
        out.lines(["if len(LAUNCH_CACHE) >= LAUNCH_CACHE_SIZE:  # the oldest plan makes room",
                   "    oldest = next(iter(LAUNCH_CACHE))",
                   "    del LAUNCH_CACHE[oldest]",
                   "    DIRECT_LAUNCH.pop(oldest, None)",
                   "LAUNCH_CACHE[key] = plan"])


def _views_fn(plan: KernelPlan, names: list[str], params: str, out: CodeWriter) -> None:
    """`_views(*parameters)`: every input as the kernel reads it, through its views."""
    out.lines([f"def _views({params}):",
               '    """The inputs as the kernel indexes them (views of the parameters: no '
               'copy,', '    unless a reshape meets strides it cannot view)."""'])
    with out.indented():
        out.lines(launch_maps.input_lines(plan, names))
        out.line(f"return {tuple_literal(names)}")


def _fits_fn(lines: list[str], params: str, out: CodeWriter) -> None:
    """`_fits(*parameters)`: the size checks before the views (``view_checks.py``)."""
    out.lines(["", "", f"def _fits({params}):",
               '    """Raises, naming the input and dim, where this call\'s sizes cannot be viewed',
               '    as the kernel reads them (run once per new layout, before `_views`)."""'])
    with out.indented():
        out.lines(lines)


def _seated(names: list[str], viewed: list[int], firsts: list[str], params: str,
            out: CodeWriter) -> None:
    """The viewed inputs rebuilt from the plan's seats on this call's parameters (their
    data pointers are this call's), or viewed again where the seats say so."""
    out.line("if seats is None:  # a view copied data, or nothing is read: view again")
    with out.indented():
        out.line(f"{tuple_literal(names)} = _views({params})")
    out.line("else:")
    with out.indented():
        if len(viewed) == 1:
            raw = firsts[viewed[0]]
            out.bracketed(f"{names[viewed[0]]} = {raw}.as_strided(", [
                "seats[0][0]", "seats[0][1]", f"{raw}.storage_offset() + seats[0][2]"])
            return
        # One assignment: every view is taken from the raw parameters before any is rebound.
        out.bracketed(f"{', '.join(names[i] for i in viewed)} = (", [
            f"{firsts[i]}.as_strided(seats[{k}][0], seats[{k}][1], "
            f"{firsts[i]}.storage_offset() + seats[{k}][2])" for k, i in enumerate(viewed)])


def _grid(plan: KernelPlan, sig: KernelSignature) -> str:
    """The launch grid from the configuration and the size arguments `args` starts with."""
    if not plan.two_d:
        return f"(triton.cdiv({sig.size_arg(N_ELEMENTS)}, block),)"
    rows, cols = sig.size_arg(N_ROWS), sig.size_arg(N_COLS)
    if plan.tiled:
        return f"(triton.cdiv({rows}, rows), triton.cdiv({cols}, block))"
    return f"(triton.cdiv({rows}, rows),)"


def _launch_fn(plan: KernelPlan, sig: KernelSignature, looped: bool, names: list[str],
               out: CodeWriter) -> None:
    """`_launch(config, args, *tensors)`: one launch of the kernel under a configuration
    (`num_warps` is passed besides the constexprs: a launch option, no parameter)."""
    if kind(plan, looped) == "split":
        split_rows.launch_fn(plan, sig, names, out)
        return
    tensors = names + [f"out{i}" for i in range(len(plan.outputs))]
    out.line(f"def _launch(config, args, {', '.join(tensors)}, wrap=None):")
    with out.indented():
        out.lines(['"""One launch under `config` = (block, rows, num_warps); returns a thunk',
                   'giving its direct launcher for the plan\'s later calls (or None). `wrap`:',
                   'what makes the launch traceable (`traceable`)."""',
                   "block, rows, num_warps = config",
                   f"kernel = {direct_launch.launched_kernel(sig.function)}"])
        direct_launch.launch_lines("kernel", _grid(plan, sig), tensors, sig.launch_consts, out)


def _copies(names: list[str], out: CodeWriter, traced: bool = False) -> None:
    """After `copies, device, ...` of a plan: inputs copied where the plan says. `traced`: on
    fake tensors (``runtime._relaid``)."""
    if names:
        out.line("if copies:  # inputs whose strides the kernel cannot index, or CPU 0-dim ones")
        with out.indented():
            how = ", traced=True" if traced else ""
            for i, a in enumerate(names):
                out.lines([f"if copies[{i}]:",
                           f"    {a} = _relaid({a}, IN_ORDERS[{i}], {DEVICE}{how})"])


def _outputs(plan: KernelPlan, result: str, out: CodeWriter) -> None:
    """Outputs allocated on the plan's device, and the return when there is nothing to
    launch."""
    out.lines(f"out{i} = torch.empty_strided(out_shapes[{i}], out_strides[{i}], "
              f"dtype={dtype_literal(t)}, device={DEVICE})" for i, t in enumerate(plan.outputs))
    out.lines(["if not configs:  # no elements", f"    return {result}"])


def _kernel_tensors(plan: KernelPlan, names: list[str]) -> str:
    """The tensors a launch passes the kernel: inputs, then outputs as it writes them."""
    return ", ".join(names + [launch_maps.kernel_output(t, i)
                              for i, t in enumerate(plan.outputs)])


def _result(plan: KernelPlan) -> str:
    return "out0" if len(plan.outputs) == 1 else "(" + ", ".join(
        f"out{i}" for i in range(len(plan.outputs))) + ")"


def _traceable_fn(plan: KernelPlan, names: list[str], inputs: str, viewed: list[int],
                  fits: bool, out: CodeWriter) -> None:
    """`traceable(*inputs, wrap)`: the launcher as torch.compile traces it (on fake tensors),
    without its caches, candidate timing or direct launches."""
    out.lines(["", "", f"def {TRACEABLE}({inputs}, wrap):"])
    with out.indented():
        out.lines([f'"""`{plan.name}` for tracing (torch.compile runs it on fake tensors): no',
                   "launch cache, no timing of candidates, no direct launch; the bucket's kept",
                   "configuration (this process's, else the disk cache's) or else the",
                   "heuristic's. `wrap` makes each launch traceable (torch.library.wrap_triton)",
                   'or skips it (shapes only)."""'])
        if not names:
            out.line(f"{NO_INPUTS_DEVICE} = torch.device({NO_INPUTS_DEVICE})")
        if fits:
            out.line(f"_fits({inputs})")
        if viewed:
            out.line(f"{tuple_literal(names)} = _views({inputs})")
        out.line(f"{_PLANNED} = _plan({plan_args(plan, names)})")
        _copies(names, out, traced=True)
        _outputs(plan, _result(plan), out)
        out.lines([f"_launch(_kept(tune_key, configs, {DEVICE}), args, "
                   f"{_kernel_tensors(plan, names)}, wrap=wrap)",
                   f"return {_result(plan)}"])


def launcher(plan: KernelPlan, sig: KernelSignature, looped: bool,
             max_block: int | None = None) -> list[str]:
    """The launcher's text: `max_block` (the file's MAX_BLOCK) picks the tuning heuristic of a
    one-block file whose rows may be wider than 16 warps hold (tuning.source)."""
    names = arg_names(plan)
    n = plan.name
    outs = ", ".join(t.value for t in plan.outputs)
    result = _result(plan)
    firsts = launch_maps.first_names(plan, names)
    parameters = [firsts[v] for v in dict.fromkeys(t.value for t in plan.inputs)]
    inputs = ", ".join((parameters or [NO_INPUTS_DEVICE]) + [a.launch for a in plan.scalars])
    viewed = launch_maps.seen_through_views(plan, names)
    raw = [firsts[t.value] for t in plan.inputs]  # the parameter each name views
    frames = ", FRAMES" if framed(plan) else ""
    out = CodeWriter()
    out.lines([f"NAME = {n!r}",
               "# Launch plans by the inputs' (shape, stride, dtype, device): a repeated call",
               "# skips the checks and choices of `_plan`. Holds at most LAUNCH_CACHE_SIZE",
               "# plans (dynamic shapes): the oldest makes room. Clear it and DIRECT_LAUNCH",
               "# after editing the tuning constants in a running process.",
               "LAUNCH_CACHE = {}", f"LAUNCH_CACHE_SIZE = {CACHE_SIZE}",
               "# The configuration chosen per (shape bucket, input dtypes, device).",
               "CHOSEN = {}",
               *(_FRAMES if framed(plan) else []),
               "", "", *runtime.source(bool(viewed)).splitlines(),
               "", "", *direct_launch.source().splitlines(),
               "# Per launch plan (same keys), once its configuration is chosen: its entry",
               "# (`_entry`: guard, scalar values, plan, the compiled kernel's direct launch",
               "# or None), or False to launch through Triton (`.last`: see `_Kept`).",
               "DIRECT_LAUNCH = _Kept()",
               "", "", *autotune.source(kind(plan, looped), max_block).splitlines(), "", ""])
    plan_fn(plan, sig, looped, names, out)
    out.lines(["", ""])
    _launch_fn(plan, sig, looped, names, out)
    fits = view_checks.fits_lines(plan, firsts) + pin_lines(plan.pins, firsts)
    if viewed:
        out.lines(["", ""])
        _views_fn(plan, names, inputs, out)
    if fits:
        _fits_fn(fits, inputs, out)
    out.lines(["", "", f"def {n}({inputs}):"])
    with out.indented():
        if plan.scalars:  # what the caller computes for each (graph names for values)
            out.lines([f'"""Run the fused kernel; returns {outs} (new, in eager layout).',
                       "", *(f"`{a.launch}`: `{a.spelled}`, computed by the caller."
                             for a in plan.scalars), '"""'])
        else:
            out.line(f'"""Run the fused kernel; returns {outs} (new, in eager layout)."""')
        if not names:  # `"cuda"` as well as `torch.device("cuda")`: one key, and `.type`
            out.line(f"{NO_INPUTS_DEVICE} = torch.device({NO_INPUTS_DEVICE})")
        scalars = [a.launch for a in plan.scalars]
        keyed = parameters if viewed else names  # what the key and the guard read
        guarded = bool(keyed) and not framed(plan)  # a KV cache's layout is new every call
        launch_warm.lookup_lines(keyed, scalars, _key(keyed, scalars), guarded, out)
        out.line("if hit:  # a kept plan, and its direct launch if it has one")
        out.line("    plan, launch = hit[2], hit[3]")
        out.line("else:")
        with out.indented():
            out.line("launch = None")
            if guarded:  # the parameters as passed, for the guard of the plan once kept
                out.line(f"given = {tuple_literal(keyed)}")
            out.line("plan = LAUNCH_CACHE.get(key)")
            if framed(plan):  # every cache length is a new plan: most are launched once
                out.line("fresh = plan is None")
            _planned(plan, names, inputs, fits, viewed, raw, frames, out)
        if viewed:
            out.line(f"seats, ({_PLANNED}) = plan")
            _seated(names, viewed, raw, inputs, out)
        else:
            out.line(f"{_PLANNED} = plan")
        _copies(names, out)
        tensors = _kernel_tensors(plan, names)
        launch_warm.direct_lines(names, [
            (f"out{i}", dtype_literal(t), launch_maps.kernel_output(t, i))
            for i, t in enumerate(plan.outputs)], tensors, result, out)
        _outputs(plan, result, out)
        out.lines(["config = CHOSEN.get(tune_key)",
                   "if config is None:  # a new shape bucket: choose its configuration once",
                   "    config = _choose(tune_key, configs,",
                   f"                     lambda c: _launch(c, args, {tensors}),",
                   f"                     {DEVICE})",
                   f"launched = _launch(config, args, {tensors})",
                   f"if hit is None{' and not fresh' if framed(plan) else ''} "
                   "and CHOSEN.get(tune_key) == config:  # kept: its entry",
                   f"    DIRECT_LAUNCH[key] = _entry(launched() if launched else None, {DEVICE}, "
                   f"plan, {'given' if guarded else '()'}, {tuple_literal(scalars)})",
                   f"return {result}"])
    _traceable_fn(plan, names, inputs, viewed, bool(fits), out)
    out.lines(["", "", f"class {wrapper_class(plan)}(torch.autograd.Function):"])
    with out.indented():
        out.lines([f'"""`{n}` in autograd graphs: forward runs the kernel, backward refuses."""',
                   "", "@staticmethod", f"def forward(ctx, {inputs}):",
                   f"    return {n}({inputs})", "", "@staticmethod",
                   "def backward(ctx, *grad_outputs):",
                   f'    raise RuntimeError("{n} is inference only: fusion-advisor generates "',
                   '                       "no backward kernel; call it under torch.no_grad() "',
                   '                       "or keep the original ops for training")'])
    out.line()
    return out.result()
