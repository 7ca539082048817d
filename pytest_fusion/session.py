"""Session state: per-test verdicts, pending baseline writes, stale-baseline detection.

Reads the current ``Snapshot`` of each checked test and its baseline file;
decides pass/fail and what to write under the update mode. Writes nothing
during tests: writes are queued (as YAML text) and applied by the controller at
session end (``apply_writes``, called from ``finish``), so under xdist the
controller alone touches the baselines folder. Everything kept here is plain
JSON-able data: a worker sends each test's record and writes to the controller as
soon as the test ends (``take``, ``merge``), so a worker that dies loses only the
test it was running; its collection lists follow at its end (``to_output``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .measure import median_speedup

if TYPE_CHECKING:  # loaded when a fusion test runs, not by a run without one
    from .compare import Tolerances
    from .snapshot import ClusterId, Snapshot

FAILING = {"missing", "error", "regressed", "unaccepted"}


@dataclass
class TestRecord:
    nodeid: str
    # created updated replaced renamed measured missing error regressed unaccepted (an
    # improvement, under fusion_improvements = fail) improved changed pass
    status: str
    model: str = ""
    clusters: int = 0
    unfused_bytes: int = 0
    saved_bytes: int = 0
    timing_note: str = ""
    model_speedup: float | None = None  # median eager / median fused, when measured here
    # The same by wall time (a Python caller's clock), when model_speedup is device time
    model_wall_speedup: float | None = None
    messages: list[str] = field(default_factory=list)
    baseline: str = ""
    hw_key: str | None = None  # the GPU the test's timings came from (None: no CUDA)
    timings_judged: int = 0  # timings compared with the baseline's
    timing_gap: str = ""  # why none was (compare.GAPS), "" when some were
    # {backend: counts and our clusters beside Inductor's kernels} (compiled_report.summary)
    compiled: dict[str, Any] = field(default_factory=dict)


def dump_yaml(data: dict[str, Any]) -> str:
    """Stable, review-friendly YAML: our key order, short lists of scalars inline."""
    import yaml  # only when a fusion test runs: a run with none does not pay for it

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, allow_unicode=True,
                          width=100)


def read_baseline(path: Path, shown: str) -> Snapshot | None:
    """The parsed baseline, None when missing; BaselineError names `shown` when unusable."""
    import yaml

    from .schema import from_data
    from .snapshot import BaselineError

    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BaselineError(f"corrupt fusion baseline {shown}: not valid YAML ({first}); fix "
                            "it, or delete it and rerun with --fusion-update-baselines=new") from e
    try:
        return from_data(data, shown)
    except BaselineError:
        raise
    except (AttributeError, TypeError, ValueError, KeyError) as e:  # a field of the wrong type
        raise BaselineError(f"corrupt fusion baseline {shown}: a field has the wrong type "
                            f"({type(e).__name__}: {e}); regenerate it with "
                            "--fusion-update-baselines=failing") from e


def baseline_path(folder: Path, nodeid: str) -> tuple[Path, Path | None]:
    """(where the test's baseline belongs, the old-named file to read instead or None).

    A baseline under the name earlier versions gave it (with `[...]`) is read while no file
    has the new name; the next rewrite moves it there."""
    from .snapshot import baseline_name, legacy_baseline_name

    path = folder / baseline_name(nodeid)
    old = folder / legacy_baseline_name(nodeid)
    return path, (old if old != path and old.is_file() and not path.exists() else None)


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


class FusionSession:
    def __init__(self, rootdir: Path, folder: Path, mode: str | None,
                 provenance: Callable[[], dict[str, str]], verbosity: int = 0) -> None:
        self.rootdir, self.folder, self.mode = rootdir, folder, mode
        self._provenance, self.verbosity = provenance, verbosity
        self.records: dict[str, dict[str, Any]] = {}
        self.writes: list[dict[str, Any]] = []
        self.collected: set[str] = set()  # items this run would run
        self.deselected: set[str] = set()
        # Every test id the collected files define, seen before any plugin narrowed them
        # (pytest's --lf drops items inside collection, not through deselection).
        self.defined: set[str] = set()

    @property
    def provenance(self) -> dict[str, str]:
        return self._provenance()  # the device probe imports torch: only when writing

    # ------------------------------------------------------------ per test
    def shown(self, path: Path) -> str:
        try:
            return path.relative_to(self.rootdir).as_posix()
        except ValueError:
            return str(path)

    def check(self, current: Snapshot, tol: Tolerances, checks: tuple[str, ...] | None = None,
              hw_key: str | None = None, fail_improvements: bool = False,
              compiler_change: str = "report") -> tuple[TestRecord, str | None]:
        """Compare with the baseline; return the record and a failure message (None: pass).

        `fail_improvements`: an improvement fails the test too, until it is accepted.
        `compiler_change`: "fail" makes another torch/triton version than the baseline's
        compiled record a regression; "report" only says it."""
        from .carry import attach_timings, refresh_lines
        from .compare import CHECKS, NO_CUDA, compare, frontend_change, other_timing
        from .snapshot import BaselineError

        checks = CHECKS if checks is None else checks
        nodeid = current.test
        path, legacy = baseline_path(self.folder, nodeid)
        shown = self.shown(legacy or path)
        rec = TestRecord(nodeid, "pass", current.model, len(current.clusters),
                         current.unfused_bytes, current.saved_bytes, baseline=shown)
        if hw_key in current.measured:
            m = current.measured[hw_key]
            rec.model_speedup = median_speedup(m.model_eager_us, m.model_us)
            if m.clock == "device":
                rec.model_wall_speedup = median_speedup(m.model_eager_host_us, m.model_host_us)
        rec.hw_key = hw_key
        rec.timing_gap = ("not-checked" if "timings" not in checks else "no-cuda"
                          if hw_key is None else "no-baseline" if hw_key in current.measured
                          else "not-measured")
        if "timings" in checks:
            rec.timing_note = (NO_CUDA if hw_key is None else f"timings recorded on {hw_key}"
                               if hw_key in current.measured else f"nothing measured on {hw_key}")
        cmd = f"pytest --fusion-update-baselines={{}} {shlex.quote(nodeid)}"
        if path.is_dir():  # never replaced: the folder is the user's
            rec.status, msg = "error", (f"fusion baseline {shown} is a folder, not a file; "
                                        "move it away and rerun")
            rec.messages = [msg]
            return rec, msg
        try:
            base = read_baseline(legacy or path, shown)
        except BaselineError as e:
            rec.messages = [str(e)]
            if self.mode in ("failing", "all"):
                return self._write(rec, "replaced", current, None, path, legacy=legacy), None
            rec.status = "error"
            return rec, str(e)
        if base is None:
            if self.mode is not None:
                rec.messages = [f"created with {len(current.clusters)} cluster(s)"]
                return self._write(rec, "created", current, None, path), None
            rec.status = "missing"
            return rec, (f"no fusion baseline for this test ({shown}); create it with: "
                         + cmd.format("new"))
        if base.target != current.target:  # nothing to compare: say that, not the differences
            msg = (f"fusion baseline {shown} describes the {base.target} target, this run "
                   f"analyses for {current.target}: analyse for {base.target} (ini fusion_device, "
                   "or device= on the marker or in analyze()), or record it for "
                   f"{current.target} with: pytest --fusion-update-baselines=failing -o "
                   f"fusion_device={current.target} {shlex.quote(nodeid)}")
            if self.mode in ("failing", "all"):  # timings of the other target do not carry
                rec.messages = [f"target {base.target} → {current.target}"]
                return self._write(rec, "replaced", current, None, path, legacy=legacy), None
            rec.status, rec.messages = "error", [msg]
            return rec, msg
        result = compare(base, current, tol, checks, hw_key, compiler_change)
        rec.timing_note = result.timing_note
        rec.timings_judged, rec.timing_gap = result.timings_judged, result.timing_gap
        rec.messages = list(result.messages)
        rec.status = result.status
        ratchet = fail_improvements and bool(result.improvements)
        failing = bool(result.regressions) or ratchet
        rewrite = (self.mode == "all" or (self.mode == "failing" and failing))
        if rewrite:
            return self._write(rec, "updated", current, base, path, result.pairs,
                               legacy=legacy), None
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
            self._write(rec, action, kept, base, path, keep_status=True, legacy=legacy)
        if failing:
            said = result.regressions or result.improvements
            lines = "\n".join(f"  - {m}" for m in said)
            others = [m for m in result.regressions + result.improvements + result.changes
                      if m not in said]
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
                rec.status = "unaccepted"
                head = (f"fusion improved against {shown} (fusion_improvements = fail: an "
                        "improvement fails until the baseline records it):")
                accept = "Record it with"
            return rec, f"{head}\n{lines}\n{accept}: {cmd.format('failing')}{diff}"
        return rec, None

    def _write(self, rec: TestRecord, action: str, snap: Snapshot, old: Snapshot | None,
               path: Path, pairs: tuple[tuple[ClusterId, ClusterId], ...] = (),
               keep_status: bool = False, legacy: Path | None = None) -> TestRecord:
        """Queue `snap` for `path`; `legacy`: the file it was read from under its old name,
        removed once the new one is written."""
        from .carry import carry_timings, same_content
        from .schema import to_data

        amended = action in ("measured", "refreshed lines of")  # the baseline, not the run
        if old is not None and not amended:
            # Like timings, another backend's compiled record stays (a CPU run keeps the GPU's).
            snap = replace(snap, measured=carry_timings(old, snap, pairs),
                           compiled={**old.compiled, **snap.compiled})
        snap = replace(snap, provenance=old.provenance if amended and old else self.provenance)
        # An update writes current lines; a baseline equal but for provenance is left alone,
        # except that `=all` moves an old-named file to its new name, as it is.
        unchanged = old is not None and same_content(snap, old, lines=True)
        if unchanged and legacy is not None and self.mode == "all":
            self.writes.append({"path": str(path), "move_from": str(legacy), "action": "renamed",
                                "test": rec.nodeid, "changes": [f"from {self.shown(legacy)}"]})
            rec.status = "renamed"
        elif not unchanged:
            write = {"path": str(path), "text": dump_yaml(to_data(snap)), "action": action,
                     "test": rec.nodeid, "changes": [] if amended else list(rec.messages)}
            if legacy is not None:
                write["move_from"] = str(legacy)
            self.writes.append(write)
            if not keep_status:
                rec.status = action
        return rec

    def record(self, rec: TestRecord) -> None:
        self.records[rec.nodeid] = asdict(rec)

    # ------------------------------------------------------------ xdist
    def take(self, nodeid: str) -> dict[str, Any] | None:
        """Remove and return one test's record and queued writes (a worker sends them)."""
        writes = [w for w in self.writes if w["test"] == nodeid]
        record = self.records.pop(nodeid, None)
        if record is None and not writes:
            return None
        self.writes = [w for w in self.writes if w["test"] != nodeid]
        return {"records": {nodeid: record} if record else {}, "writes": writes}

    def to_output(self) -> dict[str, Any]:
        return {"records": self.records, "writes": self.writes,
                "collected": sorted(self.collected), "deselected": sorted(self.deselected),
                "defined": sorted(self.defined)}

    def merge(self, data: dict[str, Any]) -> None:
        self.records.update(data.get("records", {}))
        self.writes.extend(data.get("writes", []))
        self.collected.update(data.get("collected", []))
        self.deselected.update(data.get("deselected", []))
        self.defined.update(data.get("defined", []))

    # ------------------------------------------------------------ session end
    def owns(self, data: dict[str, Any]) -> bool:
        """Whether a baseline belongs to this project (a folder outside the rootdir may be
        shared: only baselines that name this project in their provenance are ours)."""
        if self.folder.resolve().is_relative_to(self.rootdir.resolve()):
            return True
        prov = data.get("provenance")
        return isinstance(prov, dict) and prov.get("project") == self.rootdir.name

    def stale(self, narrowed: set[str]) -> list[tuple[Path, str]]:
        """Baselines no test of this run's files uses: (file, its test id).

        Judged only for test files that contributed items to this run (minus files
        named with `::` on the command line), against every test id those files
        define (so --lf, -k, -m and --deselect keep the tests they leave out), or whose
        file no longer exists; never for another project's baselines.
        """
        if not self.folder.is_dir():
            return []
        import yaml

        known = self.collected | self.deselected | self.defined
        full = {n.split("::")[0] for n in self.collected | self.deselected} - narrowed
        written = {w["path"] for w in self.writes}
        found = []
        for path in sorted(self.folder.glob("*.yaml")):
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
                test = data.get("test")
            except (yaml.YAMLError, OSError, UnicodeDecodeError, AttributeError):
                continue
            if not isinstance(test, str) or test in known or str(path) in written:
                continue
            module = test.split("::")[0]
            if self.owns(data) and (module in full or not (self.rootdir / module).exists()):
                found.append((path, test))
        return found

    def apply_writes(self, write_atomic) -> tuple[list[dict[str, Any]], list[str]]:
        """Write every queued baseline (controller only): (what was written, error lines)."""
        done, errors = [], []
        for w in sorted(self.writes, key=lambda w: w["path"]):
            path = Path(w["path"])
            old = Path(w["move_from"]) if "move_from" in w else None
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if "text" in w:
                    write_atomic(path, w["text"])
                elif old is not None:
                    os.replace(old, path)  # a rename keeps the user's bytes and mode
                if old is not None:
                    old.unlink(missing_ok=True)  # only once the new file is in place
            except OSError as e:
                errors.append(f"could not write fusion baseline {self.shown(path)} for "
                              f"{w['test']}: {e.strerror or e}")
                continue
            done.append(w)
        return done, errors
