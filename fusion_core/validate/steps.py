"""The CLI's steps after analysis: write kernels, run the gates, compare with Inductor.

Reads an ``Analysis`` and the CLI options (``--out-dir``, ``--peak-gbps``, ``--vs-inductor``);
prints the Numerics (CPU) or Measured (GPU) section and the Inductor verdicts; returns the
extra JSON fields (``validation``, ``inductor``, ``kernels``). Kept out of ``cli.py`` so the
command stays a thin layer over the passes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from ..errors import FusionAdvisorError
from ..pipeline import Analysis
from ..triton_support import triton_missing
from .inputs import random_inputs
from .report import print_validation, report_dict
from .run import validate
from .types import ValidationReport


def _codegen():
    """fusion_core.codegen when it provides the generate/write/load API, else None."""
    try:
        from .. import codegen
    except ImportError:
        return None
    needed = ("generate", "write_kernels", "load_kernel", "LoweringError")
    return codegen if all(hasattr(codegen, n) for n in needed) else None


def write_kernels(analysis: Analysis, out_dir: str | Path, console: Console) -> dict[str, Any]:
    """Write one kernel file per cluster that lowers; report and skip the others.

    Returns the JSON `kernels` section: `out_dir`, `files`, and `skipped` (cluster, reason).
    """
    codegen = _codegen()
    if codegen is None:
        raise FusionAdvisorError("--out-dir needs fusion_core.codegen, which this install lacks "
                                 "(reinstall fusion-advisor)")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    kernels, skipped = [], []
    for c in analysis.clusters:
        try:
            kernels.append(codegen.generate(analysis, c))
        except codegen.LoweringError as e:  # one cluster's limit must not cost the others
            skipped.append({"cluster": c.index, "reason": _one_line(e)})
    codegen.write_kernels(kernels, out_dir)
    names = [k.filename for k in kernels]
    if names:
        console.print(f"Wrote {len(names)} kernel(s) to {out_dir}: {', '.join(names)}",
                      highlight=False)
    for s in skipped:
        console.print(f"cluster {s['cluster']}: no kernel written, it cannot be lowered: "
                      f"{s['reason']}", highlight=False, markup=False)
    return {"out_dir": str(out_dir), "files": names, "skipped": skipped}


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def inductor_agreement(analysis: Analysis):
    """Compile the model with torch.compile (on the GPU when there is one) and match."""
    from ..inductor.capture import capture
    from ..inductor.match import match

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = copy.deepcopy(analysis.module).to(device)
    inputs = random_inputs(analysis.inputs, model, device, seed=0)
    return match(analysis, capture(model, inputs))


def print_agreement(agreement, console: Console) -> None:
    console.print()
    a = agreement
    console.print(f"Inductor (torch.compile): {len(a.kernels)} kernel(s) fusing pointwise/"
                  f"reduction ops: {a.count('exact')} same as ours, {a.count('partial')} partly, "
                  f"{a.count('missed')} missed", highlight=False)
    for v in a.clusters:
        console.print(f"cluster {v.cluster}: {v}", highlight=False, markup=False)
    for k in a.kernels:
        if k.status == "missed":
            lines = ",".join(f"L{x}" for x in k.lines) or "no source line"
            console.print(f"  not proposed by us: {k.kernel} ({' → '.join(k.ops)}; {lines})",
                          highlight=False, markup=False)


def after_analysis(analysis: Analysis, console: Console, out_dir: str | None,
                   peak_gbps: float | None, vs_inductor: bool) -> dict[str, Any]:
    """Run the post-analysis steps the options ask for; return the JSON extras."""
    extra: dict[str, Any] = {}
    if out_dir and analysis.clusters:
        extra["kernels"] = write_kernels(analysis, out_dir, console)
    agreement = None
    if vs_inductor:
        from ..inductor.match import to_dict

        try:
            agreement = inductor_agreement(analysis)
            extra["inductor"] = to_dict(agreement)
        except FusionAdvisorError as e:  # the analysis stands without the comparison
            console.print(f"Inductor comparison skipped: {e}", highlight=False, markup=False)
    if analysis.clusters:
        report = _validate(analysis, console, out_dir, peak_gbps, vs_inductor)
        if report is not None:
            extra["validation"] = report_dict(report)
    if agreement is not None:
        print_agreement(agreement, console)
    return extra


def print_triton_missing(analysis: Analysis, console: Console) -> None:
    """The Numerics section of a run without Triton (the header said why and the fix)."""
    console.print()
    console.print("Numerics: skipped, triton is not installed", highlight=False)
    for c in analysis.clusters:
        console.print(f"cluster {c.index}: skipped: triton not installed", highlight=False)


def _validate(analysis: Analysis, console: Console, out_dir: str | None,
              peak_gbps: float | None, vs_inductor: bool) -> ValidationReport | None:
    if _codegen() is None:
        console.print()
        console.print("Numerics: skipped (no code generator in this install)", highlight=False)
        return None
    if triton_missing() is not None:
        print_triton_missing(analysis, console)
        return None
    report = validate(analysis, workdir=out_dir, peak_gbps=peak_gbps, inductor=vs_inductor)
    print_validation(report, console, inductor=vs_inductor)
    return report
