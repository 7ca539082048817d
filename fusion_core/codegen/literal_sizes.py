"""Views sized by numbers: which input sizes keep eager's result the launcher's?

A reshape written with numbers (`h.reshape(1, 5, 2, -1)`) gives, in eager, those sizes at
any input size: only its `-1` follows, from the element count. Its index steps
(``ir/views.py``), worked out at the analysed shape, follow the input's dims instead
(`Unflatten(dim=2, sizes=(2, 4))` keeps whatever batch comes), so at another batch the
kernel would return a shape eager never gives. The group's shapes are propagated
symbolically (``run_sizes.SymbolicShapes``: one symbol per input dim); each numbered size the
steps give as a product of input dims, not that number, becomes a ``Pin``: the launcher's
`_fits` refuses an input whose dims there make another product, naming the reshape. The
`-1` is forced by the element count, as are sizes the steps fix themselves (a split's,
which ``view_checks._divides`` checks); where the steps fix the `-1` too (a ``Reshape`` to
its analysed target), the element count is pinned instead: torch's own error at another
count would name no kernel. Dims all 1 when analysed, broadcast together, are each pinned
to 1; a size of any other form is left unchecked, as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from ..ir.graph import FusionGraph, OpKind
from ..ir.sizes import LITERAL
from ..ir.spelling import said
from ..ir.views import INDEX_STEPS, shape_after
from .run_sizes import SymbolicShapes
from .view_checks import FIX


@dataclass(frozen=True)
class Pin:
    """The product of input dims `dims` ((value, its dim), in order) times `factor` must be
    `size`, `why` (the view as the user wrote it, and what it gives there)."""

    dims: tuple[tuple[str, int], ...]
    factor: int
    size: int
    why: str


def _product(e: Any, symbols: dict[Any, tuple[str, int]]) -> tuple[int, list[Any]] | None:
    """`e` as an integer times input dims; None for any other form."""
    factor, rest = sympy.sympify(e).as_coeff_Mul()
    dims = [] if rest == 1 else list(rest.args) if rest.is_Mul else [rest]
    if not factor.is_Integer or not all(d in symbols for d in dims):
        return None
    return int(factor), sorted(dims, key=str)


def literal_pins(g: FusionGraph, nodes: Sequence[str], inputs: Sequence[str]
                 ) -> tuple[Pin, ...]:
    """The pins of the group's views sized by numbers (module docstring)."""
    views = [n for n in nodes if g[n].kind is OpKind.VIEW and g[n].param(LITERAL)]
    if not views:
        return ()
    try:
        shapes = SymbolicShapes(g, nodes, inputs)
    except (TypeError, ValueError):  # a step's size test no symbol answers: none, as before
        return ()
    symbols = {sympy.Symbol(f"{v}.shape[{k}]", integer=True, positive=True): (v, k)
               for v in inputs if g[v].meta is not None for k in range(len(g[v].meta.shape))}
    out: list[Pin] = []
    for name in sorted(views, key=g.position):
        node = g[name]
        src = shapes.shape(node.refs[0])
        sizes: tuple[int, ...] = node.param(LITERAL)
        if src is None:
            continue
        try:
            implied = shape_after(node.param(INDEX_STEPS), src)
        except (TypeError, ValueError):
            continue
        if len(implied) != len(sizes):
            continue
        view = said(g, name)
        for j, (want, got) in enumerate(zip(sizes, implied, strict=True)):
            got = shapes.resolve(got)
            if want == -1 and got.is_Integer:  # fixed by the steps: pin the element count
                count = _product(math.prod(src), symbols)
                if count is not None and count[1]:
                    n = math.prod(g[node.refs[0]].meta.shape)
                    out.append(Pin(tuple(symbols[d] for d in count[1]), count[0], n,
                                   f"{view} reads {n} elements, its `-1` (dim {j} of "
                                   f"{sizes}) read as {got} at any count"))
                continue
            if want == -1 or got == want:
                continue  # forced by the count, or fixed by the steps
            # dims all 1 when analysed, broadcast (`Max`): 1 at any size only if each is
            parts = got.args if isinstance(got, sympy.Max) and want == 1 else (got,)
            for found in map(lambda e: _product(e, symbols), parts):
                if found is None:
                    continue  # no product of input dims: nothing to say it in
                out.append(Pin(tuple(symbols[d] for d in found[1]), found[0], want,
                               f"{view} gives {want} in dim {j} at any input size (its sizes "
                               f"were captured as the numbers {sizes}; export captures sizes "
                               "read from shapes so too)"))
    return tuple(out)


def pin_lines(pins: Sequence[Pin], firsts: dict[str, str]) -> list[str]:
    """`_fits` lines refusing inputs whose dims give a numbered size another value."""
    out = []
    for p in pins:
        if not p.dims or any(v not in firsts for v, _ in p.dims):
            continue
        names = list(dict.fromkeys(firsts[v] for v, _ in p.dims))
        got = " * ".join(f"{firsts[v]}.shape[{k}]" for v, k in p.dims)
        expr = got if p.factor == 1 else f"{got} * {p.factor}"
        if len(p.dims) == 1:
            what = f"`{names[0]}` is {{{got}}} long in dim {p.dims[0][1]}"
        elif len(names) == 1:
            dims = ", ".join(str(k) for _, k in p.dims)
            what = f"`{names[0]}` holds {{{got}}} elements in dims {dims}"
        else:
            what = f"`{got}` is {{{got}}}"
        # exact at the analysed shape, so the factor divides the size
        need = f"{p.size // p.factor}" + (f" (times {p.factor})" if p.factor != 1 else "")
        out += [f"if {expr} != {p.size}:",
                f'    raise ValueError(f"{{NAME}}: {what}; this kernel needs {need} there: '
                f'{_escaped(p.why)}; {FIX}")']
    return out


def _escaped(text: str) -> str:
    """`text` (a source line's words) inside the generated f-string literal."""
    return (text.replace("\\", "\\\\").replace('"', '\\"')
            .replace("{", "{{").replace("}", "}}"))
