"""The gate on a test's compiled record: what changed in ``torch.compile``'s output since
the baseline, as ``Finding``s (``findings.py``) a reviewer reads.

``compiled_data`` takes a test's record (``fusion_core.compiled_record``) as baseline data,
its files rootdir-relative. ``compare_compiled`` reads two ``CompiledRecord``s (baseline,
this run) of one backend; writes nothing. A new
graph break, more graphs, more kernels or more recompiles are regressions, each one message
naming where in the user's source and why; fewer kernels is an improvement; another torch
or triton version is "compiler changed", a regression only when ``fusion_compiler_change``
is ``fail``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from fusion_core import CompiledKernel, CompiledRecord, GraphBreak

from .findings import LOC, Finding
from .fixture import build_inputs, build_model
from .snapshot import relative_file

COMPILER_CHANGE = ("report", "fail")  # what a different torch/triton version does to a test


def compiled_data(
    model: Any,
    model_kwargs: Mapping[str, Any] | None,
    inputs: Sequence[Any],
    dtype: Any,
    extra_shapes: Sequence[Sequence[Any]],
    call: str,
    rootdir: Path,
) -> dict[str, dict[str, Any]]:
    """{backend: record data} of torch.compile on the model, files rootdir-relative."""
    import fusion_core

    try:
        record = fusion_core.compiled_record(
            build_model(model, model_kwargs),
            *build_inputs(inputs, dtype),
            extra_shapes=[tuple(map(tuple, e)) for e in extra_shapes],
        )
    except fusion_core.FusionAdvisorError as e:
        failure = f"compiled record failed: {e} (in {call}; or leave compiled off)"
    else:
        failure = None
    if failure is not None:  # outside the handler: pytest would print the whole chain
        pytest.fail(failure, pytrace=False)
    data = record.to_dict()
    for brk in data["graph_breaks"]:
        brk["file"] = relative_file(brk["file"], rootdir) if brk["file"] else None
    for kernel in data["kernels"]:
        kernel["sites"] = [
            [op, module, relative_file(file, rootdir) if file else None, line]
            for op, module, file, line in kernel["sites"]
        ]
    return {record.backend: data}


def from_data(backend: str, data: dict) -> CompiledRecord:
    """The record a baseline stores as plain data (``CompiledRecord.to_dict``)."""
    return CompiledRecord.from_dict(backend, data)  # type: ignore[attr-defined]


def _break_key(b: GraphBreak) -> tuple[str, str]:
    # Lines move when code above them is edited: a break is the same by its text and reason.
    return (b.source, b.reason)


def _kernel_key(k: CompiledKernel) -> tuple[str, tuple[str, ...]]:
    # Kernel names carry a counter (`cpp_fused_add_0`): a kernel is the same by its ops.
    return (k.kind, k.ops)


def _kernel_words(k: CompiledKernel) -> str:
    lines = sorted({s.where for s in k.sites})
    at = f" at {', '.join(lines)}" if lines else ""
    return f"`{k.name}` ({' → '.join(k.ops) or 'no ops'}){at}"


def _versions(base: CompiledRecord, now: CompiledRecord) -> list[str]:
    out = []
    for name, old, new in (
        ("torch", base.torch_version, now.torch_version),
        ("triton", base.triton_version, now.triton_version),
    ):
        if old and new and old != new:
            out.append(f"{name} {old} → {new}")
    return out


def compare_compiled(
    base: CompiledRecord, now: CompiledRecord, compiler_change: str = "report"
) -> list[Finding]:
    """One finding per change between the baseline's record and this run's."""
    if compiler_change not in COMPILER_CHANGE:
        raise ValueError(
            f"fusion_compiler_change is {compiler_change!r}: use {' or '.join(COMPILER_CHANGE)}"
        )
    found: list[Finding] = []
    changed = _versions(base, now)
    if changed:
        bucket = "regressions" if compiler_change == "fail" else "changes"
        found.append(
            Finding(
                bucket, f"compiler changed{LOC}: {', '.join(changed)} (backend {now.backend})", None
            )
        )
    old_breaks = Counter(_break_key(b) for b in base.graph_breaks)
    new_breaks = []
    for b in now.graph_breaks:
        if old_breaks[_break_key(b)]:
            old_breaks[_break_key(b)] -= 1
        else:
            new_breaks.append(b)
    for b in new_breaks:
        code = f" (`{b.source}`)" if b.source else ""
        found.append(
            Finding("regressions", f"new graph break{LOC} at {b.where}{code}: {b.reason}", None)
        )
    if now.graph_count > base.graph_count and not new_breaks:
        found.append(
            Finding(
                "regressions",
                f"torch.compile now makes {now.graph_count} "
                f"graphs{LOC} (baseline {base.graph_count})",
                None,
            )
        )
    found += _kernel_findings(base, now)
    if now.recompiles > base.recompiles:
        shapes = "; ".join(", ".join("×".join(map(str, s)) for s in e) for e in now.extra_shapes)
        found.append(
            Finding(
                "regressions",
                f"{_count(now.recompiles, 'recompile')}{LOC} under the extra "
                f"shapes {shapes} (baseline {base.recompiles}): a guard on a "
                "shape or value now fails",
                None,
            )
        )
    return found


def _kernel_findings(base: CompiledRecord, now: CompiledRecord) -> list[Finding]:
    n_old, n_new = len(base.kernels), len(now.kernels)
    if n_old == n_new:
        return []
    old_left = Counter(_kernel_key(k) for k in base.kernels)
    new_left = Counter(_kernel_key(k) for k in now.kernels)
    appeared = [k for k in now.kernels if _take(old_left, _kernel_key(k))]
    gone = [k for k in base.kernels if _take(new_left, _kernel_key(k))]
    if n_new > n_old:
        what = "; ".join(map(_kernel_words, appeared)) or "same ops, split differently"
        return [
            Finding(
                "regressions",
                f"Inductor now emits {_count(n_new, 'kernel')}{LOC} (baseline {n_old}): new {what}",
                None,
            )
        ]
    what = "; ".join(map(_kernel_words, appeared)) or "fewer copies of the same kernels"
    was = "; ".join(map(_kernel_words, gone))
    return [
        Finding(
            "improvements",
            f"Inductor now emits {_count(n_new, 'kernel')}{LOC} (baseline "
            f"{n_old}): {what}" + (f", in place of {was}" if was else ""),
            None,
        )
    ]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _take(left: Counter, key: tuple) -> bool:
    """True when `key` is not (or no longer) in `left`; takes one of it otherwise."""
    if left[key]:
        left[key] -= 1
        return False
    return True
