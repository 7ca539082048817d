"""`fusion-advisor`: analyze a model file and print what fuses, why, and what it saves."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
import torch
from rich.console import Console

from . import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
from .cli_apply import check_apply_flags
from .cli_run import Run
from .errors import FusionAdvisorError, InputSpecError
from .ir.shapes import DTYPES, InputSpec
from .pipeline import analyze_file
from .report.json_report import to_document, write_json
from .report.progress import for_stderr
from .validate.run import use_interpreter_without_cuda


def _specs(shapes: tuple[str, ...], dtypes: tuple[str, ...]) -> list[InputSpec]:
    if not shapes:
        raise InputSpecError("missing --input-shape: give the example input's shape, "
                             "e.g. --input-shape 16384,1024")
    if len(dtypes) > 1 and len(dtypes) != len(shapes):
        raise InputSpecError(f"{len(dtypes)} --dtype for {len(shapes)} --input-shape: give "
                             "one --dtype for all inputs or one per input")
    dtypes = dtypes or ("float32",)
    per_input = dtypes if len(dtypes) == len(shapes) else dtypes * len(shapes)
    return [InputSpec.parse(s, d) for s, d in zip(shapes, per_input, strict=True)]


def _check_writable(path: str, flag: str) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK) or Path(path).is_dir():
        raise FusionAdvisorError(f"cannot write {flag} {path}: its folder does not exist or "
                                 "is not writable (choose another path)")


def model_options(command):
    """The options that name a model and its example inputs (shared with `agreement`)."""
    for option in reversed((
        click.option("--model", "model_path", required=True, metavar="PATH",
                     help="Python file defining the nn.Module to analyze."),
        click.option("--model-class", metavar="NAME",
                     help="Class to analyze when the file has several."),
        click.option("--input-shape", "shapes", multiple=True, metavar="N,M,...",
                     help="Example input shape; repeat for multi-input models."),
        click.option("--dtype", "dtypes", multiple=True, metavar="DTYPE",
                     help=f"Input dtype ({', '.join(DTYPES)}); once for all inputs or once "
                          "per input."),
    )):
        command = option(command)
    return command


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@model_options
@click.option("--out-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Where generated kernels are written.")
@click.option("--explain-rejections", is_flag=True,
              help="List every candidate that failed a legality check, and why.")
@click.option("--json", "json_path", metavar="FILE", help="Write machine-readable results.")
@click.option("--capture", type=click.Choice(["auto", "fx", "export"]), default="auto",
              show_default=True,
              help="Graph capture: FX symbolic tracing, torch.export, or FX then export.")
@click.option("--peak-gbps", type=click.FloatRange(min=0, min_open=True), metavar="GB/S",
              help="Peak memory bandwidth to compare against (default: read from the GPU).")
@click.option("--vs-inductor", is_flag=True,
              help="Compare each cluster with the kernels torch.compile generates.")
@click.option("--apply", "apply_edits", is_flag=True,
              help="Rewrite the model file with the exact, verified clusters (asks first).")
@click.option("--yes", "assume_yes", is_flag=True, help="With --apply: apply without asking.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(model_path: str, model_class: str | None, shapes: tuple[str, ...],
        dtypes: tuple[str, ...], out_dir: str | None, explain_rejections: bool,
        json_path: str | None, capture: str, peak_gbps: float | None, vs_inductor: bool,
        apply_edits: bool, assume_yes: bool, debug: bool) -> None:
    """Analyze which ops in a PyTorch model fuse, why, and what fusion saves."""
    use_interpreter_without_cuda()  # before any generated kernel is decorated
    try:
        specs = _specs(shapes, dtypes)
        if json_path:
            _check_writable(json_path, "--json")
        check_apply_flags(apply_edits, assume_yes)
        # A model built with no arguments has random weights: seeded, the same command
        # reports the same numerics errors every time.
        torch.manual_seed(0)
        analysis = analyze_file(model_path, specs, model_class, capture=capture)
        # Piped output keeps the table on one line per row instead of 80 columns.
        console = Console(width=None if sys.stdout.isatty() else 140)
        run = Run.start(analysis, console, for_stderr(len(analysis.clusters)),
                        explain_rejections)
        run.generate()
        if out_dir:
            run.write_kernels(out_dir)
        if vs_inductor:
            run.compare_inductor()
        run.validate(peak_gbps, vs_inductor)
        run.print_agreement()
        run.print_diffs()
        if json_path:
            write_json(json_path, to_document(analysis, run.json_extras()))
            console.print(f"Wrote {json_path}", highlight=False)
        if apply_edits:
            run.apply(model_path, assume_yes)
    except FusionAdvisorError as e:
        if debug:
            raise
        click.echo(f"error: {e}", err=True)
        sys.exit(2)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
