"""`python -m fusion_core.agreement`: how our clusters compare with what Inductor fuses.

Reads a model file and example input shapes (the same options as `fusion-advisor`); compiles
the model with torch.compile on CPU, matches Inductor's pointwise/reduction kernels with our
clusters (``fusion_core.inductor``) and prints, per model, how many kernels we match exactly,
partly, or miss, and which of our clusters Inductor does not fuse. ``--json FILE`` writes the
same as a document. A separate entry point so ``fusion-advisor --model ...`` stays one command.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from .cli import (
    OneLineErrors,
    _check_writable,
    _specs,
    model_options,
    one_line_errors,
    parse_model_kwargs,
)
from .inductor.capture import capture
from .inductor.explain import short_name
from .inductor.match import Agreement, match, missed_lines, to_dict
from .pipeline import Analysis, analyze_file
from .report.console import report_console
from .report.json_report import inputs_json, write_json
from .units import counted
from .validate.inputs import graph_inputs


def agreement(analysis: Analysis, seed: int = 0) -> Agreement:
    """Compile `analysis.module` with torch.compile on CPU and match its kernels."""
    inputs = graph_inputs(analysis.graph, analysis.inputs, analysis.module, "cpu", seed)
    return match(analysis, capture(analysis.module, inputs))


def print_agreement(a: Agreement, console: Console) -> None:
    console.print(f"{a.model}: {counted(len(a.kernels), 'Inductor pointwise/reduction kernel')}: "
                  f"{a.count('exact')} exact, {a.count('partial')} partial, "
                  f"{a.count('missed')} missed ({a.matched_fraction:.0%} matched); "
                  f"not counted: {a.single_op_kernels} single-op and "
                  f"{counted(a.layout_kernels, 'layout-only kernel')}", highlight=False)
    for k in a.kernels:
        if k.status == "missed":
            continue
        ours = ", ".join(f"#{i}" for i in k.clusters) or "-"
        lines = ",".join(f"L{x}" for x in k.lines) or "-"
        console.print(f"  {k.status:<8} {short_name(k.kernel)}  ours: {ours}  lines: {lines}",
                      highlight=False, markup=False)
    for line in missed_lines(a):
        console.print(f"  missed   {line}", highlight=False, markup=False)
    for v in a.clusters:
        console.print(f"  cluster {v.cluster}: {v}", highlight=False, markup=False)


def document(a: Agreement, analysis: Analysis) -> dict[str, Any]:
    return {"model": analysis.model_name, "frontend": analysis.graph.frontend,
            "inputs": inputs_json(analysis.inputs),
            "inductor": to_dict(a)}


@click.command(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@model_options
@click.option("--capture", "capture_mode", type=click.Choice(["auto", "fx", "export"]),
              default="auto", show_default=True, help="Graph capture frontend.")
@click.option("--json", "json_path", metavar="FILE", help="Write the comparison as JSON.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def main(model_path: str, model_class: str | None, model_kwargs: str | None,
         shapes: tuple[str, ...],
         dtypes: tuple[str, ...], capture_mode: str, json_path: str | None,
         debug: bool) -> None:
    """Compare our fusion clusters with the kernels Inductor generates on CPU."""
    with one_line_errors(debug, model_path):
        specs = _specs(shapes, dtypes)
        if json_path:
            _check_writable(json_path, "--json")
        analysis = analyze_file(model_path, specs, model_class, capture=capture_mode,
                                model_kwargs=parse_model_kwargs(model_kwargs))
        a = agreement(analysis)
        print_agreement(a, report_console())
        if json_path:
            write_json(json_path, document(a, analysis))


if __name__ == "__main__":
    main()
