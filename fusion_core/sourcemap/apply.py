"""`--apply`: rewrite the model's files with the exact, verified clusters, or change nothing.

Reads an ``ApplyPlan`` (``apply_plan.py`` picks the edits, file by file, and says why each
other cluster is left alone) and the ``Analysis`` it was made from; writes each edited file,
its backup and its sibling ``<stem>_fused/`` package. ``apply`` asks for confirmation (or
takes ``--yes``), checks each file's hash against the one its mapping was made from, keeps a
backup of each, writes the packages and the rewritten files atomically (edits bottom-up, so
earlier line numbers stay valid), then imports the rewritten model and runs it against the
original on fresh inputs; on any mismatch or error it restores every file and says why.
"""

from __future__ import annotations

import ast
import copy
import shutil
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console

from ..errors import FusionAdvisorError
from ..fileio import write_atomic
from ..ir.trace import is_library_file
from ..load import import_model_file, instantiate, package_module, pick_factory
from ..pipeline import Analysis
from ..report.units import short_path
from ..source_trees import parse_source
from ..units import counted, plural
from .apply_plan import ApplyPlan, FilePlan
from .comments import leading_comments
from .diff import print_text_diff
from .fused import package_files, package_name
from .insert import added_imports, refusal
from .pysource import physical_lines, sha256
from .source_mapping import SourceMapping

_OUR_PACKAGE = Path(__file__).resolve().parents[1]  # fusion_core: never re-imported


class ApplyError(FusionAdvisorError):
    """--apply refused or rolled back; the model's files are as they were."""


def no_terminal() -> ApplyError:
    return ApplyError("--apply asks before writing, but stdin is not a terminal: pass --yes to "
                      "apply without asking")


@dataclass(frozen=True)
class AppliedFile:
    path: Path
    backup: Path  # the original's bytes
    package: Path  # the sibling `<stem>_fused/` its new lines import


@dataclass(frozen=True)
class ApplyResult:
    files: tuple[AppliedFile, ...]  # as the plan orders them: the model file first
    clusters: tuple[int, ...]
    new_lines: tuple[tuple[int, int], ...]  # (cluster, line of its call in its new file)
    max_abs_err: float | None


def _call_offset(m: SourceMapping) -> int:
    """The line of `m`'s replacement that calls its kernel, counted from its first: past
    leading comments, and past the `if` a guarded edit starts with."""
    lines = m.replacement.splitlines() if m.replacement else []
    # its own kernel's call: an `if` / `elif` edit calls another kernel first
    calls = tuple(f"{c}(" for c in ((m.call,) if m.call else m.edit_calls))
    hit = next((i for i, line in enumerate(lines) if calls and any(c in line for c in calls)),
               None)
    return hit if hit is not None else leading_comments(m.replacement or "")


def rewrite(text: str, plan: FilePlan, newline: str = "\n") -> tuple[str, dict[int, int]]:
    """The new file text and, per edit's first cluster, the line its call lands on."""
    lines = physical_lines(text)
    tree = parse_source(text)
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
        (a.asname or a.name).split(".")[0] for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    clash = sorted(taken & {o.call for o in plan.ops})
    if clash:
        raise ApplyError(f"{short_path(str(plan.path))} already uses the name `{clash[0]}`: "
                         "rename it before --apply")
    for m in sorted(plan.edits, key=lambda e: e.start, reverse=True):  # bottom-up
        if "".join(lines[m.start - 1:m.end]) != m.original:
            raise ApplyError(f"{short_path(str(plan.path))}:{m.start} no longer holds the "
                             "analyzed code: run fusion-advisor again before --apply")
        # A replacement may span lines (`x, fused = cluster2(...)` above `h = self.up(fused)`).
        lines[m.start - 1:m.end] = [newline.join(m.replacement.splitlines()) + newline]
    at, block = added_imports(tree, plan, newline)
    lines[at:at] = [block]
    added = block.count(newline)
    new_lines, removed = {}, 0
    for m in plan.edits:
        for i in (m.cluster_index, *m.shared_with):
            new_lines[i] = (m.start - removed + _call_offset(m)
                            + (added if m.start > at else 0))
        removed += m.end - m.start - (len(m.replacement.splitlines()) - 1)
    return "".join(lines), new_lines


def _backup_path(path: Path) -> Path:
    candidate = path.with_name(path.name + ".bak")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak{n}")
        n += 1
    return candidate


def _read_checked(plan: FilePlan) -> bytes:
    try:
        data = plan.path.read_bytes()
    except OSError as e:
        raise ApplyError(f"cannot read {short_path(str(plan.path))} again: {e.strerror or e} "
                         "(check it is still there and readable)") from e
    if plan.digest is None or sha256(data) != plan.digest:
        raise ApplyError(f"{short_path(str(plan.path))} changed since it was analyzed: run "
                         "fusion-advisor again before --apply")
    return data


def forget_package(package: str) -> None:
    """Drop a cached copy of the package so the one just written is imported."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


def _tensors(out: object) -> list[torch.Tensor]:
    """Every tensor in a model output (a tensor, tuple, dict or dataclass-like tree)."""
    from torch.utils._pytree import tree_leaves

    if hasattr(out, "to_tuple"):  # transformers ModelOutput
        out = out.to_tuple()
    return [x for x in tree_leaves(out) if isinstance(x, torch.Tensor)]


def _user_module_file(module: object) -> Path | None:
    """The file of a module of the user's (not an installed library's, not ours)."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or is_library_file(file) or Path(file).resolve().is_relative_to(
            _OUR_PACKAGE):
        return None
    return Path(file).resolve()


def _holds(module: object, names: set[str]) -> bool:
    """Whether the module keeps one of the modules `names`, or a class or function defined
    in one (`pkg.layers` as a package's attribute, `from layers import Block` re-exported)."""
    for value in list(vars(module).values()):
        try:
            held = value.__name__ if isinstance(value, types.ModuleType) else getattr(
                value, "__module__", None)
        except Exception:  # noqa: BLE001 - an object whose attributes raise holds nothing of ours
            continue
        if held in names:
            return True
    return False


def _forget_modules_of(paths: set[Path]) -> None:
    """Drop the imported modules of `paths`, and every module of the user's that keeps one of
    them or what one defines, again and again: importing the model file then runs the text
    now in those files (a helper the model reaches through its package or another module
    would stay cached else)."""
    user = {name: m for name, m in list(sys.modules.items())
            if m is not None and _user_module_file(m) is not None}
    gone = {name for name, m in user.items() if _user_module_file(m) in paths}
    while gone:
        more = {name for name, m in user.items() if name not in gone and _holds(m, gone)}
        if not more:
            break
        gone |= more
    for name in gone:
        sys.modules.pop(name, None)


def verify(analysis: Analysis, path: Path, others: tuple[Path, ...] = ()) -> float | None:
    """Run the rewritten model against the original on fresh inputs; return max abs err.

    `others`: the other files --apply rewrote, which the model file imports."""
    from ..validate.inputs import graph_inputs, reduced_specs
    from ..validate.numerics import MODEL_TOL, compare

    for p in (path, *others):
        fused = package_name(p.stem)
        forget_package(fused)
        inside = package_module(p)  # a file in a package imports its fused package relatively
        if inside is not None:
            forget_package(f"{inside[1].rpartition('.')[0]}.{fused}")
    _forget_modules_of(set(others))
    module = import_model_file(path)
    # Built as the analyzed model was: the same class or factory, the same keyword arguments.
    source = analysis.source
    name = source.factory if source and source.factory else type(analysis.module).__name__
    model = instantiate(pick_factory(module, path, name), path,
                        dict(source.kwargs) if source else None)
    # The analysis may have cast the model to the input dtype (`--dtype bfloat16`).
    dtype = next((p.dtype for p in analysis.module.parameters() if p.is_floating_point()), None)
    if dtype is not None:
        model = model.to(dtype)
    model.load_state_dict(analysis.module.state_dict())
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    # Under the CPU interpreter every program costs ~2 ms: check at the reduced batch.
    specs = analysis.inputs if cuda else reduced_specs(analysis)
    # integer masks drawn 0 or 1 and divisors from 1, as validation draws them
    # (`(1 - mask) * finfo.min` is inf for a mask of 15, and both models' NaN compare as nothing)
    inputs = graph_inputs(analysis.graph, specs, analysis.module, device, seed=20261202)
    # A copy each: a forward writing into its input (`x *= 2.0`) must not feed the other
    # model its result; what each wrote there is compared too.
    mine, theirs = [t.clone() for t in inputs], [t.clone() for t in inputs]
    original = copy.deepcopy(analysis.module).to(device) if cuda else analysis.module
    with torch.no_grad():
        want = _tensors(original(*theirs))
        got = _tensors(model.to(device).eval()(*mine))
    ok, err, detail = compare(got, want, MODEL_TOL)
    changed = next((i for i, (a, e) in enumerate(zip(got, want, strict=False))
                    if isinstance(a, torch.Tensor) and a.dtype != e.dtype), None)
    if ok and changed is not None:  # numbers alike, yet a caller would see another dtype
        ok, detail = False, (f"output {changed} is "
                             f"{str(got[changed].dtype).removeprefix('torch.')}, the original's "
                             f"{str(want[changed].dtype).removeprefix('torch.')}")
    if ok:
        ok, _, wrote = compare(mine, theirs, MODEL_TOL)
        detail = wrote.replace("output", "what it writes into input", 1)
    if not ok:
        raise ApplyError(f"its output differs from the original's: {detail}")
    return err


@dataclass(frozen=True)
class _Rewrite:
    """One file about to be rewritten: its plan, text before and after, its package."""

    plan: FilePlan
    text: str
    new_text: str
    new_lines: dict[int, int]
    package: Path


def _prepare(plan: FilePlan) -> _Rewrite:
    """Read and check one file, and make its new text; raise ApplyError naming the file."""
    where = short_path(str(plan.path))
    text = _read_checked(plan).decode("utf-8")
    if (refused := refusal(text)) is not None:
        raise ApplyError(f"{where} {refused}")
    package = plan.path.with_name(package_name(plan.path.stem))
    taken = next((p for p in (package, package.with_suffix(".py")) if p.exists()), None)
    if taken is not None:  # a module of that name would shadow (or be shadowed by) ours
        raise ApplyError(f"{short_path(str(taken))} already exists: move it away before "
                         "--apply")
    newline = "\r\n" if text.split("\n", 1)[0].endswith("\r") else "\n"
    new_text, new_lines = rewrite(text, plan, newline)
    return _Rewrite(plan, text, new_text, new_lines, package)


@dataclass
class _Written:
    """What `_write` made for one file so far, so that `_undo` removes only that."""

    rewrite: _Rewrite
    backup: Path
    package_made: bool = False
    replaced: bool = False


def _undo(done: list[_Written]) -> None:
    """Put back what `_write` changed: each file's text (when it was replaced), the package
    it made and its backup; an OSError is raised after every other step was tried."""
    failed: OSError | None = None
    for w in reversed(done):
        try:
            if w.replaced:
                write_atomic(w.rewrite.plan.path, w.rewrite.text)
            if w.package_made:
                shutil.rmtree(w.rewrite.package, ignore_errors=True)
            w.backup.unlink(missing_ok=True)
        except OSError as e:
            failed = failed or e
    if failed is not None:
        raise failed


def _write(rewrites: list[_Rewrite]) -> list[_Written]:
    """Backups and packages of every file, then the files; on any failure nothing of ours
    is left and every file holds its original text."""
    done: list[_Written] = []
    current = rewrites[0].plan.path  # the file being written, for the error
    try:
        for r in rewrites:
            current = r.plan.path
            done.append(_Written(r, _backup_path(r.plan.path)))
            write_atomic(done[-1].backup, r.text)
            r.package.mkdir()
            done[-1].package_made = True
            for name, body in package_files(r.plan.path.name, r.plan.ops).items():
                write_atomic(r.package / name, body)
        for w in done:
            current = w.rewrite.plan.path
            _read_checked(w.rewrite.plan)  # right before the file is replaced
            write_atomic(w.rewrite.plan.path, w.rewrite.new_text)
            w.replaced = True
    except BaseException as e:
        try:
            _undo(done)
        except OSError:
            pass  # the error below says what failed first
        if isinstance(e, OSError):
            raise ApplyError(f"cannot write next to {short_path(str(current))}: {e} (check "
                             "the folder's permissions)") from e
        raise
    return done


def _names(paths: list[Path], suffix: str = "") -> str:
    """`a.py`, `a.py and b.py`, `a.py, b.py and c.py` (each followed by `suffix`)."""
    shown = [short_path(str(p)) + suffix for p in paths]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def apply(plan: ApplyPlan, analysis: Analysis, console: Console, *, assume_yes: bool,
          ask: Callable[[str], bool] | None) -> ApplyResult | None:
    """Write the plan after confirmation; None when nothing was written."""
    for f in (plan.file(plan.path), *plan.files):
        if f.digest is not None:
            _read_checked(f)  # saved again during the run: refuse before anything else
    pointers = [s.cluster for s in plan.skipped if s.pointer]
    if pointers:
        console.print(f"Not applied: {plural(len(pointers), 'cluster')} "
                      f"{', '.join(map(str, pointers))} (pointer mappings: no exact lines to "
                      "replace)", highlight=False)
    for s in plan.skipped:
        if not s.pointer:
            console.print(f"cluster {s.cluster}: not applied, {s.reason}", highlight=False,
                          markup=False)
    if not plan.edits:
        console.print(f"Nothing to apply to {short_path(str(plan.path))}.", highlight=False)
        return None
    if not assume_yes and ask is None:
        raise no_terminal()
    rewrites = [_prepare(f) for f in plan.files]
    where = _names([r.plan.path for r in rewrites])
    if not assume_yes and ask is not None:
        # What is asked about is the text about to be written, imports included; _write
        # checks each file's hash again before replacing it.
        for r in rewrites:
            print_text_diff(str(r.plan.path), r.text, r.new_text, console)
        files = "; ".join(f"{short_path(str(r.plan.path))}: {counted(len(r.plan.edits), 'edit')}"
                          for r in rewrites) if len(rewrites) > 1 else counted(
                              len(plan.edits), "edit")
        if not ask(f"Rewrite {where} ({files}: {plural(len(plan.clusters), 'cluster')} "
                   f"{', '.join(map(str, plan.clusters))}) and write "
                   f"{_names([r.package for r in rewrites], '/')}?"):
            console.print("Nothing written.")
            return None
    written = _write(rewrites)
    backups = [w.backup for w in written]
    try:
        err = verify(analysis, plan.path, tuple(r.plan.path for r in rewrites
                                                if r.plan.path != plan.path))
    except Exception as e:  # noqa: BLE001 - any failure of the rewritten model rolls back
        why = str(e) if isinstance(e, ApplyError) else f"{type(e).__name__}: {e}"
        why = why.splitlines()[0] if why else type(e).__name__
        one = len(rewrites) == 1
        subject = f"the rewritten {where}" if one else f"the rewritten model ({where})"
        try:
            _undo(written)
        except OSError as r:
            raise ApplyError(f"{subject} failed its check against the original ({why}) and "
                             f"restoring failed ({r}): the original{'' if one else 's'} "
                             f"{'is' if one else 'are'} in {_names(backups)}") from e
        finally:
            _forget_modules_of({r.plan.path for r in rewrites} - {plan.path})
        raise ApplyError(f"{subject} failed its check against the original ({why}); restored "
                         f"the original{'' if one else 's'}, nothing applied") from e
    new_lines = {c: line for r in rewrites for c, line in r.new_lines.items()}
    result = ApplyResult(tuple(AppliedFile(r.plan.path, b, r.package)
                               for r, b in zip(rewrites, backups, strict=True)),
                         plan.clusters, tuple(sorted(new_lines.items())), err)
    err_text = f"max abs err {err:.2e}" if err is not None else "no error measured"
    packages = _names([r.package for r in rewrites], "/")
    console.print(f"Applied {counted(len(plan.edits), 'edit')} to {where}; kernels in "
                  f"{packages}; original{'s' if len(rewrites) > 1 else ''} saved as "
                  f"{_names(backups)}; rewritten model matches the original "
                  f"({err_text}).", highlight=False, markup=False)
    return result
