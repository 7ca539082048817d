"""Inputs for validation: random model inputs, reduced shapes, recorded activations.

Reads an ``Analysis`` (its specs, module and traced graph); writes real tensors: fresh random
model inputs (never zeros; integer token ids below the smallest embedding table; integer
masks and flags 0 or 1), the
reduced input specs used under the interpreter, and the values every node takes when the
traced graph runs on those inputs (the cluster's inputs come from there, so masks and
weights are the model's own).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn

from ..ir.graph import FusionGraph, OpKind, Ref
from ..ir.registry import SPECS
from ..ir.shapes import InputSpec
from ..pipeline import Analysis

TARGET_ROWS = 64  # rows a reduced interpreter run aims at (~2 ms per program instance)
_INT_HIGH_NO_EMBEDDING = 16


def _int_high(module: nn.Module) -> int:
    """Token ids must index every embedding table: stay below the smallest."""
    sizes = [m.num_embeddings for m in module.modules() if isinstance(m, nn.Embedding)]
    return min(sizes) if sizes else _INT_HIGH_NO_EMBEDDING


def flag_inputs(graph: FusionGraph) -> frozenset[int]:
    """Positions of the integer inputs no op takes as indices (an embedding, a gather; seen
    through views and casts): attention masks and flags, drawn 0 or 1. Drawn up to 15, an
    HF-style `(1.0 - mask) * torch.finfo(dtype).min` overflowed to inf, eager's softmax gave
    NaN, and every kernel after it failed its check."""
    return frozenset(i for i, n in enumerate(graph.inputs)
                     if n.meta is not None and not n.meta.dtype.is_floating_point
                     and n.meta.dtype != torch.bool and not _indexes(graph, n.name))


# Opaque ops (by op or call) that read integers as indices. Others (`mask ^ (x > 0)`) read
# a mask; 0 and 1 index any table, so a reader missed here costs coverage, not a failure.
INDEX_READERS = ("embedding", "gather", "index", "take", "scatter", "one_hot", "bincount")


def divisor_inputs(graph: FusionGraph) -> frozenset[int]:
    """Positions of the integer inputs an op divides by (`i // j`, `i % j`; the registry's
    ``OpSpec.divisor``), through views and casts: drawn from 1 up, as eager on the CPU
    refuses an integer division by zero (the model would not run on them)."""
    return frozenset(i for i, n in enumerate(graph.inputs)
                     if n.meta is not None and not n.meta.dtype.is_floating_point
                     and _read_by(graph, n.name, _divides))


def _divides(graph: FusionGraph, user: str, value: str) -> bool:
    n = graph[user]
    spec = SPECS.get(n.op)
    if spec is None or spec.divisor is None or spec.divisor not in spec.operands:
        return False
    at = spec.operands.index(spec.divisor)
    return at < len(n.inputs) and n.inputs[at] == Ref(value)


def _indexes(graph: FusionGraph, name: str) -> bool:
    """Whether an op taking indices (an embedding, a gather) reads `name`, through views and
    casts."""
    return _read_by(graph, name, lambda g, user, value: g[user].kind is OpKind.OPAQUE and any(
        w in f"{g[user].op} {g[user].target}".lower() for w in INDEX_READERS))


def _read_by(graph: FusionGraph, name: str, reads: Callable[[FusionGraph, str, str], bool]
             ) -> bool:
    """Whether some `user` reads `name` (or a view or cast of it, `value`) as `reads` says."""
    todo, seen = [name], {name}
    while todo:
        value = todo.pop()
        for user in graph.users.get(value, ()):
            n = graph[user]
            if reads(graph, user, value):
                return True
            if user not in seen and (n.kind is OpKind.VIEW or n.op == "to"):
                seen.add(user)
                todo.append(user)
    return False


def random_inputs(specs: Sequence[InputSpec], module: nn.Module, device: str | torch.device,
                  seed: int, flags: Collection[int] = (), divisors: Collection[int] = ()
                  ) -> list[torch.Tensor]:
    """`flags`: positions of integer inputs drawn 0 or 1 (``flag_inputs``); `divisors`:
    of integer inputs never 0 (``divisor_inputs``; a flag among them is 1)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, s in enumerate(specs):
        if s.dtype.is_floating_point:
            t = torch.randn(s.shape, generator=gen).to(s.dtype)
        elif s.dtype == torch.bool:
            t = torch.rand(s.shape, generator=gen) < 0.5
        else:
            low = 1 if i in divisors else 0
            high = 2 if i in flags else _int_high(module)
            t = torch.randint(low, high, s.shape, generator=gen, dtype=s.dtype)
        # the same values, laid out as the analysed input (`.to` keeps dense strides)
        if s.memory_order is not None:
            t = torch.empty_strided(s.shape, s.stride, dtype=t.dtype).copy_(t)
        out.append(t.to(device))
    return out


def graph_inputs(graph: FusionGraph, specs: Sequence[InputSpec], module: nn.Module,
                 device: str | torch.device, seed: int) -> list[torch.Tensor]:
    """Random inputs for `specs`, integers drawn as `graph` reads them: masks 0 or 1
    (``flag_inputs``), divisors from 1 (``divisor_inputs``). Every path that runs the model
    (validation, --apply's check, the Inductor comparison) draws here, so none divides by 0.
    Positions are the graph's only where it has one input per spec."""
    same = len(graph.inputs) == len(specs)
    flags = flag_inputs(graph) if same else ()
    divisors = divisor_inputs(graph) if same else ()
    return random_inputs(specs, module, device, seed, flags, divisors)


def result_shape(analysis: Analysis, index: int) -> tuple[int, ...]:
    c = analysis.clusters[index]
    meta = analysis.graph[c.outputs[-1]].meta
    return meta.shape if meta is not None else ()


def _rows(shape: tuple[int, ...]) -> int:
    return math.prod(shape[:-1]) if len(shape) > 1 else 1


def reduced_specs(analysis: Analysis, target_rows: int = TARGET_ROWS) -> tuple[InputSpec, ...]:
    """Shrink the leading (batch) dim of every input so the largest cluster has ~target rows.

    Row length and every other dim stay, so broadcast patterns and the reduction width are
    those of the real shape. Unchanged when inputs disagree on dim 0 or it cannot shrink.
    """
    specs = analysis.inputs
    leading = {s.shape[0] for s in specs if s.shape}
    if len(leading) != 1 or not analysis.clusters:
        return specs
    batch = leading.pop()
    rows = max(_rows(result_shape(analysis, c.index)) for c in analysis.clusters)
    per_item = max(rows / batch, 1.0)
    new = min(batch, max(1, math.ceil(target_rows / per_item)))
    if new == batch:
        return specs
    return tuple(s.resized((new, *s.shape[1:])) for s in specs)


class _Recorder(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, keep: set[str]) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.keep = keep
        self.values: dict[str, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        if n.name in self.keep:
            self.values[n.name] = out
        return out


def record(gm: fx.GraphModule, inputs: Sequence[torch.Tensor], names: Iterable[str]
           ) -> tuple[Any, dict[str, Any]]:
    """Run the traced graph; return its output and the values of the named nodes."""
    rec = _Recorder(gm, set(names))
    with torch.no_grad():
        out = rec.run(*inputs)
    return out, rec.values
