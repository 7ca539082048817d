"""Choose a capture frontend: FX symbolic tracing, ``torch.export``, or FX then export.

Reads an ``nn.Module`` (eval mode) and ``InputSpec``s; returns a shape-propagated
``fx.GraphModule`` (``meta["val"]`` on every node) and the frontend's name. ``auto``
tries FX first (its graph keeps the user's module calls) and falls back to export
when FX cannot trace; when both fail, one line names each frontend's reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch.fx as fx
import torch.nn as nn

from ..errors import CaptureError
from .export import export_graph
from .shapes import InputSpec, propagate_shapes
from .trace import _one_line, _where, trace_fx

FRONTENDS = ("auto", "fx", "export")


@dataclass(frozen=True)
class Captured:
    gm: fx.GraphModule
    frontend: str  # "fx" or "export"
    fallback: str = ""  # auto mode only: why FX failed, one line ("" when FX was used)


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
    return Captured(propagate_shapes(gm, specs), "fx")


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
