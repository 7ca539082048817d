"""The gate on a test's compiled record: what changed in ``torch.compile``'s output since
the baseline, as ``Finding``s (``findings.py``) a reviewer reads.

``compiled_data`` takes a test's record (``fusion_core.compiled_record``) as baseline data,
its files rootdir-relative. ``compare_compiled`` reads two ``CompiledRecord``s (baseline,
this run) of one backend; writes nothing. A new
graph break, more graphs, more kernels, a kernel that splits or more recompiles are
regressions, each one message naming where in the user's source and why (a split: what now
lies between its parts, from this run's separations; a recompile: Dynamo's guard failure);
fewer kernels is an improvement; another torch or triton version is "compiler changed", a
regression only when ``fusion_compiler_change`` is ``fail``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from fusion_core import CompiledKernel, CompiledRecord, GraphBreak, OpSite

from .findings import LOC, Finding
from .fixture import build_inputs, build_model
from .options import COMPILER_CHANGE  # what a different torch/triton version does to a test
from .snapshot_build import relative_file


def compiled_device() -> str:
    """Where this machine takes the compiled record, whatever the analysis target: "cuda"
    (Inductor's Triton backend) with a GPU, "cpu" (its C++ backend) without; the record is
    keyed "<device>-inductor"."""
    import torch

    # Keyed like timings: each machine gates its own compiler; a baseline keeps both records.
    return "cuda" if torch.cuda.is_available() else "cpu"


def compiled_data(
    model: Any,
    model_kwargs: Mapping[str, Any] | None,
    inputs: Sequence[Any],
    dtype: Any,
    extra_shapes: Sequence[Sequence[Any]],
    call: str,
    rootdir: Path,
    analysis: Any = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], dict[str, Any]]:
    """({backend: record data}, {backend: agreement}, {backend: the agreement typed, for the
    HTML page}) of torch.compile on the model, files rootdir-relative; `analysis` (ours, of
    the same model) explains splits and gives the agreement of our clusters with Inductor's
    kernels (none without it)."""
    import fusion_core

    device = compiled_device()
    try:
        record = fusion_core.compiled_record(
            build_model(model, model_kwargs),
            *build_inputs(inputs, dtype),
            extra_shapes=[tuple(map(tuple, e)) for e in extra_shapes],
            analysis=analysis,
            device=device,
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
    for recompile in data["recompile_reasons"]:
        if recompile["file"]:
            recompile["file"] = relative_file(recompile["file"], rootdir)
    if not record.agreement:
        return {record.backend: data}, {}, {}
    return ({record.backend: data}, {record.backend: record.agreement},
            {record.backend: record.matched})


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
    # By file, then line as a number (model.py:9 before model.py:10).
    lines = [s.where for s in sorted(k.sites, key=lambda s: (s.file or "", s.line or 0))]
    lines = list(dict.fromkeys(lines))
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
        known = {r.reason for r in base.recompile_reasons}
        guards = [r for r in now.recompile_reasons if r.reason not in known]
        why = "; ".join(f"{r.where}: {r.reason}" for r in guards or now.recompile_reasons)
        found.append(
            Finding(
                "regressions",
                f"{_count(now.recompiles, 'recompile')}{LOC} under the extra "
                f"shapes {shapes} (baseline {base.recompiles}): "
                + (f"Dynamo's guard failed in {why}" if why else "a guard on a shape or "
                   "value now fails"),
                None,
            )
        )
    return found


def _site_key(s: OpSite) -> tuple:
    return (s.op, s.module, s.file, s.line)


def _splits(
    base: CompiledRecord, now: CompiledRecord
) -> list[tuple[CompiledKernel, list[CompiledKernel]]]:
    """Baseline kernels whose ops this run computes in two or more kernels, with those
    kernels. An op is found by its line, or (when lines moved) by op and module alone if
    only one kernel of this run computes it; the first kernel computing it owns it."""
    kernels = [k for k in now.kernels if k.kind == "generated"]
    by_line: dict[tuple, int] = {}
    by_op: dict[tuple[str, str], set[int]] = {}
    for i, k in enumerate(kernels):
        for site in k.sites:
            by_line.setdefault(_site_key(site), i)
            by_op.setdefault((site.op, site.module), set()).add(i)
    out = []
    for old in base.kernels:
        if old.kind != "generated":
            continue
        parts: set[int] = set()
        for site in old.sites:
            if _site_key(site) in by_line:
                parts.add(by_line[_site_key(site)])
            elif len(by_op.get((site.op, site.module), ())) == 1:
                parts |= by_op[(site.op, site.module)]
        if len(parts) >= 2:
            out.append((old, [kernels[i] for i in sorted(parts)]))
    return out


def _split_words(old: CompiledKernel, parts: list[CompiledKernel], now: CompiledRecord) -> str:
    names = {k.name for k in parts}
    reasons = list(dict.fromkeys(s.reason for s in now.separations
                                 if s.before in names and s.after in names))
    why = "; ".join(reasons) or (
        "no op of ours lies between them (they do not feed each other in our graph)"
        if now.separations or now.agreement else "why is not known (no analysis of this run)")
    return f"{_kernel_words(old)} splits into {' and '.join(map(_kernel_words, parts))}: {why}"


def _kernel_findings(base: CompiledRecord, now: CompiledRecord) -> list[Finding]:
    n_old, n_new = len(base.kernels), len(now.kernels)
    splits = _splits(base, now)
    if n_old == n_new and not splits:
        return []
    old_left = Counter(_kernel_key(k) for k in base.kernels)
    new_left = Counter(_kernel_key(k) for k in now.kernels)
    appeared = [k for k in now.kernels if _take(old_left, _kernel_key(k))]
    gone = [k for k in base.kernels if _take(new_left, _kernel_key(k))]
    split_texts = [_split_words(old, parts, now) for old, parts in splits]
    in_splits = {id(k) for _, parts in splits for k in parts}
    if n_new > n_old:
        new = [f"new {_kernel_words(k)}" for k in appeared if id(k) not in in_splits]
        what = "; ".join(split_texts + new) or "same ops, split differently"
        return [
            Finding(
                "regressions",
                f"Inductor now emits {_count(n_new, 'kernel')}{LOC} (baseline {n_old}): {what}",
                None,
            )
        ]
    found = [Finding("regressions", f"an Inductor kernel splits{LOC}: {t}", None)
             for t in split_texts]
    if n_new == n_old:
        return found
    what = "; ".join(map(_kernel_words, appeared)) or "fewer copies of the same kernels"
    was = "; ".join(map(_kernel_words, gone))
    return found + [
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
