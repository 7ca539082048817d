"""Judge one test: its current ``Snapshot`` against its baseline, under the update mode.

Reads the baseline through ``BaselineStorage`` and the comparison (``compare``); returns a
``Verdict``: the test's ``TestRecord``, the ``BaselineWrite`` the update mode asks for (or
None) and the failure message (None: the test passes). Writes nothing: the session queues
the write and the controller applies it at session end.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from fusion_core.units import counted

from .measure import median_speedup
from .records import BaselineWrite, TestRecord
from .storage import BaselineFile, BaselineStorage, dump_yaml

if TYPE_CHECKING:  # loaded when a fusion test runs, not by a run without one
    from .compare import Tolerances
    from .snapshot import ClusterId, Snapshot


@dataclass(frozen=True)
class Verdict:
    record: TestRecord
    write: BaselineWrite | None = None
    failure: str | None = None  # the test's failure message; None: it passes


def yaml_diff(base: Snapshot, current: Snapshot, pairs: Iterable[tuple[ClusterId, ClusterId]],
              shown: str) -> str:
    """The baseline and the current result (with the timings an update would keep) as a
    unified diff of their YAML, for -vv; provenance is left out (never compared)."""
    import difflib

    from .carry import carry_timings
    from .schema import to_data

    texts = []
    for snap in (base, replace(current, measured=carry_timings(base, current, pairs))):
        data = to_data(snap)
        data.pop("provenance", None)
        texts.append(dump_yaml(data).splitlines())
    return "\n".join(difflib.unified_diff(*texts, f"{shown} (baseline)", "current result",
                                          lineterm=""))


def _first_record(current: Snapshot, checks: tuple[str, ...], hw_key: str | None,
                  shown: str, compiled: Mapping[str, Any] | None) -> TestRecord:
    """The record before any baseline is read: what the run itself found."""
    from .compare import NO_CUDA

    speedup = wall = host_factor = launches = None
    if hw_key in current.measured:
        m = current.measured[hw_key]
        launches = m.model_launches
        speedup = median_speedup(m.model_eager_us, m.model_us)
        if m.clock == "device":
            wall = median_speedup(m.model_eager_host_us, m.model_host_us)
            host_factor = median_speedup(m.model_host_us, m.model_us)
    gap = ("not-checked" if "timings" not in checks else "no-cuda" if hw_key is None
           else "no-baseline" if hw_key in current.measured else "not-measured")
    note = ""
    if "timings" in checks:
        note = (NO_CUDA if hw_key is None else f"timings recorded on {hw_key}"
                if hw_key in current.measured else f"nothing measured on {hw_key}")
    return TestRecord(current.test, "pass", current.model, len(current.clusters),
                      current.unfused_bytes, current.saved_bytes, timing_note=note,
                      model_speedup=speedup, model_wall_speedup=wall,
                      model_host_factor=host_factor, model_launches=launches,
                      baseline=shown, hw_key=hw_key,
                      timing_gap=gap, compiled=compiled or {})


class Judge:
    """Judges tests against the baselines of `storage` under the update `mode`."""

    def __init__(self, storage: BaselineStorage, mode: str | None,
                 provenance: Callable[[], dict[str, str]], verbosity: int = 0) -> None:
        self.storage, self.mode, self.verbosity = storage, mode, verbosity
        self._provenance = provenance  # the device probe imports torch: only when writing

    def check(self, current: Snapshot, tol: Tolerances, checks: tuple[str, ...] | None = None,
              hw_key: str | None = None, fail_improvements: bool = False,
              compiler_change: str = "report",
              compiled: Mapping[str, Any] | None = None) -> Verdict:
        """Compare with the baseline; the verdict says the record, the write and the failure.

        `fail_improvements`: an improvement fails the test too, until it is accepted.
        `compiler_change`: "fail" makes another torch/triton version than the baseline's
        compiled record a regression; "report" only says it.
        `compiled`: the report's summary of the compiled record (``compiled_report.summary``),
        carried by the record whatever the verdict."""
        from .carry import attach_timings, refresh_lines
        from .compare import CHECKS, compare, frontend_change, other_timing
        from .construction import construction_change
        from .snapshot import BaselineError

        checks = CHECKS if checks is None else checks
        nodeid = current.test
        where = self.storage.locate(nodeid)
        shown = self.storage.shown(where.current)
        rec = _first_record(current, checks, hw_key, shown, compiled)
        cmd = f"pytest --fusion-update-baselines={{}} {shlex.quote(nodeid)}"
        if where.path.is_dir():  # never replaced: the folder is the user's
            msg = f"fusion baseline {shown} is a folder, not a file; move it away and rerun"
            return Verdict(replace(rec, status="error", messages=(msg,)), None, msg)
        try:
            base = self.storage.read(where.current)
        except BaselineError as e:
            rec = replace(rec, messages=(str(e),))
            if self.mode in ("failing", "all"):
                return self._write(rec, "replaced", current, None, where)
            return Verdict(replace(rec, status="error"), None, str(e))
        if base is None:
            if self.mode is not None:
                made = f"created with {counted(len(current.clusters), 'cluster')}"
                rec = replace(rec, messages=(made,))
                return self._write(rec, "created", current, None, where)
            return Verdict(replace(rec, status="missing"), None,
                           f"no fusion baseline for this test ({shown}); create it with: "
                           + cmd.format("new"))
        if base.target != current.target:  # nothing to compare: say that, not the differences
            msg = (f"fusion baseline {shown} describes the {base.target} target, this run "
                   f"analyses for {current.target}: analyse for {base.target} (ini "
                   "fusion_device, or device= on the marker or in analyze()), or record it for "
                   f"{current.target} with: pytest --fusion-update-baselines=failing -o "
                   f"fusion_device={current.target} {shlex.quote(nodeid)}")
            if self.mode in ("failing", "all"):  # timings of the other target do not carry
                rec = replace(rec, messages=(f"target {base.target} → {current.target}",))
                return self._write(rec, "replaced", current, None, where)
            return Verdict(replace(rec, status="error", messages=(msg,)), None, msg)
        result = compare(base, current, tol, checks, hw_key, compiler_change)
        rec = replace(rec, timing_note=result.timing_note, timings_judged=result.timings_judged,
                      timing_gap=result.timing_gap, messages=tuple(result.messages),
                      status=result.status)
        ratchet = fail_improvements and bool(result.improvements)
        failing = bool(result.regressions) or ratchet
        if self.mode == "all" or (self.mode == "failing" and failing):
            return self._write(rec, "updated", current, base, where, result.pairs)
        write = None
        if self.mode is not None:
            # Moved lines are refreshed, and a machine with no timings yet (or with timings
            # of another clock or shape than this run's) adds them, without touching the
            # structure.
            kept = refresh_lines(base, current, result.pairs)
            action = "refreshed lines of"
            if hw_key in current.measured and (
                    hw_key not in base.measured or other_timing(
                        base, base.measured[hw_key], current, current.measured[hw_key])):
                kept, action = attach_timings(kept, current, hw_key, result.pairs), "measured"
            new_backends = {k: v for k, v in current.compiled.items() if k not in base.compiled}
            if new_backends:  # a first compiled record is added like a first timing
                kept = replace(kept, compiled={**kept.compiled, **new_backends})
                action = "measured"
            write = self._write(rec, action, kept, base, where, keep_status=True).write
        if not failing:
            return Verdict(rec, write, None)
        said = result.regressions or result.improvements
        built = construction_change(base, current)  # named first: it explains the rest
        lines = f"  ({built})\n" if built else ""
        lines += "\n".join(f"  - {m}" for m in said)
        others = [m for m in result.regressions + result.improvements + result.changes
                  if m not in said and m != built]
        if others:
            lines += "\nAlso:\n" + "\n".join(f"  - {m}" for m in others)
        switched = frontend_change(base, current)  # e.g. auto fell back to export
        if switched:
            lines += f"\n  ({switched})"
        diff = (f"\n{yaml_diff(base, current, result.pairs, shown)}"
                if self.verbosity >= 2 else "")
        if result.regressions:
            head = f"fusion regression against {shown}:"
            accept = "If this is intended, accept it with"
        else:
            rec = replace(rec, status="unaccepted")
            head = (f"fusion improved against {shown} (fusion_improvements = fail: an "
                    "improvement fails until the baseline records it):")
            accept = "Record it with"
        return Verdict(rec, write, f"{head}\n{lines}\n{accept}: {cmd.format('failing')}{diff}")

    def _write(self, rec: TestRecord, action: str, snap: Snapshot, old: Snapshot | None,
               where: BaselineFile, pairs: tuple[tuple[ClusterId, ClusterId], ...] = (),
               keep_status: bool = False) -> Verdict:
        """The verdict that writes `snap` at the test's path (moving an old-named file);
        the record takes the action as its status unless `keep_status`."""
        from .carry import carry_timings, same_content

        amended = action in ("measured", "refreshed lines of")  # the baseline, not the run
        if old is not None and not amended:
            # Like timings, another backend's compiled record stays (a CPU run keeps the GPU's).
            snap = replace(snap, measured=carry_timings(old, snap, pairs),
                           compiled={**old.compiled, **snap.compiled})
        snap = replace(snap, provenance=old.provenance if amended and old else self._provenance())
        # An update writes current lines; a baseline equal but for provenance is left alone,
        # except that `=all` moves an old-named file to its new name, as it is.
        unchanged = old is not None and same_content(snap, old, lines=True)
        if unchanged and where.legacy is not None and self.mode == "all":
            write = self.storage.queue(rec.nodeid, "renamed", None, where,
                                       [f"from {self.storage.shown(where.legacy)}"])
            return Verdict(replace(rec, status="renamed"), write)
        if unchanged:
            return Verdict(rec)
        write = self.storage.queue(rec.nodeid, action, snap, where,
                                   [] if amended else rec.messages)
        return Verdict(rec if keep_status else replace(rec, status=action), write)
