"""Choose a capture frontend: FX symbolic tracing, ``torch.export``, or FX then export.

Reads an ``nn.Module`` (eval mode) and ``InputSpec``s; returns a shape-propagated
``fx.GraphModule`` (``meta["val"]`` on every node) and the frontend's name. ``auto``
tries FX first (its graph keeps the user's module calls) and falls back to export
when FX cannot trace the model, or traces it but cannot propagate shapes through a
construct of the model's own (``.item()``, ``nonzero``: see ``ShapePropagationError``);
an input the model rejects is not FX's failure and falls back to nothing. When both
fail, one line names each frontend's reason, or the line that reads a tensor's value
and how to change it.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn as nn
from torch._subclasses import fake_tensor
from torch.fx.experimental import symbolic_shapes

from ..errors import CaptureError, InputSpecError, ShapePropagationError
from .export import export_graph, unknown_output_fix
from .shapes import InputSpec, propagate_shapes
from .targets import lookup
from .trace import UNRECORDABLE, _one_line, _where, trace_fx, user_frame

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
    _check_keyword_only(model, len(specs))
    if how == "export":
        return Captured(export_graph(model, specs), "export")
    try:
        gm = trace_fx(model)
    except CaptureError as fx_error:
        if how == "fx":
            raise
        return _export_instead(model, specs, fx_error)
    try:
        gm = propagate_shapes(gm, specs)
    except ShapePropagationError as fx_error:  # the model's construct, not the input
        if how == "fx":
            raise
        return _export_instead(model, specs, fx_error)
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


def _check_keyword_only(model: nn.Module, n_inputs: int) -> None:
    """Example inputs are passed by position. FX gives a keyword-only parameter a
    positional placeholder all the same, so its graph would take an input the model itself
    refuses: say so before capturing."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):  # a builtin or C forward: nothing to read
        return
    kinds = inspect.Parameter
    positional = [p for p in params if p.kind in (kinds.POSITIONAL_ONLY,
                                                  kinds.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is kinds.VAR_POSITIONAL for p in params):
        return
    keyword_only = [p for p in params if p.kind is kinds.KEYWORD_ONLY]
    required = [p for p in keyword_only if p.default is p.empty]
    given = keyword_only[:max(0, n_inputs - len(positional))]
    named = required or given
    if not named:
        return
    names = ", ".join(f"`{p.name}`" for p in named)
    try:
        file = inspect.getsourcefile(model.forward)
        line = inspect.getsourcelines(model.forward)[1]
        where = f" ({file}:{line})" if file else ""
    except (OSError, TypeError):
        where = ""
    raise InputSpecError(
        f"{type(model).__name__}.forward{where} takes {names} as keyword-only "
        f"(after `*`); fusion-advisor passes the example inputs by position: make "
        f"{'it' if len(named) == 1 else 'them'} positional (drop the `*`), or analyse a "
        f"wrapper module whose forward passes {'it' if len(named) == 1 else 'them'} by name")


def _export_instead(model: nn.Module, specs: Sequence[InputSpec], fx_error: CaptureError
                    ) -> Captured:
    """Auto mode after FX failed (tracing, or shape propagation on a construct of the
    model's): the exported graph, with FX's reason for the report."""
    try:
        return Captured(export_graph(model, specs), "export", _why(fx_error))
    except CaptureError as export_error:
        raise CaptureError(_both(model, fx_error, export_error)) from export_error


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
    if isinstance(err, ShapePropagationError):  # its cause's traceback ends in FX's code
        where = f" at {err.where}".removeprefix(prefix) if err.where else ""
        return f"{where}: {err.reason}" if where else err.reason
    cause = err.__cause__ or err
    where = _where(cause).removeprefix(prefix)
    return f"{where}: {_one_line(cause)}" if where else _one_line(cause)


def _both(model: nn.Module, fx_error: CaptureError, export_error: CaptureError) -> str:
    name = type(model).__name__
    cause = export_error.__cause__ or export_error
    if _reads_a_value(cause):
        # The line torch.export stopped at is the one to change: once it goes, auto
        # capture has a frontend that takes the rest.
        frame = user_frame(cause)
        line = (f"`{(frame.line or '').strip()}` at {frame.filename}:{frame.lineno}" if frame
                else f"{name}.forward")
        fx_why = _why(fx_error, " ").removeprefix(_where(cause).strip() + ": ")  # named once
        return (f"cannot capture {name}: {line} reads a tensor's value in Python, which "
                f"neither FX ({fx_why}) nor torch.export ({_one_line(cause)}) can follow: "
                f"compute it with tensor ops instead (torch.where for a branch); {DEBUG_FIX}")
    fx_why, export_why = _why(fx_error, " "), _why(export_error, " ")  # keep "at file:line"
    fix = unknown_output_fix(model, cause)
    if fix is not None:  # FX's failure is then the same result, or moot once export works
        same = UNRECORDABLE.search(str(fx_error.__cause__ or ""))
        return f"cannot capture {name}: {fix}" + ("" if same else f" (FX failed too: {fx_why})")
    return (f"cannot capture {name}: FX failed ({fx_why}) and torch.export failed "
            f"({export_why}): rewrite the line they name; {DEBUG_FIX}")


# The guard works for auto capture (checked on torch 2.13): `is_compiling()` is true under
# torch.export, which skips the guarded code; FX symbolic tracing sees it false and fails
# on the line as before, and auto capture then keeps export's graph.
DEBUG_FIX = ("if it is a debug print or check, move it out of forward or guard it with "
             "`if not torch.compiler.is_compiling():`, which torch.export skips")

_DATA_DEPENDENT = tuple(cls for cls in (
    getattr(symbolic_shapes, "GuardOnDataDependentSymNode", None),
    getattr(fake_tensor, "DataDependentOutputException", None),
    getattr(fake_tensor, "DynamicOutputShapeException", None)) if cls is not None)


def _reads_a_value(exc: BaseException | None) -> bool:
    """torch.export failed because the model's Python needed a value only a real run has."""
    for _ in range(8):  # export may wrap the error it met (`raise ... from`): a few links
        if exc is None:
            return False
        if isinstance(exc, _DATA_DEPENDENT):
            return True
        exc = exc.__cause__  # not __context__: torch handles such errors internally too
    return False

