"""Bounds on a test's compiled record, for a budget rather than a snapshot (as
pytest-memray's ``limit_memory``): ``compiled_max_kernels=N`` and the like on the marker or in
``fusion_advisor.analyze(...)``.

Reads the bounds a test gives and its compiled record as baseline data (``compiled_gate.
compiled_data``); returns one line per bound exceeded, measured beside bound. Independent of
the baseline: a bound is checked whenever the record is taken. No torch import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .compare import fmt_bytes


def _generated(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [k for k in data.get("kernels", ()) if k.get("kind", "generated") != "extern"]


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:4]) + (", …" if len(items) > 4 else "")
    return f" ({shown})" if shown else ""


def _kernels(data: dict[str, Any], bound: int) -> str:
    kernels = _generated(data)
    n = len(kernels)
    return (f"{n} generated kernel{'s' if n != 1 else ''} (library calls not counted)"
            + _names([f"`{k['name']}`" for k in kernels]))


def _breaks(data: dict[str, Any], bound: int) -> str:
    breaks = data.get("graph_breaks", ())
    where = [f"{b.get('file')}:{b.get('line')}: {b.get('reason')}" for b in breaks]
    return f"{len(breaks)} graph break{'s' if len(breaks) != 1 else ''}" + _names(where)


def _graphs(data: dict[str, Any], bound: int) -> str:
    n = int(data.get("graphs", 1))
    return f"{n} graph{'s' if n != 1 else ''}"


def _recompiles(data: dict[str, Any], bound: int) -> str:
    n = int(data.get("recompiles", 0))
    why = [f"{r.get('function')}: {r.get('reason')}" for r in data.get("recompile_reasons", ())]
    return f"{n} recompile{'s' if n != 1 else ''}" + _names(why)


# bound name -> (what it measures, how to word the measured value)
BOUNDS: dict[str, tuple[Callable[[dict[str, Any]], int | None],
                        Callable[[dict[str, Any], int], str]]] = {
    "compiled_max_kernels": (lambda d: len(_generated(d)), _kernels),
    "compiled_max_graph_breaks": (lambda d: len(d.get("graph_breaks", ())), _breaks),
    "compiled_max_graphs": (lambda d: int(d.get("graphs", 1)), _graphs),
    "compiled_max_recompiles": (lambda d: int(d.get("recompiles", 0)), _recompiles),
    "compiled_max_bytes": (lambda d: d.get("bytes_moved"),
                           lambda d, b: f"{fmt_bytes(d['bytes_moved'])} moved by Inductor's "
                                        f"estimate ({d['bytes_moved']} B)"),
}


def check_bound_values(bounds: Mapping[str, Any], where: str) -> str | None:
    """One line naming a bad bound (unknown name, not a whole number ≥ 0); None if all good."""
    for name, value in bounds.items():
        if name not in BOUNDS:
            return (f"{where} got unknown bound {name}: the compiled bounds are "
                    f"{', '.join(BOUNDS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{where}: {name}={value!r} must be a whole number ≥ 0, e.g. {name}=4"
    return None


def exceeded(bounds: Mapping[str, int], records: Mapping[str, dict[str, Any]]) -> list[str]:
    """One line per bound a backend's record exceeds: measured, then the bound."""
    out = []
    for backend, data in sorted(records.items()):
        for name, bound in bounds.items():
            measure, words = BOUNDS[name]
            value = measure(data)
            if value is None:
                out.append(f"compiled bound {name}={bound} not checked on {backend}: Inductor "
                           "gave no estimate of the bytes moved (this torch has no "
                           "post-fusion pass)")
            elif value > bound:
                out.append(f"compiled bound exceeded on {backend}: {words(data, bound)}, more "
                           f"than {name}={bound}")
    return out
