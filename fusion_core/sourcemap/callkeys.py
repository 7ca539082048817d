"""Which call of a function each graph node ran in, read from its chain of user frames.

Reads a node's frames (``Frames.chain``: wrappers looked through) and its FX node's
``nn_module_stack``; returns keys that tell calls apart (the call lines down to it, the
callee, the module instance the caller ran as), the depth at which a cluster's chains meet
in one function, and the nodes each call ran. ``callsite.py`` lifts a cluster's calls with them.
"""

from __future__ import annotations

import torch.fx as fx

from ..ir.graph import SourceLoc
from ..pipeline import Analysis
from .frames import Frames, pos


def common_depth(chains: list[tuple[SourceLoc, ...]], frames: Frames) -> int | None:
    """The deepest frame depth at which every chain is in one function, reached through
    the same call lines above it; None when even the outermost frames differ."""
    found = None
    for d in range(min(len(ch) for ch in chains)):
        if len({frames.function(ch[d]) for ch in chains}) != 1:
            break
        found = d
        if len({pos(ch[d]) for ch in chains}) != 1:
            break
    return found


def call_key(chain: tuple[SourceLoc, ...], depth: int, frames: Frames,
             fx_node: fx.Node | None) -> tuple:
    """Which call, made at `chain[depth]`, a node ran in: the call lines down to it, the
    callee, and the module the caller ran as (the same line runs once per block). Coarser
    than one call at worst (two calls from one line of one module), which only asks more
    of the cluster."""
    site = tuple(pos(f) for f in chain[:depth + 1])
    module = ""
    stack = (fx_node.meta.get("nn_module_stack") or {}) if fx_node is not None else {}
    # The caller's module; a plain function's (`apply_rotary_pos_emb`), the module of the
    # method that called it: every block's attention calls it from the same lines.
    for frame in reversed(chain[:depth + 1]):
        caller = frames.scope(frame)
        if caller is not None and caller.class_name:
            module = next((path for path, cls in stack.values() if getattr(
                cls, "__name__", str(cls).rsplit(".", 1)[-1]) == caller.class_name), "")
            break
    return (site, frames.function(chain[depth + 1]), module)


def call_members(analysis: Analysis, depth: int, wanted: set[tuple], frames: Frames,
                 gm_nodes: dict[str, fx.Node]) -> dict[tuple, list[str]]:
    """Every graph node each wanted call ran, by the call's key."""
    sites = {k[0] for k in wanted}
    out: dict[tuple, list[str]] = {}
    for n in analysis.graph.nodes:
        chain = frames.chain(n.source)
        if len(chain) <= depth + 1 or tuple(pos(f) for f in chain[:depth + 1]) not in sites:
            continue
        key = call_key(chain, depth, frames, gm_nodes.get(n.name))
        if key in wanted:
            out.setdefault(key, []).append(n.name)
    return out


def instance_path(node: fx.Node | None, class_name: str | None) -> str | None:
    """The path of the module whose method `node` ran in (`blocks.1`), when known."""
    stack = (node.meta.get("nn_module_stack") or {}) if node is not None else {}
    for path, cls in reversed(list(stack.values())):
        if class_name and getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1]) == class_name:
            return path
    return None
