"""`fusion-advisor`: analyze a model file and print what fuses, why, and what it saves."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import torch

from . import (
    __version__,
    _interpret,  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
)
from .build import exit_status
from .cli_apply import check_apply_flags
from .cli_run import Run
from .codegen.kernel import GENERATED_MARK, foreign_files
from .errors import Fix, FusionAdvisorError, InputSpecError
from .ir.shapes import DTYPES, InputSpec
from .load import user_exit_frame
from .pipeline import analyze_file
from .report.console import report_console
from .report.html import write_html
from .report.json_report import to_document, write_json
from .report.progress import for_stderr
from .report.units import short_path
from .sourcemap.apply import ApplyError
from .triton_support import INSTALL_HINT, triton_missing
from .validate.run import use_interpreter_without_cuda


def analysis_device() -> str | None:
    """The device the CLI analyses for: the GPU its kernels are validated and timed on,
    when there is one (else where the parameters are). Tests replace it to see a GPU
    target's edits on a CPU, whose interpreter still validates them."""
    return "cuda" if torch.cuda.is_available() else None


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


def parse_model_kwargs(text: str | None) -> dict[str, Any]:
    """--model-kwargs: a JSON object of the constructor's (or factory's) keyword arguments."""
    if text is None:
        return {}
    example = """'{"dim": 64, "act": "gelu"}'"""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise FusionAdvisorError(f"--model-kwargs is not valid JSON ({e.msg} at column "
                                 f"{e.colno}): write a JSON object, e.g. --model-kwargs "
                                 f"{example}, quoted for the shell") from None
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(value), "a number")
        raise FusionAdvisorError(f"--model-kwargs must be a JSON object of keyword arguments, "
                                 f"got {kind}: e.g. --model-kwargs {example}")
    return value


def _check_writable(path: str, flag: str) -> None:
    target = Path(path)
    if target.is_dir():
        raise FusionAdvisorError(f"cannot write {flag} {path}: it is a folder (give a file "
                                 f"in it, e.g. {flag} {target / ('analysis' + _SUFFIX[flag])})")
    # `--json model.py` (a slip for `--model`) would replace the user's source.
    if target.suffix == ".py" and target.exists():
        raise FusionAdvisorError(f"cannot write {flag} {path}: it is Python source, which the "
                                 f"report would replace (give the report a file of its own, "
                                 f"e.g. {flag} {target.with_suffix(_SUFFIX[flag])})")
    parent = target.resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise FusionAdvisorError(f"cannot write {flag} {path}: its folder does not exist or "
                                 "is not writable (choose another path)")


_SUFFIX = {"--json": ".json", "--html": ".html"}


def _check_out_dir(path: str) -> None:
    """--out-dir must be a folder we can write, or one we can create: checked before the
    analysis so a long run does not end on a permission error."""
    target = Path(path).resolve()
    existing = next(p for p in (target, *target.parents) if p.exists())
    if existing == target and not target.is_dir():
        raise FusionAdvisorError(f"cannot write --out-dir {path}: it is a file, not a folder "
                                 "(choose another path)")
    if not existing.is_dir():
        raise FusionAdvisorError(f"cannot create --out-dir {path}: {existing} is a file, not a "
                                 "folder (choose another path)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise FusionAdvisorError(f"cannot write --out-dir {path}: {existing} is not writable "
                                 "(choose another folder or fix its permissions)")


def _check_foreign_files(out_dir: str, clusters: list[int], force: bool) -> None:
    """Never replace a file of the user's in --out-dir without being told to."""
    foreign = [] if force else foreign_files(out_dir, clusters)
    if foreign:
        names = ", ".join(p.name for p in foreign)
        raise FusionAdvisorError(
            f"--out-dir {out_dir} already holds {names}, which fusion-advisor did not write "
            f"(no '{GENERATED_MARK}' first line): move it away, choose another --out-dir, or "
            "pass --force to overwrite")


# The fixes fusion_core leaves to its caller (errors.Fix), in the command's own terms.
FIXES = {Fix.MODEL_FILE: "pass --model PATH to a .py file (or FILE.py:NAME, or "
                         "package.module:NAME)",
         Fix.MODEL_CLASS: "pick one with --model-class NAME",
         Fix.SHAPE_TEXT: "give --input-shape positive integers separated by commas, e.g. "
                         "--input-shape 16384,1024 (a memory order may follow a colon: "
                         "8,64,56,56:channels_last)",
         Fix.INPUTS: "check --input-shape and --dtype",
         Fix.INPUT_COUNT: "repeat --input-shape once per input",
         Fix.EXPORT: "try torch.export instead (--capture export)",
         Fix.MODEL_ARGS: "give them defaults, pass them as JSON with --model-kwargs "
                         "'{example_json}', or name a function that builds the model with "
                         "--model FILE.py:FUNCTION",
         Fix.MODEL_KWARGS: "check the names given in --model-kwargs",
         Fix.MODEL_VALUES: "check the values given with --model-kwargs (if they are right, the "
                           "constructor)",
         Fix.MODEL_DEFAULTS: "it ran with {defaults}: pass others with "
                             "--model-kwargs '{example_json}', or fix the constructor",
         Fix.CONSTRUCTOR_CODE: "a bug in the constructor, not the values given with "
                               "--model-kwargs: fix the constructor"}


@contextlib.contextmanager
def one_line_errors(debug: bool, model_path: str) -> Iterator[None]:
    """Bad input, a model that exits while we run it, or a write the checks before the run
    could not foresee (a full disk, /proc): one line on stderr and exit status 2."""
    try:
        yield
        return
    except SystemExit as e:
        where = user_exit_frame(e)
        # Only an exit from the user's code (the model's forward, or a module of theirs it
        # calls); rich ends a run whose stdout pipe closed (`| head`) with SystemExit(1),
        # which stays as it is.
        if debug or where is None:
            raise
        message = (f"{short_path(where)} called sys.exit() (status {exit_status(e)}) while "
                   "fusion-advisor ran the model: remove the exit from its forward (or the "
                   "code it calls)")
    except OSError as e:
        if debug or isinstance(e, BrokenPipeError):  # the reader went away: nothing to say
            raise
        where = f"{e.filename}: " if e.filename else ""
        message = (f"{where}{e.strerror or e} (check that path, its permissions and free "
                   "space; --debug shows where it failed)")
    except FusionAdvisorError as e:
        if debug:
            raise
        message = e.worded(FIXES)
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


class _OneLineUsageError(click.UsageError):
    """click's option errors as one line like ours (no usage block)."""

    def show(self, file=None) -> None:
        where = self.ctx.command_path if self.ctx else "the command"
        click.echo(f"error: {self.format_message()} (see {where} --help)", err=True)


class OneLineErrors(click.Command):
    """A command whose option errors print one line, exit code 2."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            raise _OneLineUsageError(e.format_message(), e.ctx) from None


def model_options(command):
    """The options that name a model and its example inputs (shared with `agreement`)."""
    for option in reversed((
        click.option("--model", "model_path", required=True, metavar="PATH[:NAME]",
                     help="The model: a .py file defining the nn.Module, FILE.py:NAME or "
                          "package.module:NAME, NAME an nn.Module class or a function "
                          "returning the model (package.module is imported from the "
                          "current folder; a file inside a package is imported as part of "
                          "it)."),
        click.option("--model-class", metavar="NAME",
                     help="Class to analyze when the file has several (as FILE.py:NAME)."),
        click.option("--model-kwargs", "model_kwargs", metavar="JSON",
                     help="""Keyword arguments for the class or function, as a JSON """
                          """object, e.g. '{"dim": 64}'."""),
        click.option("--input-shape", "shapes", multiple=True, metavar="N,M,...[:ORDER]",
                     help="Example input shape; repeat for multi-input models. A suffix "
                          "gives its memory layout, e.g. 8,64,56,56:channels_last "
                          "(channels_last_3d for 5-d; default contiguous)."),
        click.option("--dtype", "dtypes", multiple=True, metavar="DTYPE",
                     help=f"Input dtype ({', '.join(DTYPES)}); once for all inputs or once "
                          "per input."),
    )):
        command = option(command)
    return command


@click.command(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, message="fusion-advisor %(version)s")
@model_options
@click.option("--out-dir", metavar="DIR", help="Where generated kernels are written.")
@click.option("--force", is_flag=True,
              help="Let --out-dir overwrite files fusion-advisor did not generate.")
@click.option("--explain-rejections", is_flag=True,
              help="List every candidate that failed a legality check, and why.")
@click.option("--json", "json_path", metavar="FILE", help="Write machine-readable results.")
@click.option("--html", "html_path", metavar="FILE",
              help="Write a self-contained HTML page: the graph, its clusters and kernels.")
@click.option("--capture", type=click.Choice(["auto", "fx", "export"]), default="auto",
              show_default=True,
              help="Graph capture: FX symbolic tracing, torch.export, or FX then export.")
@click.option("--peak-gbps", type=click.FloatRange(min=0, min_open=True), metavar="GB/S",
              help="Peak memory bandwidth to compare against (default: read from the GPU).")
@click.option("--vs-inductor", is_flag=True,
              help="Compare each cluster with the kernels torch.compile generates; on a CUDA "
                   "GPU also time the whole model under torch.compile (seconds to compile).")
@click.option("--no-timing", is_flag=True,
              help="On a CUDA GPU: check numerics only, skip the timings (seconds per cluster).")
@click.option("--apply", "apply_edits", is_flag=True,
              help="Rewrite the model file with the exact, verified clusters (asks first).")
@click.option("--yes", "assume_yes", is_flag=True, help="With --apply: apply without asking.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(model_path: str, model_class: str | None, model_kwargs: str | None,
        shapes: tuple[str, ...],
        dtypes: tuple[str, ...], out_dir: str | None, force: bool, explain_rejections: bool,
        json_path: str | None, html_path: str | None, capture: str, peak_gbps: float | None,
        vs_inductor: bool, no_timing: bool, apply_edits: bool, assume_yes: bool,
        debug: bool) -> None:
    """Analyze which ops in a PyTorch model fuse, why, and what fusion saves."""
    use_interpreter_without_cuda()  # before any generated kernel is decorated
    with one_line_errors(debug, model_path):
        specs = _specs(shapes, dtypes)
        kwargs = parse_model_kwargs(model_kwargs)
        if json_path:
            _check_writable(json_path, "--json")
        if html_path:
            _check_writable(html_path, "--html")
        if out_dir:
            _check_out_dir(out_dir)
        elif force:
            raise FusionAdvisorError("--force lets --out-dir overwrite files: pass --out-dir "
                                     "too")
        if no_timing and peak_gbps:
            raise FusionAdvisorError("--peak-gbps is compared with measured bandwidth, which "
                                     "--no-timing skips: drop one of them")
        check_apply_flags(apply_edits, assume_yes)
        if apply_edits and triton_missing() is not None:
            raise ApplyError(f"--apply writes only kernels it has verified, and triton is not "
                             f"installed ({triton_missing()}): {INSTALL_HINT}")
        # A model built with no arguments has random weights: seeded, the same command
        # reports the same numerics errors every time.
        torch.manual_seed(0)
        # Kernels are validated, timed and compared with Inductor on the GPU when there is
        # one: the analysis is made for that device (conv biases differ, ir/conv_bias.py).
        analysis = analyze_file(model_path, specs, model_class, capture=capture,
                                device=analysis_device(),
                                model_kwargs=kwargs)
        if out_dir:
            _check_foreign_files(out_dir, [c.index for c in analysis.clusters], force)
        console = report_console()
        run = Run.start(analysis, console, for_stderr(len(analysis.clusters), vs_inductor),
                        explain_rejections)
        run.generate()
        if out_dir:
            run.write_kernels(out_dir)
        if vs_inductor:
            run.compare_inductor()
        run.validate(peak_gbps, vs_inductor, timing=not no_timing)
        run.print_agreement()
        # The file the model came from (--model may name a module, or FILE.py:NAME).
        source_path = analysis.source.path if analysis.source else model_path
        run.print_diffs(source_path)
        if json_path:
            write_json(json_path, to_document(analysis, run.json_extras()))
            console.print(f"Wrote {json_path}", highlight=False)
        if html_path:
            write_html(html_path, analysis, run.page_results())
            console.print(f"Wrote {html_path}", highlight=False)
        if apply_edits:
            run.apply(source_path, assume_yes)

def main() -> None:
    cli()


if __name__ == "__main__":
    main()
