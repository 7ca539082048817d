"""Our graph around one Inductor kernel: which of our ops lie between the ops it computes,
and where each matrix product, convolution or attention call on its lines stands.

Reads our ``FusionGraph``, one ``InductorKernel`` and our nodes on the kernel's (module,
file, line) keys; writes a ``KernelGraph``. Paths run through our nodes on the kernel's
lines and, wherever they are, through views and aliases (a same-dtype cast, dropout in eval:
Inductor has no node for those). A matrix product, convolution or attention call is reached
but never crossed: whatever lies beyond it is another kernel's work.

The role of such a call ``g`` (``KernelGraph.role``):
- ``EPILOGUE``: an op of ours on the kernel's lines reads g's result, and the kernel computes
  on g's behalf: Inductor lists g's own op, or a compute op on g's module and line, among its
  origins (the bias add a lowering moves into the next kernel);
- ``READS``: an op of ours reads g's result, but the kernel only loads it (a view of g's
  output is all Inductor lists there): an ordinary kernel that starts after g;
- ``PROLOGUE``: ops of ours on the kernel's lines produce g's operands and none reads its
  result (Inductor lists the consumer among the origins of the kernel preparing its inputs);
- ``UNRELATED``: neither (origins are noisy: an upstream convolution can appear among the
  origins of a kernel two ops further on).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from ..analysis.group import moves_data
from ..ir.graph import FusionGraph, Node, OpKind
from .capture import InductorKernel
from .op_names import is_compute

# Inductor (aten) and our names for matrix products and convolutions.
GEMM_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution", "conv1d", "conv2d",
    "conv3d", "_convolution", "conv_transpose2d", "einsum", "Linear", "Conv1d", "Conv2d",
    "Conv3d", "ConvTranspose2d",
})
# Attention calls, as our graph names the function and as Inductor names its aten op (the
# leading underscore dropped, see op_names.op_name).
ATTENTION_OPS = frozenset({
    "scaled_dot_product_attention", "scaled_dot_product_flash_attention",
    "scaled_dot_product_efficient_attention", "scaled_dot_product_cudnn_attention",
    "scaled_dot_product_flash_attention_for_cpu",
})

Key = tuple[str, str, int]  # (module, real file path, line)


class Role(enum.Enum):
    EPILOGUE = "epilogue"
    READS = "reads"
    PROLOGUE = "prologue"
    UNRELATED = "unrelated"


def norm_path(path: str | None) -> str:
    return os.path.realpath(path) if path else ""


def callee(node: Node) -> str:
    """The matrix product, convolution or attention an opaque node of ours calls, "" if none:
    a module's type (`Linear`) or the function's name (`F.linear`, `operator.matmul`,
    `scaled_dot_product_attention.default`)."""
    if node.kind is not OpKind.OPAQUE:
        return ""
    if node.op in GEMM_OPS:
        return node.op
    if node.target.startswith("self."):
        return ""
    return next((part for part in node.target.split(".") if part in GEMM_OPS | ATTENTION_OPS),
                "")


def compatible(ours: Key, theirs: Key) -> bool:
    """Same file and line, and the same module unless ours has none (a node a capture pass
    rewrote without metadata). Inductor's "" is real: the model's own top-level code."""
    return ours[1:] == theirs[1:] and (ours[0] == theirs[0] or not ours[0])


@dataclass(frozen=True)
class KernelGraph:
    graph: FusionGraph
    kernel: InductorKernel
    on_lines: frozenset[str]  # our nodes on the kernel's keys

    @cached_property
    def compute(self) -> frozenset[str]:
        """Our ops on the kernel's lines that a kernel computes (in-place ones included)."""
        return frozenset(n for n in self.on_lines if self.graph[n].kind.is_compute
                         or self.graph[n].kind is OpKind.INPLACE)

    def _crossable(self, name: str) -> bool:
        node = self.graph[name]
        if callee(node):
            return False
        return name in self.on_lines or node.kind is OpKind.VIEW or (
            node.kind.is_compute and not moves_data(self.graph, name))

    def _reach(self, starts: Iterable[str], step: Callable[[str], Iterable[str]]) -> set[str]:
        """Nodes reached from `starts` along `step`: through crossable nodes, up to and
        including the first call or other node on the kernel's lines."""
        seen: set[str] = set()
        todo = list(starts)
        while todo:
            for nxt in step(todo.pop()):
                if nxt in seen or not (nxt in self.on_lines or self._crossable(nxt)):
                    continue
                seen.add(nxt)
                if self._crossable(nxt):
                    todo.append(nxt)
        return seen

    @cached_property
    def downstream(self) -> frozenset[str]:
        """What the kernel's ops of ours feed, along paths on its lines."""
        return frozenset(self._reach(self.compute, lambda n: self.graph.users[n]))

    @cached_property
    def upstream(self) -> frozenset[str]:
        return frozenset(self._reach(self.compute, lambda n: self.graph[n].refs))

    def between(self, name: str) -> bool:
        """`name` lies on a path from one of the kernel's ops of ours to another."""
        return name in self.downstream and name in self.upstream

    def _computes_for(self, key: Key) -> bool:
        return any(compatible(key, (n.module, norm_path(n.file), n.line))
                   and (n.op in GEMM_OPS | ATTENTION_OPS or is_compute(n.op))
                   for n in self.kernel.nodes if n.line is not None)

    def role(self, call: Node, key: Key) -> Role:
        """Where call `call` (at `key`) stands to the kernel (see the module docstring)."""
        if self._reach([call.name], lambda n: self.graph.users[n]) & self.compute:
            return Role.EPILOGUE if self._computes_for(key) else Role.READS
        return Role.PROLOGUE if call.name in self.downstream else Role.UNRELATED
