"""A kernel's typed signature: its parameters in order, and what the launcher passes for each.

Emission (``emit.py``) registers the scalar parameters its index expressions read in a
``KernelParams``, in order of first use; once the kernel body is written, ``freeze`` turns them,
with the tensor pointers, the size arguments and the constexprs, into one ``KernelSignature``.
The ``@triton.jit`` parameter lists (``emit.py``, ``split_rows.py``) and the launcher's side of
the call (the ``args`` tuple, the constexpr dict, the ``in0_strides`` locals, the grid's sizes:
``launcher.py``, ``split_rows.py``) are all written from that object, so each kernel parameter
and the launcher expression passed for it are spelled here only. No source text beyond names
and the expressions passed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from ..names import jit_function_name
from .writer import FastDivisor

if TYPE_CHECKING:
    from .plan import KernelPlan


class Family(StrEnum):
    """What a scalar parameter holds. A span's value is also the launcher local it is read
    from (`span[2]`, `rspan[1]`)."""

    SIZE = "size"  # the element, row or column count
    SPAN = "span"  # elements in dims k.. of the iteration shape
    RSPAN = "rspan"  # rows in dims k.. of the iteration shape (2-D kernels)
    STRIDE = "stride"  # one strided index group's stride of a tensor
    CHUNK = "chunk"  # a split row's chunk width (``split_rows.py``)
    SCALAR = "scalar"  # a Python number of sizes alone the ops read (``plan.ScalarArg``)
    PIECE = "piece"  # where a cat's operand ends along its dim, at this call (``cat_bounds``)
    DIVISOR = "divisor"  # a span's multiplier or shift for a division (``writer.FastDivisor``)


def pointer_name(role: str, index: int) -> str:
    """The kernel's pointer parameter of a tensor: `in_ptr0`, `out_ptr1`, `gen_ptr0`."""
    return f"{role}_ptr{index}"


# The launcher local of each cat's ends: `piece_ends[c][i]` ends operand i of cat c.
PIECE_ENDS = "piece_ends"


def piece_end_name(cat: int, part: int) -> str:
    """The kernel parameter where operand `part` of the kernel's cat `cat` ends: `cat0_end0`."""
    return f"cat{cat}_end{part}"


def strides_local(role: str, index: int) -> str:
    """The launcher local holding a tensor's index groups' strides: `in0_strides`."""
    return f"{role}{index}_strides"


@dataclass(frozen=True)
class ScalarParam:
    """A scalar kernel parameter and the launcher expression passed for it."""

    name: str
    launch: str
    family: Family
    owner: tuple[str, int] | None = None  # (role, index): the tensor a stride belongs to
    floating: bool = False  # a SCALAR that is a Python float...
    # ...passed as a word of its double's bits (``plan.ScalarArg.wide``): "hi" or "lo" of the
    # kernel variable named without the `_hi` / `_lo`
    half: str = ""


@dataclass(frozen=True)
class ConstParam:
    """A `tl.constexpr` parameter and the launcher expression passed for it (from the
    configuration's `block` and `rows` and the size arguments)."""

    name: str
    launch: str


@dataclass(frozen=True)
class PointerParam:
    """A tensor's pointer parameter."""

    role: str  # plan.Role
    index: int  # position among the tensors of its role

    @property
    def name(self) -> str:
        return pointer_name(self.role, self.index)


# The size arguments: what the launcher passes first in `args`, and the launcher locals of
# the same name (a flat kernel's element count is `span[0]`).
N_ELEMENTS = ScalarParam("n_elements", f"{Family.SPAN}[0]", Family.SIZE)
N_ROWS = ScalarParam("n_rows", "n_rows", Family.SIZE)
N_COLS = ScalarParam("n_cols", "n_cols", Family.SIZE)
# A split row's chunk width, passed after the looped kernel's arguments (``split_rows.py``)
CHUNK = ScalarParam("chunk", "chunk", Family.CHUNK)
BLOCK_SIZE = ConstParam("BLOCK_SIZE", "block")  # from the configuration (block, rows, warps)
ROWS_PER_PROGRAM = ConstParam("ROWS_PER_PROGRAM", "rows")
EVEN_COLS = "EVEN_COLS"  # a 2-D kernel's constexpr: n_cols is whole blocks (and vectors)


@dataclass(frozen=True)
class KernelSignature:
    """One `@triton.jit` function's parameters in order: tensor pointers, sizes, the scalars
    its index expressions read (spans, strides), more scalars (a split row's chunk), then
    constexprs. The launcher passes the pointers positionally, `*args` (sizes and scalars,
    ``launch_args``) and the constexprs by name."""

    function: str  # "cluster0_kernel"
    pointers: tuple[PointerParam, ...]
    sizes: tuple[ScalarParam, ...]
    scalars: tuple[ScalarParam, ...]  # in order of first use in the kernel body
    constexprs: tuple[ConstParam, ...]
    extra: tuple[ScalarParam, ...] = ()  # passed after `*args` (not part of it)
    # scratch pointers after the tensors' (split rows: the partials, a row's arrivals)
    workspaces: tuple[str, ...] = ()

    @property
    def parameters(self) -> list[str]:
        """The `def` line's parameter list, annotations included."""
        pointers = [p.name for p in self.pointers] + list(self.workspaces)
        return [*pointers, *(p.name for p in (*self.sizes, *self.scalars, *self.extra)),
                *(f"{c.name}: tl.constexpr" for c in self.constexprs)]

    @property
    def launch_args(self) -> list[str]:
        """The launcher's `args` tuple: sizes, then the scalars, as launcher expressions. A
        span's multiplier and shift, adjacent, come from one `*_divisor(...)` (computed once:
        a launcher whose operands change length plans every call), a double's two words from
        one `*_double_bits(...)`."""
        out: list[str] = []
        for p in (*self.sizes, *self.scalars):
            magic = p.launch.removesuffix("[1]")
            paired = p.family is Family.DIVISOR or p.half == "lo"
            if paired and out and out[-1] == f"{magic}[0]":
                out[-1] = f"*{magic}"
            else:
                out.append(p.launch)
        return out

    @property
    def launch_consts(self) -> list[tuple[str, str]]:
        """Each constexpr's name and the launcher expression passed for it."""
        return [(c.name, c.launch) for c in self.constexprs]

    def size_arg(self, size: ScalarParam) -> str:
        """Where the launcher finds a size in its `args` tuple: `args[1]` for n_cols."""
        return _args_item(self.sizes, size)

    def has_strides(self, role: str, index: int) -> bool:
        """The kernel reads strides of this tensor (the launcher then computes them)."""
        return any(p.owner == (role, index) for p in self.scalars)

    def uses(self, family: Family) -> bool:
        return any(p.family == family for p in self.scalars)

    def variant(self, function: str, pointers: Sequence[PointerParam],
                workspaces: Sequence[str], extra: Sequence[ScalarParam],
                constexprs: Sequence[ConstParam], unread: Sequence[str] = ()) -> KernelSignature:
        """Another kernel taking this one's `args` (the split-row kernels): other pointers,
        scratch pointers, scalars after `args` and more constexprs, less the `unread` ones
        (each value of a constexpr compiles the kernel again)."""
        kept = tuple(c for c in self.constexprs if c.name not in unread)
        return replace(self, function=function, pointers=tuple(pointers),
                       workspaces=tuple(workspaces),
                       extra=tuple(extra), constexprs=kept + tuple(constexprs))


class KernelParams:
    """The scalar parameters index expressions need, in order of first use (names are unique);
    the builder ``freeze`` turns into a signature. Seeded with a signature's scalars, it
    gives another body over the same tensors the same names (``split_rows.py``)."""

    def __init__(self, scalars: Sequence[ScalarParam] = ()) -> None:
        self._params: dict[str, ScalarParam] = {p.name: p for p in scalars}
        self._divided: dict[str, None] = {}  # spans divided through `FastDivisor`, in order

    def _add(self, param: ScalarParam) -> str:
        self._params.setdefault(param.name, param)
        return param.name

    def span(self, family: Family, k: int) -> str:
        """`span{k}` / `rspan{k}`: elements in dims k.. of the iteration shape (or its rows)."""
        return self._add(ScalarParam(f"{family}{k}", f"{family}[{k}]", family))

    def divisor(self, family: Family, k: int) -> FastDivisor:
        """`span{k}` / `rspan{k}` as a `FastDivisor`: the span, then `span{k}_m` and
        `span{k}_l`, its multiplier and shift (the launcher's `_divisor` of it)."""
        value = self.span(family, k)
        self._divided.setdefault(value)
        magic = f"_divisor({family}[{k}])"
        return FastDivisor(value,
                           self._add(ScalarParam(f"{value}_m", f"{magic}[0]", Family.DIVISOR)),
                           self._add(ScalarParam(f"{value}_l", f"{magic}[1]", Family.DIVISOR)),
                           fast_name(value))

    def stride(self, role: str, index: int, k: int) -> str:
        """The k-th strided index group's stride of tensor `role``index` (in0, out1)."""
        local = strides_local(role, index)
        return self._add(ScalarParam(f"{role}{index}_stride{k}", f"{local}[{k}]", Family.STRIDE,
                                     (role, index)))

    def scalar(self, param: str, launch: str, floating: bool = False, wide: bool = False
               ) -> str:
        """An operand's Python number, passed as the launcher's parameter `launch` (`wide`:
        as the two words of `_double_bits(launch)`, kernel parameters `{param}_hi` and
        `{param}_lo`, which the kernel's first lines join into `param`)."""
        if not wide:
            return self._add(ScalarParam(param, launch, Family.SCALAR, floating=floating))
        for k, half in enumerate(("hi", "lo")):
            self._add(ScalarParam(f"{param}_{half}", f"_double_bits({launch})[{k}]",
                                  Family.SCALAR, floating=True, half=half))
        return param

    def piece_end(self, cat: int, part: int) -> str:
        """Where operand `part` of cat `cat` ends, from the launcher's `piece_ends`."""
        return self._add(ScalarParam(piece_end_name(cat, part), f"{PIECE_ENDS}[{cat}][{part}]",
                                     Family.PIECE))

    def __iter__(self) -> Iterator[ScalarParam]:
        return iter(self._params.values())

    @property
    def names(self) -> list[str]:
        return list(self._params)

    def freeze(self, plan: KernelPlan) -> KernelSignature:
        """The plan's kernel signature with the parameters registered so far."""
        # The kernel bounds its columns (elements) by a multiple of the largest power of two
        # dividing their count, so the launcher passes that power as a constexpr.
        if plan.two_d:
            sizes = (N_ROWS, N_COLS)
            consts = (ROWS_PER_PROGRAM, _alignment("COLS_ALIGN", sizes, N_COLS),
                      _whole_blocks(sizes))
        else:
            sizes = (N_ELEMENTS,)
            consts = (_alignment("N_ALIGN", sizes, N_ELEMENTS),)
        # each span divided through `FastDivisor`: whether it is no multiple of 16 and not 1
        # (Triton makes a 1 a constant, and `x // 1` folds away), in a tensor of under 2**30
        # elements (`runtime._divisor`'s range)
        scalars = tuple(self)
        at = {p.name: f"args[{len(sizes) + i}]" for i, p in enumerate(scalars)}
        elements = " * ".join(f"args[{i}]" for i in range(len(sizes)))
        consts += tuple(ConstParam(fast_name(span), f"{at[span]} % 16 != 0 and {at[span]} != 1 "
                                   f"and {elements} < 2**30") for span in self._divided)
        pointers = tuple(PointerParam(t.role, t.index) for t in (*plan.inputs, *plan.outputs))
        return KernelSignature(function=jit_function_name(plan.cluster_index), pointers=pointers,
                               sizes=sizes, scalars=scalars, constexprs=(BLOCK_SIZE, *consts))


def fast_name(span: str) -> str:
    """The constexpr saying span `span` (`span2`) divides through the multiply-high (no
    multiple of 16 nor 1, in a tensor of under 2**30 elements): `SPAN2_FAST`."""
    return f"{span.upper()}_FAST"


def _alignment(name: str, sizes: tuple[ScalarParam, ...], size: ScalarParam) -> ConstParam:
    """A constexpr holding the power of two (at most 16) that divides `size` (the runtime's
    `_multiple_of`, over the size's place in `args`)."""
    return ConstParam(name, f"_multiple_of({_args_item(sizes, size)})")


def _whole_blocks(sizes: tuple[ScalarParam, ...]) -> ConstParam:
    """``EVEN_COLS``: the columns are whole blocks of the configuration (a one-block row is
    exactly the block, a looped row ends at a block's end), so no column mask is needed; and
    whole 16-element vectors, so a row of any dtype starts at a vector (``loads.aligned_rows``:
    the row's body is then the whole row, however small the block)."""
    return ConstParam(EVEN_COLS, f"{_args_item(sizes, N_COLS)} % max(block, 16) == 0")


def _args_item(sizes: tuple[ScalarParam, ...], size: ScalarParam) -> str:
    """The launcher's `args` starts with the sizes: `args[1]` for n_cols."""
    return f"args[{sizes.index(size)}]"
