"""Why a call of a container (`self.stem(x)`, an `nn.Sequential`) is no edit: which of its
layers run outside the cluster, and, where ``sequential.py`` does not unroll it, why not.

Reads the model's modules and the graph's nodes; writes nothing.
"""

from __future__ import annotations

import ast
import inspect

import torch.fx as fx
from torch import nn

from ..ir.bias_split import hooked
from ..report.units import short_path
from .pyexpr import module_chain, module_path
from .sequential import _own, _own_method, _where, unrollable


def container_mismatch(model: nn.Module, path: str, self_name: str, self_path: str,
                       expr: ast.Call, node: fx.Node, nodes: dict[str, fx.Node],
                       cluster: set[str]) -> str | None:
    """Why `expr` (`self.stem(x)`) is not the cluster's `node` when `node` ran in one of
    the layers of that container: the layers it runs besides the cluster's, by name."""
    chain = module_chain(expr.func)
    if len(chain) < 2 or chain[0] != self_name:
        return None
    full = ".".join(s for s in (self_path, *chain[1:]) if s)
    if _own(full, module_path(node)) is None:
        return None
    try:
        container = model.get_submodule(full)
    except AttributeError:
        return None
    order = [name for name, _ in container.named_children()]
    mine = {k for n in cluster if (k := _own(full, _where(nodes[n]))) in order}
    other = {k for n in nodes.values() if n.name not in cluster and n.op in (
        "call_function", "call_method", "call_module") and (k := _own(full, _where(n))) in order}
    other -= mine
    if not mine or not other:
        return None
    func = ".".join(chain)
    first, last = (min(order.index(k) for k in mine), max(order.index(k) for k in mine))

    def named(keys: set[str]) -> str:
        return ", ".join(f"`{func}[{k}]` ({type(container.get_submodule(k)).__name__})"
                         if k.isdigit() else f"`{func}.{k}` "
                         f"({type(container.get_submodule(k)).__name__})"
                         for k in sorted(keys, key=order.index))

    before = {k for k in other if order.index(k) < first}
    after = {k for k in other if order.index(k) > last}
    runs = " and ".join(part for part in (
        f"{named(before)} before the cluster's layers" if before else "",
        f"{named(after)} after them" if after else "") if part)
    cls = type(container)
    why = (f"`{func}(...)` (line {expr.lineno}) runs {runs}, outside the cluster, and an "
           "edit of the line replaces the whole call")
    if isinstance(container, nn.Sequential) and not unrollable(container):
        try:
            where = short_path(inspect.getsourcefile(cls) or "?")
        except TypeError:
            where = "?"
        kind = hooked(container)
        if kind is not None:
            return (f"{why}; `{func}` has {kind}s registered, which would "
                    "not run if its layers were called one by one. To apply, register the "
                    "hooks on its layers instead")
        return (f"{why}; `{func}` is a `{cls.__name__}` (defined in {where}) with its own "
                f"`{_own_method(cls)}`, which no edit here unrolls. To apply, call its layers "
                "one per line in this forward")
    return f"{why}. To apply, call its layers one per line in this forward"
