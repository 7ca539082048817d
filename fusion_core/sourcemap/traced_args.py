"""How a traced call's arguments line up with the source's call of it.

Reads one FX node (its target's signature, keywords and the registry's facts about its op);
writes nothing. ``unify.py`` pairs the source's arguments with the traced ones through these:
positional arguments past the tensor by the parameter's name, per-channel statistics as the
capture laid them out, and the parameters an op's kernel never reads.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.fx as fx

from ..ir.graph import FusionGraph
from ..ir.registry import SPECS


def channel_reshape(node: fx.Node) -> str | None:
    """`.reshape(-1, 1, 1)` where `node` is a per-channel reshape the capture made of a
    norm's statistics or weights (one sized dim: `-1` there serves any channel count), else
    None."""
    if node.target is not torch.reshape or len(node.args) != 2 or node.kwargs:
        return None
    shape = node.args[1]
    if not (isinstance(shape, (tuple, list)) and all(isinstance(d, int) for d in shape)):
        return None
    sized = [i for i, d in enumerate(shape) if d != 1]
    if len(sized) != 1 or len(shape) < 2:
        return None
    return f".reshape({', '.join('-1' if i == sized[0] else str(d) for i, d in enumerate(shape))})"


def keyword_values(node: fx.Node, start: int, count: int) -> tuple[Any, ...] | None:
    """The values of the traced call's parameters at positions `start` on (`count` of them),
    by name: a keyword the call has, else that parameter's default (what the capture left
    out); None when the target's signature or a value cannot be told."""
    try:
        params = list(inspect.signature(node.target).parameters.values())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if len(params) < start + count or any(
            p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in params[:start + count]):
        return None
    out = []
    for p in params[start:start + count]:
        if p.name in node.kwargs:
            out.append(node.kwargs[p.name])
        elif p.default is not p.empty:
            out.append(p.default)
        else:
            return None
    return tuple(out)


def unread_params(graph: FusionGraph | None, node: fx.Node
                  ) -> tuple[list[str] | None, frozenset[str]]:
    """The traced function's parameter names and those its op's kernel does not read
    (registry ``OpSpec.unread``: batch_norm's `momentum`)."""
    spec = SPECS.get(graph[node.name].op) if graph is not None and node.name in graph else None
    if spec is None or not spec.unread:
        return None, frozenset()
    try:
        names = list(inspect.signature(node.target).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None, frozenset()
    return names, frozenset(spec.unread)
