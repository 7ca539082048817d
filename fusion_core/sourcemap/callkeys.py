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


def calls_at(analysis: Analysis, depth: int, names: list[str], frames: Frames,
             gm_nodes: dict[str, fx.Node]) -> tuple[dict[str, tuple], dict[tuple, list[str]]]:
    """The call key of each of `names` whose chain goes below `depth`, and every graph node
    each of those calls ran, in graph order.

    A module is read per node, from its `nn_module_stack`; the nodes of one call can
    disagree: a method called directly (`blk.step(x)`, not through the module's call) or
    the root's forward under FX has no instance on the stack, except inside the instances
    of its class it calls. Where the nodes of a site and callee disagree so (some with no
    module, some with one; values of the parameters alone aside), every call there is keyed
    by site and callee alone, so that no key is finer than one call."""
    chains = {n.name: frames.chain(n.source) for n in analysis.graph.nodes}
    sites = {tuple(pos(f) for f in chains[n][:depth + 1]) for n in names
             if len(chains[n]) > depth + 1}
    raw = {name: call_key(ch, depth, frames, gm_nodes.get(name)) for name, ch in chains.items()
           if len(ch) > depth + 1 and tuple(pos(f) for f in ch[:depth + 1]) in sites}
    # Values of the parameters alone (a norm's weight reshaped by a pass, no module stack)
    # stay with no module, as they were, and tell nothing of where the call ran.
    ran = {name: k for name, k in raw.items() if name not in analysis.graph.fixed}
    unplaced = {k[:2] for k in ran.values() if not k[2]}
    mixed = unplaced & {k[:2] for k in ran.values() if k[2]}
    keys = {name: (*k[:2], "") if k[:2] in mixed else k for name, k in raw.items()}
    wanted = {keys[n] for n in names if n in keys}
    members: dict[tuple, list[str]] = {}
    for name, key in keys.items():
        if key in wanted:
            members.setdefault(key, []).append(name)
    return {n: keys[n] for n in names if n in keys}, members


def instance_path(node: fx.Node | None, class_name: str | None) -> str | None:
    """The path of the module whose method `node` ran in (`blocks.1`), when known."""
    stack = (node.meta.get("nn_module_stack") or {}) if node is not None else {}
    for path, cls in reversed(list(stack.values())):
        if class_name and getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1]) == class_name:
            return path
    return None
