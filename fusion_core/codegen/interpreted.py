"""What a generated file does differently under Triton's interpreter (TRITON_INTERPRET=1).

A file that needs it reads TRITON_INTERPRET once, into a constexpr (`FLAG`); its helpers
branch on that constexpr, and Triton's compiler visits only the branch it takes, so the GPU
code is the same as without the helper (a helper call is inlined). ``module_lines`` writes the
flag ahead of the helpers a plan calls: ``nan_reduce.py``'s, and ``RANGE_BOUND``, which every
column loop (``emit.column_loop``) passes its runtime bound through.

Python's ``range`` takes a bound by ``__index__``. Triton 3.6's interpreter defines that on a
scalar as ``int()`` of its one-element 1-D NumPy array, which NumPy 2.4 refuses ("only
0-dimensional arrays can be converted to Python scalars"; 3.9 squeezes the array first): there,
``range(0, n_cols, BLOCK_SIZE)`` failed, so interpreted the helper gives ``range`` a Python int.
"""

from __future__ import annotations

from .writer import CodeWriter

# The generated file's switch between the two forms, read from TRITON_INTERPRET.
FLAG = "_INTERPRETED"
RANGE_BOUND = "_range_bound"


def range_bound(bound: str) -> str:
    """A column loop's runtime bound, as ``range`` can take it interpreted and compiled."""
    return f"{RANGE_BOUND}({bound})"


def range_bound_lines() -> list[str]:
    """The module-level definition of the ``range_bound`` helper."""
    out = CodeWriter()
    out.lines(["# A loop's runtime bound: compiled, the scalar itself; interpreted, a Python int",
               "# (range() of Triton 3.6's interpreter cannot take a scalar under NumPy >= 2.4).",
               "@triton.jit", f"def {RANGE_BOUND}(n):"])
    with out.indented():
        out.line(f"if {FLAG}:")
        with out.indented():  # returned, not assigned: the interpreter makes an assigned
            # value a tensor again; its scalar holds a 1-element array
            out.line("return n.handle.data.item()")
        out.line("return n")
    return out.result()


def module_lines(helpers: list[list[str]], libdevice: bool = False) -> list[str]:
    """The flag (and libdevice's import where a helper calls it), then each helper's lines
    (two blank lines apart); none: no lines."""
    found = [h for h in helpers if h]
    if not found:
        return []
    lines = ["# Under Triton's interpreter (TRITON_INTERPRET=1) the helpers below take their",
             "# interpreted form; compiled, Triton drops that branch.",
             # Triton's own reading of the variable: "1", "true" or "on", in any case
             f'{FLAG} = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0").lower() '
             'in ("1", "true", "on"))']
    if libdevice:  # compiled branches only: libdevice does not run interpreted
        lines += ["from triton.language.extra import libdevice  # noqa: E402"]
    for helper in found:
        lines += ["", "", *helper]
    return lines
