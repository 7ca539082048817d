"""Fusion barriers: ops the detector cannot fuse through that sit between compute ops.

Reads a ``FusionGraph`` and its clusters; returns one ``Barrier`` per opaque or
in-place node (or `torch.cat`, with the reason it stayed out) outside every cluster that
has compute on both sides (or, for the CLI, an unknown elementwise call next to a
cluster on one side): the compute
nodes whose values reach it and those that read its result (through views). An
in-place op also separates its input from every later reader of the value it
mutated. No candidate group contains such a node, so no rejection names it; the
CLI lists the unknown ones, and the pytest plugin names the barrier that now
splits a cluster its baseline recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..ir.concat import concat_problem
from ..ir.data_dependent import UNSIZED
from ..ir.graph import FusionGraph, OpKind
from ..ir.spelling import layer_said, said
from ..ir.upsample import OPAQUE_WHY
from .detect import line_span
from .types import Cluster, LineSpan

UNKNOWN = "opaque"  # the op of a call the registry does not know
NO_LOWERING = "its op registry has no Triton lowering for this call"
# A torch.nn layer the tracer keeps whole (not in ``ir/trace.py``'s TRACE_THROUGH): it runs
# as PyTorch's own call (a Linear's matmul, a convolution), so its result goes through memory.
LAYER_CALL = ("it leaves this torch.nn layer to PyTorch's own kernel, which writes its "
              "result to memory")


@dataclass(frozen=True)
class Barrier:
    node: str
    op: str  # registry op ("relu_"), a module class ("Linear"), or "opaque"
    target: str  # what the user wrote: "torch.roll", "F.relu", "self.proj"
    inplace: bool
    lines: LineSpan | None
    before: tuple[str, ...]  # compute nodes whose values reach it
    after: tuple[str, ...]  # compute nodes that read its result (or the value it mutated)
    why: str = ""  # a known op left out of every cluster (a `torch.cat`): the reason

    @property
    def unknown(self) -> bool:
        """A call fusion-advisor has no rule for (as opposed to a known layer)."""
        return self.op == UNKNOWN

    @property
    def layer(self) -> bool:
        """A torch.nn layer called as `self.<path>` (its op is the class, "Linear")."""
        return self.op not in (UNKNOWN, UNSIZED, self.target) and self.target.startswith(
            "self.")

    def describe(self, graph: FusionGraph, path: Callable[[str], str] = str) -> str:
        """`torch.roll` at f.py:10 sits between `silu` and `mul`: …; `path` shortens files."""
        where = f" at {path(self.lines.file)}:{str(self.lines)[1:]}" if self.lines else ""
        ops = [" / ".join(dict.fromkeys(said(graph, n) for n in side))
               for side in (self.before, self.after)]
        layer = self.target.startswith("self.")  # by the loop variable that called it, if one did
        what = (layer_said(self.target.removeprefix("self."), graph[self.node].source) if layer
                else f"`{self.target or self.op}`") + where
        if not (self.before and self.after):  # next to a cluster on one side only
            side = f"feeds {ops[1]}" if self.after else f"reads {ops[0]}"
            return (f"{what} {side}, which fuse without it: "
                    f"{self.why or 'fusion-advisor has no rule for this call'}")
        return f"{what} sits between {ops[0]} and {ops[1]}: {self.reason}"

    @property
    def reason(self) -> str:
        """Why no kernel holds it: its own reason (a cat's, a training-mode op's), else what
        it is: an in-place write, a call the op registry has no lowering for, or a layer
        left to PyTorch's own kernel."""
        if self.why:
            return self.why
        if self.inplace:
            return "it writes its input in place"
        if self.unknown:
            return f"fusion-advisor cannot fuse through it ({NO_LOWERING})"
        if self.layer:
            return f"fusion-advisor cannot fuse through it ({LAYER_CALL})"
        return "fusion-advisor cannot fuse through it"


def _walk(graph: FusionGraph, start: Iterable[str], step) -> tuple[str, ...]:
    """The nearest compute nodes from `start` along `step` (refs or users), through views."""
    found: list[str] = []
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        node = graph[name]
        if node.kind.is_compute:
            found.append(name)
        elif node.kind is OpKind.VIEW:
            todo += step(name)
    return tuple(sorted(found, key=graph.position))


def _elementwise_call(graph: FusionGraph, name: str) -> bool:
    """An unknown call of one tensor giving one of the same shape, as a pointwise function
    does (`F.softplus(x)`): a matmul, concatenation, scatter or `zeros_like` is not one a
    reader would expect to fuse."""
    node = graph[name]
    tensors = [r for r in node.refs if graph[r].meta is not None]
    return (node.op == UNKNOWN and node.kind is OpKind.OPAQUE and len(tensors) == 1
            and node.meta is not None and graph[tensors[0]].meta.shape == node.meta.shape
            and not node.target.endswith("_like"))


def find_barriers(graph: FusionGraph, clusters: Iterable[Cluster], *, one_sided: bool = False
                  ) -> tuple[Barrier, ...]:
    """With `one_sided`, also an unknown elementwise call with compute on one side only, a
    cluster's op among it (`F.softplus` between a Linear and the ops it feeds): else nothing
    would say why the cluster stops there."""
    fused = {n for c in clusters for n in c.nodes}
    out = []
    for node in graph.nodes:
        if node.name in fused or not (node.kind in (OpKind.INPLACE, OpKind.CONCAT) or (
                node.kind is OpKind.OPAQUE and node.op != "meta")):
            continue
        before = _walk(graph, node.refs, lambda n: graph[n].refs)
        readers = list(graph.users[node.name])
        if node.kind is OpKind.INPLACE and node.refs:
            pos = graph.position(node.name)  # readers of the mutated value after the write
            readers += [u for u in graph.users[node.refs[0]] if graph.position(u) > pos]
        after = _walk(graph, readers, lambda n: graph.users[n])
        beside = (one_sided and _elementwise_call(graph, node.name)
                  and bool(fused & {*before, *after}))
        if node.kind is OpKind.CONCAT and not (before and after):
            continue  # a cat left alone at a cluster's edge splits nothing
        if (before and after) or beside:
            why = _cat_apart(graph, node.name, before) if (
                node.kind is OpKind.CONCAT) else node.param(OPAQUE_WHY, "")
            out.append(Barrier(node.name, node.op, node.target, node.kind is OpKind.INPLACE,
                               line_span(graph, [node.name]), before, after, why))
    return tuple(out)


def _cat_apart(graph: FusionGraph, name: str, before: tuple[str, ...]) -> str:
    """Why a `torch.cat` between compute ops joined no cluster."""
    problem = concat_problem(graph, name)
    if problem is not None:
        return f"it {problem}"
    reds = [n for n in before if graph[n].kind is OpKind.REDUCTION]
    if reds:
        return (f"{said(graph, reds[0])} computes one of its operands, and a kernel reduces "
                "rows of a cat's whole result")
    return ("no kernel could hold it with its neighbours (--explain-rejections says why for "
            "each candidate)")
