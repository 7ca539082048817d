"""Lowering: a cluster of the ``FusionGraph`` → a ``KernelPlan`` (no source text yet).

Reads the cluster's nodes in topological order, their propagated ``TensorMeta``
and the op registry's lowering rules; writes a small frozen plan (``plan.py``): every input
with its dtype and broadcast ``Access`` (``layout.py``), one SSA statement per
computed value (the registry's Triton expression over operand temporaries and
literals: ``node_lowering.py``), the reduction steps if there are any, and the outputs.
The temporaries, and the rounded or converted copies of them that operands read, are
numbered and kept by ``temporaries.py``.
``emit.py`` turns the plan into source; nothing here knows the skeleton's text.

Every group takes its iteration shape and each value's index map from ``indexing.py``:
inputs and outputs are the value seen through its map (composed strides), and a view
node is no statement, only another name for its operand's registers. A cat is a
`tl.where` over the coordinate along its dim (a generated value, like `arange`'s), each of
its operands computed over its own piece (``indexing.py``), their inputs loaded masked to it
(``TensorArg.piece``), its bounds fixed or read from the operands at each call
(``cat_bounds.py``). A reduction may read a cat, not be computed in its branches.
A reduction runs in its own order there (kept dims, then the reduced ones, group_norm's
channels split), and the columns cover the domain's last ``reduced`` dims.

In a reduction kernel every value is either per-column (a ``[ROWS, BLOCK]``
block) or per-row (``[ROWS, 1]``: column vectors, and whatever follows a
reduction that collapses the row); ``phase`` says whether it comes before the
reduction (recomputed in each column pass when rows loop) or after it.

An elementwise kernel is ``tiled`` (rows x a block of columns, like a reduction
kernel) when some tensor spans the last axis through more than one index group: a
transposed or sliced view, or a broadcast over a middle dim. Its flat index would
need ``offs // span`` terms, which hide from Triton that neighbouring lanes read
neighbouring addresses and so cost vector loads; in a tile the columns are indexed
by ``cols`` itself. ``tiling.py`` decides both, and how many trailing dims the
columns cover (those after a permuted tensor's contiguous dim).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass

import torch

from ..analysis.group import escaping, external_inputs, ordered
from ..analysis.types import Cluster
from ..ir.graph import FusionGraph, Node, OpKind, Ref
from ..ir.lowerings import CAT_ENDS
from ..ir.reductions import correction
from ..ir.run_scalars import Scalar, analysed, run_scalar, spelled
from ..ir.spelling import said, said_all
from ..ir.views import inverse, split_piece
from ..names import kernel_name
from .cat_bounds import cat_bounds, cat_ends, piece_read, regrown
from .domain_view import seen_through, view_offset
from .half_reads import computed_unrounded
from .indexing import index_maps
from .layout import Access, LoweringError, access, dense_permuted, eager_order
from .literal_sizes import literal_pins
from .node_lowering import literal, node_meta, pointwise_rule, reduction_eps, reduction_rule
from .plan import (
    COMPUTE,
    MAX_BLOCK,
    Generated,
    KernelPlan,
    PieceRead,
    ReductionStep,
    Role,
    ScalarArg,
    Stmt,
    TensorArg,
    followed_dims,
    live_statements,
    needs_int64,
)
from .temporaries import Temporaries
from .tiling import column_dims, needs_tiles

__all__ = ["COMPUTE", "MAX_BLOCK", "Group", "KernelPlan", "ReductionStep", "Stmt", "TensorArg",
           "dry_run", "literal", "plan"]


@dataclass(frozen=True)
class Group:
    """What lowering reads of a cluster (a candidate group has no Cluster yet)."""

    index: int
    nodes: tuple[str, ...]  # topological order
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    chain: str


def plan(graph: FusionGraph, cluster: Cluster) -> KernelPlan:
    group = Group(cluster.index, tuple(cluster.nodes), tuple(cluster.inputs),
                  tuple(cluster.outputs), cluster.chain)
    return _Lowering(graph, group).run()


def dry_run(graph: FusionGraph, nodes: Collection[str]) -> LoweringError | None:
    """Plan a candidate group as the code generator would; the error if it cannot."""
    order = tuple(ordered(graph, nodes))
    group = Group(0, order, external_inputs(graph, order), tuple(escaping(graph, order)),
                  " → ".join(graph[n].op for n in order))
    try:
        _Lowering(graph, group).run()
    except LoweringError as e:
        return e
    return None


class _Lowering:
    def __init__(self, graph: FusionGraph, cluster: Group) -> None:
        self.g, self.c = graph, cluster
        self.nodes = [graph[n] for n in cluster.nodes]
        bad = tuple(n.name for n in self.nodes
                    if not (n.kind.is_compute or n.kind is OpKind.VIEW))
        if bad:
            raise LoweringError(f"cluster {cluster.index}: {said_all(graph, bad)} compute nothing "
                                "(in-place ops cannot be lowered)", bad)
        self.reds = [n for n in self.nodes if n.kind is OpKind.REDUCTION]
        self.cat_names = [n.name for n in self.nodes if n.kind is OpKind.CONCAT]
        self.red = self.reds[0] if self.reds else None
        # Python numbers of sizes alone: kernel scalars, no tensors to index.
        found = [(n, s) for n in cluster.inputs if (s := run_scalar(graph, n)) is not None]
        self.scalars = tuple(self._scalar_arg(graph, i, n, s) for i, (n, s) in enumerate(found))
        self.tensors = tuple(n for n in cluster.inputs
                             if n not in {a.value for a in self.scalars})
        self.maps = index_maps(graph, cluster.nodes, self.tensors, cluster.outputs)
        self.domain = self.maps.domain
        self.rank = len(self.domain)
        self.reduced = max(self.maps.reduced, 1)
        self._one_block()
        self.t = Temporaries(self.scalars)  # and the copies operands read (``temporaries.py``)

    def _scalar_arg(self, graph: FusionGraph, i: int, value: str, s: Scalar) -> ScalarArg:
        """The kernel parameter of the Python number `value` (its size expression `s`): a
        float that every op reading it meets with fp64 tensors travels as its double's bits
        (eager computes with the double there, with its fp32 rounding beside fp32 and 16-bit
        tensors; an op's output dtype does not say which: a comparison's is bool)."""
        floating = isinstance(analysed(graph, s), float)
        readers = [n for n in self.nodes if value in n.refs]

        def in_fp64(n: Node) -> bool:
            return any(graph[r].meta is not None and graph[r].meta.dtype == torch.float64
                       for r in n.refs if r != value)

        wide = floating and bool(readers) and all(map(in_fp64, readers))
        return ScalarArg(value, f"scalar{i}", "scalar_" + re.sub(r"\W", "_", value), spelled(s),
                         floating, wide)

    def _one_block(self) -> None:
        """Several reductions share one kernel only with the whole row in one block (the
        index maps checked they reduce the same rows)."""
        n_cols = math.prod(self.domain[self.rank - self.reduced:])
        if len(self.reds) > 1 and self.domain and n_cols > MAX_BLOCK:
            raise LoweringError(f"{len(self.reds)} reductions in one kernel need the whole row in "
                                f"one block; rows of {n_cols} columns are wider than "
                                f"{MAX_BLOCK}", tuple(n.name for n in self.reds[1:]))

    def _access(self, name: str, shape, stride, piece: PieceRead | None = None,
                grows: int = 0) -> Access:
        try:
            return access(tuple(shape), tuple(stride), self.domain,
                          name in self.g.fixed, piece.dim if piece is not None else None,
                          grows)
        except LoweringError as e:
            # Blame the value's producer in the group, else the group nodes that read it.
            blame = (name,) if name in self.c.nodes else tuple(
                n.name for n in self.nodes if name in n.refs)
            raise LoweringError(f"cluster {self.c.index}: {said(self.g, name)}: {e}",
                                blame) from None

    def _is_per_row(self, acc: Access) -> bool:
        first_col = self.rank - self.reduced
        if self.red is None or self.rank == 0 or math.prod(self.domain[first_col:]) == 1:
            return False
        return not any(g.last > first_col for g in acc.groups)

    # -- the plan -----------------------------------------------------------------------
    def run(self) -> KernelPlan:
        gens = [n.name for n in self.nodes if n.kind is OpKind.GENERATOR]
        # The coordinate along each cat dim, made first: the operands' loads are masked by it.
        # (A cat straddling group_norm's groups takes the channel's: two dims, ``cat_pers``.)
        self.coords = {k: self._coordinate(len(gens) + j, *k) for j, k in enumerate(
            sorted({(d, self.maps.cat_pers[n]) for n, d in self.maps.cat_dims.items()}))}
        inputs = tuple(self._input(i, name) for i, name in enumerate(self.tensors))
        inputs += self._second_loads(len(inputs))
        self.cats = cat_bounds(self.g, self.cat_names, self.maps, inputs, self.rank,
                               self.g.fixed)
        generated = tuple(self._generated(i, name) for i, name in enumerate(gens))
        generated += tuple(self.coords.values())
        steps: list[Stmt | ReductionStep] = []
        for node in self.nodes:
            try:
                if node.kind is OpKind.GENERATOR:
                    continue  # made where the inputs are loaded (`generated`)
                step = self._reduction(node) if node in self.reds else self._stmt(node)
                # the rounded copies its operands read come first (``half_reads.py``)
                steps += [*self.t.take_roundings(), *([] if step is None else [step])]
                meta = node.meta
                if step is not None and meta and computed_unrounded(meta.dtype, node.op):
                    self.t.unrounded[step.temp] = meta.dtype
            except LoweringError as e:  # blame the node being lowered
                raise (e if e.nodes else LoweringError(str(e), (node.name,))) from None
        stmts = [s for s in steps if isinstance(s, Stmt)]
        reductions = [s for s in steps if isinstance(s, ReductionStep)]
        outputs = tuple(self._output(i, name) for i, name in enumerate(self.c.outputs))
        reduction = reductions[0] if reductions else None
        stmts = live_statements(stmts, reductions, outputs)
        needed = {s.temp for s in stmts} | {r.temp for r in reductions}
        several = tuple(s for s in steps if s.temp in needed) if len(reductions) > 1 else ()
        tiled = reduction is None and needs_tiles(self.domain, inputs + generated + outputs)
        col_dims = column_dims(self.domain, inputs + generated + outputs) if (
            reduction is None) else self.reduced
        return KernelPlan(
            name=kernel_name(self.c.index), cluster_index=self.c.index,
            skeleton="reduction" if self.red is not None else "elementwise",
            domain=self.domain, inputs=inputs, stmts=tuple(stmts), reduction=reduction,
            outputs=outputs, int64=needs_int64(self.domain, inputs), chain=self.c.chain,
            tiled=tiled, steps=several, col_dims=col_dims,
            generated=generated, scalars=self.scalars, cats=self.cats,
            pins=literal_pins(self.g, self.c.nodes, self.tensors))

    def _second_loads(self, start: int) -> tuple[TensorArg, ...]:
        """Inputs some node reads through another index map than the first load's: loaded
        again, once per distinct map (`x + x.t()`)."""
        out: list[TensorArg] = []
        loaded: dict[tuple[str, tuple], str] = {}
        for (reader, name), steps in self.maps.reads.items():
            key = (name, steps)
            if key not in loaded:
                meta = node_meta(self.g, name)
                shape, stride, fields = self._viewed(name, meta.shape, meta.stride, steps)
                piece = self._piece(steps, meta.shape)
                stride = regrown(stride, piece, self.rank, shape) if piece else stride
                acc = self._access(name, shape, stride, piece)
                per_row = self._is_per_row(acc)
                temp = self.t.fresh(per_row, "pre")
                out.append(TensorArg(name, Role.IN, start + len(out), temp, shape, stride,
                                     meta.dtype, acc, per_row, **fields, piece=piece))
                loaded[key] = temp
            self.t.read_temps[(reader, name)] = loaded[key]
        return tuple(out)

    def _viewed(self, name: str, shape, stride, steps: tuple | None = None
                ) -> tuple[tuple, tuple, dict]:
        """(shape, strides, TensorArg fields) of `name` as the kernel indexes it: through its
        index map, or as it is where right-alignment reads the same."""
        blame = tuple(n.name for n in self.nodes if n.kind is OpKind.VIEW)
        return seen_through(self.maps, self.g, name, tuple(shape), tuple(stride),
                            self.rank, steps, blame)

    def _piece(self, steps: tuple | None, shape) -> PieceRead | None:
        return piece_read(steps, tuple(shape), self.rank, self.coords, self.cat_names)

    def _coordinate(self, i: int, dim: int, per: int = 0) -> TensorArg:
        """The coordinate along domain dim `dim`, generated like `arange` over that dim; with
        `per`, over dims `dim` and `dim + 1` (group_norm's group and the channel in it): the
        channel, `group * per + channel in group`."""
        size = self.domain[dim] * (self.domain[dim + 1] if per else 1)
        shape = self.domain[dim:dim + 1 + bool(per)] + (1,) * (self.rank - 1 - dim - bool(per))
        stride = torch.empty(shape, device="meta").stride()
        acc = self._access(f"the coordinate along dim {dim}", shape, stride)
        per_row = self._is_per_row(acc)
        temp = self.t.fresh(per_row, "pre")
        params = (("start", 0), ("end", size), ("step", 1), ("dtype", torch.int32))
        name = f"cat_index{dim}_{dim + 1}" if per else f"cat_index{dim}"
        return TensorArg(name, Role.GEN, i, temp, shape, stride, torch.int32, acc,
                         per_row, generated=Generated("arange", params))

    def _input(self, i: int, name: str) -> TensorArg:
        meta = node_meta(self.g, name)
        shape, stride, fields = self._viewed(name, meta.shape, meta.stride)
        piece = self._piece(self.maps.chains[name], meta.shape)
        stride = regrown(stride, piece, self.rank, shape) if piece else stride
        acc = self._access(name, shape, stride, piece)
        temp = self.t.new(name, self._is_per_row(acc), "pre")
        return TensorArg(name, Role.IN, i, temp, shape, stride, meta.dtype, acc,
                         self.t.per_row[temp], **fields, piece=piece)

    def _generated(self, i: int, name: str) -> TensorArg:
        """A generator's value, indexed like a contiguous input of its shape (through its
        index map where views are fused): its offset there is the element's own index."""
        node, meta = self.g[name], node_meta(self.g, name)
        contiguous = torch.empty(meta.shape, device="meta").stride()
        shape, stride, fields = self._viewed(name, meta.shape, contiguous)
        piece = self._piece(self.maps.chains[name], meta.shape)
        acc = self._access(name, shape, stride, piece)
        temp = self.t.new(name, self._is_per_row(acc), "pre")
        offset = view_offset(fields["view"], tuple(meta.shape)) if "view" in fields else 0
        return TensorArg(name, Role.GEN, i, temp, shape, stride, meta.dtype, acc,
                         self.t.per_row[temp], **fields,
                         generated=Generated(node.op, node.params, offset), piece=piece)

    def _stmt(self, node: Node) -> Stmt | None:
        if node.kind is OpKind.VIEW:  # a change of index map: same registers, no statement
            self.t.of[node.name] = self.t.taken(node.name, node.refs[0])
            return None
        lowering = pointwise_rule(self.g, node)
        operands, params = self.t.operands(self.g, node)
        if node.kind is OpKind.CONCAT:  # the coordinate picks the operand (its piece)
            key = (self.maps.cat_dims[node.name], self.maps.cat_pers[node.name])
            operands = (self.coords[key].temp, *operands)
            c = self.cat_names.index(node.name)
            params[CAT_ENDS] = cat_ends(self.cats[c], c)
        written = lowering(operands, params)
        if written is None:
            raise LoweringError(f"{said(self.g, node.name)} has no lowering rule for params "
                                f"{dict(node.params)}")
        expr, helpers = ((written, ()) if isinstance(written, str)  # or ir/rounding.Calls
                         else (written.expr, written.helpers))
        deps = tuple(dict.fromkeys(o for o in operands if o in self.t.per_row))
        per_row = bool(self.reds) and all(self.t.per_row[d] for d in deps)
        if expr in deps:  # identity (dropout in eval, clone, same-dtype cast): no new temp
            self.t.of[node.name] = expr
            return None
        phase = "post" if any(self.t.phase[d] == "post" for d in deps) else "pre"
        temp = self.t.new(node.name, per_row, phase)
        return Stmt(temp, expr, node.name, node.op, deps, per_row, phase, helpers)

    def _reduction(self, node: Node) -> ReductionStep:
        rule, operand_names = reduction_rule(self.g, node)
        operands = dict(zip(operand_names, node.inputs, strict=False))
        names = {k: self.t.read(node, v.name, reduced=True) if isinstance(v, Ref) else None
                 for k, v in operands.items()}
        for k, v in operands.items():
            if not isinstance(v, Ref) and v is not None:
                raise LoweringError(f"{said(self.g, node.name)}: {k} must be a tensor or None, "
                                    f"got {v!r}")
        eps = reduction_eps(self.g, node)
        meta = node_meta(self.g, node.name)
        dtype = rule.accumulation_dtype(meta.dtype)
        if dtype is None:
            raise LoweringError(f"{said(self.g, node.name)} on {meta.dtype} is not lowered")
        temp = self.t.new(node.name, not rule.keeps_row, "post")
        return ReductionStep(rule, temp, node.name, names["input"], names.get("weight"),
                             names.get("bias"), eps, dtype, self.reduced,
                             correction(dict(node.params)))

    def _output(self, i: int, name: str) -> TensorArg:
        meta = node_meta(self.g, name)
        if split_piece(self.maps.chains[name])[1] is not None:
            raise LoweringError(f"{said(self.g, name)} is computed over one piece of a cat and "
                                "also written; a kernel writes whole values", (name,))
        # eager's own layout (a channels-last result stays channels-last): the next op reads
        # it as it would eager's, and the kernel stores along its inputs' memory order
        eager = dense_permuted(tuple(meta.shape), tuple(meta.stride))
        layout = eager or torch.empty(meta.shape, device="meta").stride()
        shape, stride, fields = self._viewed(name, meta.shape, layout)
        if eager is not None:
            fields["memory_order"] = eager_order(tuple(meta.shape), eager)
        view = fields.get("view", ())
        if view and inverse(view, tuple(meta.shape)) is None:
            # `(w * 2)[:, ::2]` read over the domain while `w * 2` is a result too: the
            # kernel computes every other element, and the store would leave the rest empty
            raise LoweringError(f"{said(self.g, name)} is also written, but the group computes "
                                "it over a view that reaches only part of it; a kernel writes "
                                "whole values", (name,))
        temp = self.t.of[name]
        # per_row is set only under a reduction, whose columns cover self.reduced dims
        acc = self._access(name, shape, stride,
                           grows=followed_dims(self.rank, self.reduced, self.t.per_row[temp]))
        return TensorArg(name, Role.OUT, i, temp, shape, stride, meta.dtype, acc,
                         self.t.per_row[temp], **fields)
