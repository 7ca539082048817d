"""Choose a capture frontend: FX symbolic tracing, ``torch.export``, or FX then export.

Reads an ``nn.Module`` (eval mode) and ``InputSpec``s; returns a shape-propagated
``fx.GraphModule`` (``meta["val"]`` on every node) and the frontend's name. ``auto``
tries FX first (its graph keeps the user's module calls) and falls back to export
when FX cannot trace; when both fail, one line names each frontend's reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn as nn

from ..errors import CaptureError
from .export import export_graph
from .registry import lookup
from .shapes import InputSpec, propagate_shapes
from .trace import _one_line, _where, trace_fx

FRONTENDS = ("auto", "fx", "export")


@dataclass(frozen=True)
class Captured:
    gm: fx.GraphModule
    frontend: str  # "fx" or "export"
    fallback: str = ""  # auto mode only: why FX failed, one line ("" when FX was used)
    # auto mode only: which frontend was kept when FX left wrapped functions opaque, and why.
    choice: str = ""
    # auto mode, FX left fx.wrap-ed functions opaque and export succeeded: the exported
    # graph, for the pipeline to keep if its analysis fuses more (`leaves`: their names).
    alternative: fx.GraphModule | None = None
    leaves: tuple[str, ...] = ()


def capture(model: nn.Module, specs: Sequence[InputSpec], how: str = "auto"
            ) -> tuple[fx.GraphModule, str]:
    c = captured(model, specs, how)
    return c.gm, c.frontend


def captured(model: nn.Module, specs: Sequence[InputSpec], how: str = "auto") -> Captured:
    """`capture`, and on an auto fallback to torch.export the FX reason (for the report)."""
    if how not in FRONTENDS:
        raise CaptureError(f"unknown capture frontend {how!r}: choose one of "
                           f"{', '.join(FRONTENDS)}")
    if how == "export":
        return Captured(export_graph(model, specs), "export")
    try:
        gm = trace_fx(model)
    except CaptureError as fx_error:
        if how == "fx":
            raise
        try:
            return Captured(export_graph(model, specs), "export", _why(fx_error))
        except CaptureError as export_error:
            raise CaptureError(_both(model, fx_error, export_error)) from export_error
    gm = propagate_shapes(gm, specs)
    leaves = wrapped_leaves(gm)
    if how == "fx" or not leaves:
        return Captured(gm, "fx")
    try:
        exported = export_graph(model, specs)
    except CaptureError as export_error:
        return Captured(gm, "fx", choice=f"kept FX: it left {leaf_list(leaves)} opaque "
                                         f"(torch.fx.wrap) and torch.export failed "
                                         f"({_why(export_error, ' ')})")
    return Captured(gm, "fx", alternative=exported, leaves=tuple(leaves))


# Modules whose functions the registry (or FX itself) knows: a call to one is no leaf.
_KNOWN_MODULES = ("torch", "_operator", "operator", "builtins", "math")


def wrapped_leaves(gm: fx.GraphModule) -> list[str]:
    """Names of the plain Python functions FX recorded as single calls (fx.wrap leaves)."""
    names: dict[str, None] = {}
    for n in gm.graph.nodes:
        if n.op != "call_function" or lookup(n.target) is not None:
            continue
        module = getattr(n.target, "__module__", None) or ""
        if isinstance(n.target, torch._ops.OpOverload) or module.split(".")[0] in _KNOWN_MODULES:
            continue
        names.setdefault(getattr(n.target, "__name__", str(n.target)))
    return list(names)


def leaf_list(names: list[str]) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _why(err: CaptureError, prefix: str = " at ") -> str:
    """`file:line (`code`): Error: message` of the frontend's underlying failure."""
    cause = err.__cause__ or err
    where = _where(cause).removeprefix(prefix)
    return f"{where}: {_one_line(cause)}" if where else _one_line(cause)


def _both(model: nn.Module, fx_error: CaptureError, export_error: CaptureError) -> str:
    fx_why, export_why = _why(fx_error, " "), _why(export_error, " ")  # keep "at file:line"
    return (f"cannot capture {type(model).__name__}: FX symbolic tracing failed "
            f"({fx_why}) and torch.export failed ({export_why}); rewrite that "
            "construct (data-dependent Python control flow → torch.where)")
