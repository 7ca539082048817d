"""A generated launcher's warm path (``launcher.py`` writes the rest): finding the kept plan,
and launching it directly.

Reads the launcher's parameter names, its scalar operands' names and the kernel's tensor
arguments; writes the launcher's first lines, which find the call's entry in DIRECT_LAUNCH
(``direct_launch._entry``: guard, scalar values, plan, direct launch), and the lines that
launch a plan's compiled kernel directly (``direct_launch._direct``'s fields) with its outputs
allocated in C++. A warm call checks the last entry's guard on its parameters (Dynamo's
``TensorGuards``: dtypes, devices, sizes, strides, in C++) and the scalar operands' values,
and builds the key only where that fails; then one dict lookup, DIRECT_LAUNCH's, where
a kept plan is found (LAUNCH_CACHE only for plans not kept yet). A launcher whose cat operands'
lengths follow the call (a KV cache: another layout each call) builds the key every call.
"""

from __future__ import annotations

from contextlib import nullcontext

from . import direct_launch
from .writer import CodeWriter, tuple_literal

# The launcher's locals here: `launcher._RESERVED` keeps parameters off them.
LOCALS = ("hit", "launch", "given", "run", "grid0", "grid1", "grid2", "function", "metadata",
          "tail", "index", "current", "stream", "empty")


def lookup_lines(params: list[str], scalars: list[str], key: list[str], guarded: bool,
                 out: CodeWriter) -> None:
    """`hit`: the call's kept entry (the last one where its guard passes, else DIRECT_LAUNCH's
    by `key`: a truthy tuple, False where switched off to Triton, None if not kept yet)."""
    if not guarded:
        out.bracketed("key = (", key)
        out.line("hit = DIRECT_LAUNCH.get(key)")
        return
    values = f" or hit[1] != {tuple_literal(scalars)}" if scalars else ""
    out.lines(["hit = DIRECT_LAUNCH.last",
               f"if hit is None or not hit[0].check({', '.join(params)}){values}:"
               "  # not the last kept plan's layout (its guard, in C++)"])
    with out.indented():
        out.bracketed("key = (", key)
        out.lines(["hit = DIRECT_LAUNCH.get(key)",
                   "if hit and hit[0] is not None:  # the next call checks its guard first",
                   "    DIRECT_LAUNCH.last = hit"])


def direct_lines(inputs: list[str], outputs: list[tuple[str, str, str]], tensors: str,
                 result: str, out: CodeWriter) -> None:
    """A kept plan's direct launch: where its inputs' pointers are aligned as Triton compiled
    for (fresh outputs are: the caching allocator's blocks are) and the current device is the
    one it launched on, its outputs allocated there and the compiled kernel run. `outputs`:
    (name, dtype literal, the expression the kernel writes it through) per result."""
    mask = direct_launch.POINTER_ALIGN - 1
    pointers = [f"{a}.data_ptr()" for a in inputs]
    aligned = f"not ({' | '.join(pointers)}) & {mask}" if pointers else "True"
    out.line(f"if launch and {aligned}:  # past Triton's dispatch")
    with out.indented():
        out.line("run, grid0, grid1, grid2, function, metadata, tail, index, current, stream, "
                 "empty = launch")
        out.line("if current() == index:")
        with out.indented():
            out.lines(f"{name} = empty(out_shapes[{i}], out_strides[{i}], {dtype})"
                      for i, (name, dtype, _) in enumerate(outputs))
            viewed = [f"{seen}.data_ptr()" for name, _, seen in outputs if seen != name]
            if viewed:  # a result written through a view with an offset may be misaligned
                out.line(f"if not ({' | '.join(viewed)}) & {mask}:")
            with out.indented() if viewed else nullcontext():
                out.lines([f"run(grid0, grid1, grid2, stream(index), function, metadata, None, "
                           f"None, None, {tensors}, *tail)",
                           f"return {result}"])

