"""One `fusion-advisor` run: every result built once and handed on, typed.

Reads the ``Analysis`` the command made and its options; builds, in order, the source
mappings, the kernels (``KernelSet``: each cluster's kernel generated once, identical ones
found), the kernel files of ``--out-dir``, the Inductor comparison, the validation report
and the ``--apply`` edits, and prints each section. Every later step takes the earlier
results as objects: ``--apply`` reads the validation verdicts from the report, not from the
``--json`` dictionary, and writes the very kernels that were validated. The JSON extras are
rendered from the same objects at the end. Kept beside ``cli.py`` so that the command is
only option parsing and error handling.
"""

from __future__ import annotations

import copy
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from .cli_apply import apply_edits
from .errors import FusionAdvisorError
from .pipeline import Analysis
from .report.console import print_analysis
from .report.html.results import PageResults
from .report.progress import StepProgress
from .sourcemap import SourceMapping, map_clusters, print_diffs
from .sourcemap.apply_plan import ApplyPlan, plan_apply
from .sourcemap.preview import ApplyPreview, preview, preview_dict, print_imports
from .triton_support import triton_missing, triton_note
from .units import counted
from .validate.kernels import KernelSet, build_kernels
from .validate.report import print_validation, report_dict
from .validate.types import ValidationReport


def codegen_available() -> bool:
    """fusion_core.codegen is importable and provides the generate/write/load API."""
    try:
        from . import codegen
    except ImportError:
        return False
    return all(hasattr(codegen, n) for n in ("generate", "write_kernels", "load_kernel",
                                             "LoweringError"))


def map_column(mappings: Sequence[SourceMapping]) -> dict[int, str]:
    return {m.cluster_index: m.quality for m in mappings}


def lines_column(mappings: Sequence[SourceMapping]) -> dict[int, str]:
    """The statements each mapping covers (`L15-17`; multi-line statements whole)."""
    return {m.cluster_index: f"L{m.start}" if m.start == m.end else f"L{m.start}-{m.end}"
            for m in mappings if m.start is not None}


def mapping_dict(m: SourceMapping) -> dict[str, Any]:
    lines = None if m.file is None else {"file": m.file, "start": m.start, "end": m.end}
    return {"cluster": m.cluster_index, "map": m.quality.value, "lines": lines,
            "function": m.function, "reason": m.reason,
            # Dedented: a guarded edit's lines keep their indentation relative to the first.
            "replacement": textwrap.dedent(m.replacement).strip() if m.replacement else None,
            "shared_with": list(m.shared_with), "calls": list(m.edit_calls),
            "baked": list(m.baked),
            # Other clusters' ops that other calls run on these lines, through this edit.
            "serves": [{"cluster": s.part.index, "ops": list(s.part.ops), "call": s.call,
                        "site": s.site} for s in m.serves],
            "needs": list(m.needs),
            # Import lines the replacement needs that the file lacks (`import torch.nn.functional
            # as F` for a layer called without its bias).
            "imports": list(m.imports)}


@dataclass
class Run:
    analysis: Analysis
    console: Console
    progress: StepProgress
    mappings: tuple[SourceMapping, ...]
    kernels: KernelSet | None = None  # None: no clusters, or no code generator installed
    written: dict[str, Any] | None = None  # the JSON `kernels` section (--out-dir)
    agreement: Any = None  # inductor.match.Agreement (--vs-inductor)
    report: ValidationReport | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    apply_plan: ApplyPlan | None = None  # `plan`: what --apply would write
    preview: ApplyPreview | None = None  # that plan as the Source edits show it

    @classmethod
    def start(cls, analysis: Analysis, console: Console, progress: StepProgress,
              explain_rejections: bool) -> Run:
        """Map the clusters to source lines and print the analysis table."""
        run = cls(analysis, console, progress, tuple(map_clusters(analysis)))
        print_analysis(analysis, console, explain_rejections=explain_rejections,
                       maps=map_column(run.mappings), lines=lines_column(run.mappings),
                       notes=triton_note())
        return run

    def generate(self) -> None:
        """Every cluster's kernel, once (see ``validate.kernels``)."""
        if not self.analysis.clusters or not codegen_available():
            return
        n = len(self.analysis.clusters)
        with self.progress.step(f"generating kernels for {counted(n, 'cluster')}", n):
            self.kernels = build_kernels(self.analysis)

    def write_kernels(self, out_dir: str | Path) -> None:
        """`--out-dir`: one file per cluster that lowers; the others are reported."""
        if not self.analysis.clusters:
            return
        if self.kernels is None:
            raise FusionAdvisorError("--out-dir needs fusion_core.codegen, which this install "
                                     "lacks (reinstall fusion-advisor)")
        from .codegen import write_kernels

        kernels = [self.kernels.kernels[i] for i in sorted(self.kernels.kernels)]
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        write_kernels(kernels, out_dir)
        names = [k.filename for k in kernels]
        if names:
            self.console.print(f"Wrote {counted(len(names), 'kernel')} to {out_dir}: "
                               f"{', '.join(names)}", highlight=False)
        skipped = [{"cluster": i, "reason": why} for i, why in sorted(self.kernels.failed.items())]
        for s in skipped:
            self.console.print(f"cluster {s['cluster']}: no kernel written, it cannot be "
                               f"lowered: {s['reason']}", highlight=False, markup=False)
        self.written = {"out_dir": str(out_dir), "files": names, "skipped": skipped}

    def page_results(self) -> PageResults:
        """The results above as the HTML page takes them (`--html`)."""
        return PageResults(self.mappings, self.kernels, self.report, self.agreement)

    def compare_inductor(self) -> None:
        """`--vs-inductor`: compile with torch.compile (on the GPU when there is one), match."""
        from .inductor.capture import capture
        from .inductor.match import match
        from .validate.inputs import graph_inputs

        device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            with self.progress.step("comparing with torch.compile", 1):
                model = copy.deepcopy(self.analysis.module).to(device)
                inputs = graph_inputs(self.analysis.graph, self.analysis.inputs, model,
                                      device, seed=0)
                self.agreement = match(self.analysis, capture(model, inputs))
        except FusionAdvisorError as e:  # the analysis stands without the comparison
            self.console.print(f"Inductor comparison skipped: {e}", highlight=False,
                               markup=False)

    def validate(self, peak_gbps: float | None, vs_inductor: bool, timing: bool = True) -> None:
        """The four gates on the kernels generated above (gates 1 and 2 only with
        `timing=False`); prints Numerics or Measured."""
        if not self.analysis.clusters:
            return
        if self.kernels is None:
            self.console.print()
            self.console.print("Numerics: skipped (no code generator in this install)",
                               highlight=False)
            return
        if triton_missing() is not None:  # the table's header line said why and the fix
            self.console.print()
            self.console.print("Numerics: skipped, triton is not installed", highlight=False)
            for c in self.analysis.clusters:
                self.console.print(f"cluster {c.index}: skipped: triton not installed",
                                   highlight=False)
            return
        from .validate.run import validate

        self.report = validate(self.analysis, kernels=self.kernels, peak_gbps=peak_gbps,
                               inductor=vs_inductor, progress=self.progress, timing=timing)
        print_validation(self.report, self.console, inductor=vs_inductor)

    def print_agreement(self) -> None:
        if self.agreement is None:
            return
        a, console = self.agreement, self.console
        console.print()
        console.print(f"Inductor (torch.compile): {counted(len(a.kernels), 'kernel')} fusing "
                      f"pointwise/reduction ops: {a.count('exact')} same as ours, "
                      f"{a.count('partial')} partly, {a.count('missed')} missed", highlight=False)
        for v in a.clusters:
            console.print(f"cluster {v.cluster}: {v}", highlight=False, markup=False)
        from .inductor.match import missed_lines

        for line in missed_lines(a):  # one line per (ops, reason), names shortened
            console.print(f"  not proposed by us: {line}", highlight=False, markup=False)

    def plan(self, model_path: str | Path) -> ApplyPlan:
        """What `--apply` would write (made once: the preview and --apply share it)."""
        if self.apply_plan is None:
            verdicts = {} if self.report is None else {
                r.cluster: (r.usable, r.status) for r in self.report.results}
            kernels = {} if self.kernels is None else self.kernels.kernels
            self.apply_plan = plan_apply(self.analysis, self.mappings, model_path, kernels,
                                         verdicts)
        return self.apply_plan

    def print_diffs(self, model_path: str | Path) -> None:
        """The Source edits, with what --apply would add at the top and what it would skip."""
        # Without kernels, or triton to check them, --apply writes nothing and says why.
        if self.kernels is not None and triton_missing() is None:
            self.preview = preview(self.plan(model_path), self.mappings)
        skipped = dict(self.preview.skipped) if self.preview else {}
        print_diffs(self.mappings, self.console, skipped)
        if self.preview is not None and any(m.exact for m in self.mappings):
            print_imports(self.preview, self.console)

    def json_extras(self) -> dict[str, Any]:
        """The `--json` sections after the analysis, from the results above."""
        extra: dict[str, Any] = {}
        if self.written is not None:
            extra["kernels"] = self.written
        if self.agreement is not None:
            from .inductor.match import to_dict

            extra["inductor"] = to_dict(self.agreement)
        if self.report is not None:
            extra["validation"] = report_dict(self.report)
        extra["source_map"] = [mapping_dict(m) for m in self.mappings]
        if self.preview is not None:
            extra["apply"] = preview_dict(self.preview)
        return extra

    def apply(self, model_path: str | Path, assume_yes: bool) -> None:
        """`--apply`: the validated kernels, where the report says they are usable."""
        apply_edits(self.plan(model_path), self.analysis, self.console, assume_yes)
