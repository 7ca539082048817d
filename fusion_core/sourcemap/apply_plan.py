"""Which clusters `--apply` would write, and why it leaves each other cluster alone.

Reads an ``Analysis``, its ``SourceMapping``s, the generated kernels and the validation
verdicts; returns an ``ApplyPlan``: per file, one edit per range (an exact mapping, every
cluster on those lines passed numerics, its kernel runs every call of the lines:
``serves.py``), the fused ops the edits call and the digest the file must still have at
write time; and a ``Skip`` with the reason for every other cluster. The files are the
model's own: the model file and the other files of its project (``project_root``), never
an installed library's. ``apply.py`` writes the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..codegen import Kernel
from ..ir.run_scalars import analysed, run_scalar
from ..load import package_module
from ..names import cluster_of
from ..pipeline import Analysis
from .fixed import fixed_shape
from .fused import FusedOp
from .serves import KernelFit
from .source_mapping import SourceMapping

Verdicts = Mapping[int, tuple[bool, str]]  # cluster → (usable, status in words)


@dataclass(frozen=True)
class Skip:
    cluster: int
    reason: str
    pointer: bool = False  # skipped because its mapping is only a pointer


@dataclass(frozen=True)
class FilePlan:
    """The edits of one file, the ops its sibling package exports, the bytes it must hold."""

    path: Path
    digest: str | None
    edits: tuple[SourceMapping, ...]  # one per edited range, top-down
    ops: tuple[FusedOp, ...] = field(repr=False)

    @property
    def clusters(self) -> tuple[int, ...]:
        return tuple(sorted(i for m in self.edits for i in (m.cluster_index, *m.shared_with)))


@dataclass(frozen=True)
class ApplyPlan:
    path: Path  # the model file
    digest: str | None  # of the model file's bytes the analysis imported (None: unknown)
    files: tuple[FilePlan, ...]  # every file with edits: the model file first, then by path
    skipped: tuple[Skip, ...]

    @property
    def edits(self) -> tuple[SourceMapping, ...]:
        return tuple(m for f in self.files for m in f.edits)

    @property
    def ops(self) -> tuple[FusedOp, ...]:
        """Every file's ops, each call once (two files may call one kernel)."""
        return tuple({o.call: o for f in self.files for o in f.ops}.values())

    @property
    def clusters(self) -> tuple[int, ...]:
        return tuple(sorted(i for f in self.files for i in f.clusters))

    def file(self, path: Path) -> FilePlan:
        """The plan of one file; an empty one for a file with no edits."""
        return next((f for f in self.files if f.path == path), FilePlan(
            path, self.digest if path == self.path else None, (), ()))


def project_root(model_path: Path) -> Path:
    """The folder whose files are the model's own: the top package's folder for a model
    file inside a package (a module of it may import any other), else the file's folder."""
    found = package_module(model_path)
    if found is None:
        return model_path.parent
    folder, dotted = found
    return folder / dotted.split(".")[0]


def _why_not(m: SourceMapping, root: Path, verdicts: Verdicts,
             kernels: Mapping[int, Kernel]) -> str | None:
    if not m.exact:
        return f"maps only as a pointer ({m.reason})"
    if m.file is None or not Path(m.file).resolve().is_relative_to(root):
        return (f"lies in {m.file}, outside the model's project folder {root}; --apply "
                "edits only the files there")
    for i in sorted((m.cluster_index, *m.shared_with)):
        usable, status = verdicts.get(i, (False, "not validated"))
        if not usable:
            return f"cluster {i}'s kernel is not verified ({status})"
    missing = [c for c in m.edit_calls if kernels.get(cluster_of(c)) is None]
    if missing:
        return ("no kernel was generated for it" if missing[0] == m.call else
                f"no kernel was generated for `{missing[0]}`, which the edit of its line "
                "also calls")
    return None


def plan_apply(analysis: Analysis, mappings: tuple[SourceMapping, ...], model_path: str | Path,
               kernels: Mapping[int, Kernel], verdicts: Verdicts) -> ApplyPlan:
    """Which clusters `--apply` would write, and why the others are left alone."""
    path = Path(model_path).resolve()
    root = project_root(path)
    edits: dict[tuple[Path, int], SourceMapping] = {}  # (file, first line) -> its edit
    ops: dict[int, FusedOp] = {}
    failed: dict[int, str] = {}  # kernel's cluster -> why its call cannot be written
    skipped: list[Skip] = []
    by_cluster = {m.cluster_index: m for m in mappings}
    fit = KernelFit(analysis, kernels)
    for m in mappings:
        reason = _why_not(m, root, verdicts, kernels) or fit.why_not(m, by_cluster)
        for call in m.edit_calls if reason is None else ():
            rep = cluster_of(call)
            if rep not in ops and rep not in failed:
                why, op = _fused_op(analysis, rep, kernels[rep], call)
                if op is not None:
                    ops[rep] = op
                else:
                    failed[rep] = why or ""
            if rep in failed:
                reason = failed[rep] if call == m.call else (
                    f"the edit of its line also calls `{call}`, which cannot be written: "
                    f"{failed[rep]}")
                break
        if reason is not None:
            skipped.append(Skip(m.cluster_index, reason, pointer=not m.exact))
        else:  # one edit per range: the clusters it computes are all in `shared_with`
            edits.setdefault((Path(str(m.file)).resolve(), m.start), m)
    fit.close()
    _drop_unpaired(edits, skipped)
    by_file: dict[Path, list[SourceMapping]] = {}
    for _, m in sorted(edits.items(), key=lambda kv: kv[0][1]):  # top-down in each file
        by_file.setdefault(Path(str(m.file)).resolve(), []).append(m)
    files = [_file_plan(analysis, p, tuple(ms), ops) for p, ms in by_file.items()]
    files.sort(key=lambda f: (f.path != path, str(f.path)))
    source = analysis.source
    imported = source is not None and Path(source.path).resolve() == path
    return ApplyPlan(path, source.digest if imported else None, tuple(files), tuple(skipped))


def _file_plan(analysis: Analysis, path: Path, edits: tuple[SourceMapping, ...],
               ops: Mapping[int, FusedOp]) -> FilePlan:
    # The bytes the model was imported from, when this is that file: what the edits and
    # the kernels were made from, so what the file must still hold at write time. Another
    # file's are those its mappings were made from.
    source = analysis.source
    imported = source is not None and Path(source.path).resolve() == path
    digest = source.digest if imported else next((m.digest for m in edits), None)
    used = [op for _, op in sorted(ops.items()) if any(op.call in e.edit_calls for e in edits)]
    return FilePlan(path, digest, edits, tuple(used))


def _drop_unpaired(edits: dict[tuple[Path, int], SourceMapping], skipped: list[Skip]) -> None:
    """An edit that drops a value other kernels recompute (paired.py) is written only with
    their edits, which no longer read it."""
    while True:
        written = {i for m in edits.values() for i in (m.cluster_index, *m.shared_with)}
        start, m = next(((k, m) for k, m in edits.items()
                         if not set(m.needs) <= written), (None, None))
        if m is None:
            return
        missing = min(set(m.needs) - written)
        del edits[start]
        for i in (m.cluster_index, *m.shared_with):
            skipped.append(Skip(i, f"its edit drops a value cluster {missing}'s kernel "
                                   f"recomputes, and cluster {missing}'s edit, which stops "
                                   "reading it, is not written"))


def _fused_op(analysis: Analysis, index: int, kernel: Kernel, call: str
              ) -> tuple[str | None, FusedOp | None]:
    c, g = analysis.clusters[index], analysis.graph
    # Python numbers of sizes alone come last (``group.external_inputs``): operator scalars.
    numbers = [s for n in c.inputs if (s := run_scalar(g, n)) is not None]
    ins = [g[n].meta for n in c.inputs[:len(c.inputs) - len(numbers)]]
    outs = [g[n].meta for n in c.outputs]
    if any(m is None for m in (*ins, *outs)):
        return "a value it reads or writes has no recorded shape", None
    fixed = fixed_shape(analysis, index)
    if fixed is not None:
        return fixed, None
    return None, FusedOp(call, kernel.name, kernel.source, len(ins),
                         tuple(m.dtype for m in ins), tuple(m.dtype for m in outs),
                         tuple(type(analysed(g, s)).__name__ for s in numbers))
