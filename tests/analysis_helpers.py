"""Helpers shared by the analyzer tests: wrap a function in a module and analyze it."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn as nn

from fusion_core.ir.graph import FusionGraph, Node
from fusion_core.pipeline import Analysis, analyze


class Fn(nn.Module):
    """A module whose forward is `fn(x)`; FX traces through the plain function."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Fn2(nn.Module):
    """Two-input variant of `Fn`."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x, y):
        return self.fn(x, y)


def run(fn: Callable, *shapes) -> Analysis:
    module = Fn(fn) if len(shapes) <= 1 else Fn2(fn)
    return analyze(module, *(shapes or [(4, 8)]))


def result_node(g: FusionGraph) -> Node:
    """The node producing the (single) graph output."""
    return g[g.nodes[-1].refs[0]]


def names_by_op(g: FusionGraph, *ops: str) -> list[str]:
    """Node names whose op is one of `ops`, in graph order."""
    return [n.name for n in g.nodes if n.op in ops]
