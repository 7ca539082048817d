"""Session state: per-test verdicts, pending baseline writes, stale-baseline detection.

Reads the current ``Snapshot`` of each checked test and its baseline file;
decides pass/fail and what to write under the update mode. Writes nothing
during tests: writes are queued (as YAML text) and applied by the controller at
session end, so under xdist workers only ship their queue (``to_output``) and
the controller alone touches the baselines folder (``merge`` + ``finish``).
Everything kept here is plain JSON-able data for ``config.workeroutput``.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .carry import attach_timings, carry_timings, same_content
from .compare import CHECKS, NO_CUDA, Comparison, Tolerances, compare, frontend_change
from .measure import median_speedup
from .schema import from_data, to_data
from .snapshot import BaselineError, ClusterId, Snapshot, baseline_name

MODES = ("new", "failing", "all")
FAILING = {"missing", "error", "regressed"}


@dataclass
class TestRecord:
    nodeid: str
    status: str  # created updated replaced measured missing error regressed improved changed pass
    model: str = ""
    clusters: int = 0
    unfused_bytes: int = 0
    saved_bytes: int = 0
    timing_note: str = ""
    model_speedup: float | None = None  # median eager / median fused, when measured here
    messages: list[str] = field(default_factory=list)
    baseline: str = ""


def dump_yaml(data: dict[str, Any]) -> str:
    """Stable, review-friendly YAML: our key order, short lists of scalars inline."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, allow_unicode=True,
                          width=100)


def read_baseline(path: Path, shown: str) -> Snapshot | None:
    """The parsed baseline, None when missing; BaselineError names `shown` when unusable."""
    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BaselineError(f"corrupt fusion baseline {shown}: not valid YAML ({first}); fix "
                            "it, or delete it and rerun with --fusion-update-baselines=new") from e
    return from_data(data, shown)


class FusionSession:
    def __init__(self, rootdir: Path, folder: Path, mode: str | None,
                 provenance: dict[str, str]) -> None:
        self.rootdir, self.folder, self.mode, self.provenance = rootdir, folder, mode, provenance
        self.records: dict[str, dict[str, Any]] = {}
        self.writes: list[dict[str, Any]] = []
        self.collected: set[str] = set()
        self.deselected: set[str] = set()

    # ------------------------------------------------------------ per test
    def shown(self, path: Path) -> str:
        try:
            return path.relative_to(self.rootdir).as_posix()
        except ValueError:
            return str(path)

    def check(self, current: Snapshot, tol: Tolerances, checks: tuple[str, ...] = CHECKS,
              hw_key: str | None = None) -> tuple[TestRecord, str | None]:
        """Compare with the baseline; return the record and a failure message (None: pass)."""
        nodeid = current.test
        path = self.folder / baseline_name(nodeid)
        shown = self.shown(path)
        rec = TestRecord(nodeid, "pass", current.model, len(current.clusters),
                         current.unfused_bytes, current.saved_bytes, baseline=shown)
        if hw_key in current.measured:
            m = current.measured[hw_key]
            rec.model_speedup = median_speedup(m.model_eager_us, m.model_us)
        if "timings" in checks:
            rec.timing_note = (NO_CUDA if hw_key is None else f"timings recorded on {hw_key}"
                               if hw_key in current.measured else f"nothing measured on {hw_key}")
        cmd = f"pytest --fusion-update-baselines={{}} {shlex.quote(nodeid)}"
        try:
            base = read_baseline(path, shown)
        except BaselineError as e:
            rec.messages = [str(e)]
            if self.mode in ("failing", "all"):
                return self._write(rec, "replaced", current, None, path), None
            rec.status = "error"
            return rec, str(e)
        if base is None:
            if self.mode is not None:
                rec.messages = [f"created with {len(current.clusters)} cluster(s)"]
                return self._write(rec, "created", current, None, path), None
            rec.status = "missing"
            return rec, (f"no fusion baseline for this test ({shown}); create it with: "
                         + cmd.format("new"))
        result: Comparison = compare(base, current, tol, checks, hw_key)
        rec.timing_note = result.timing_note
        rec.messages = list(result.regressions + result.improvements + result.changes)
        rec.status = result.status
        rewrite = (self.mode == "all" or (self.mode == "failing" and result.regressions))
        if rewrite:
            return self._write(rec, "updated", current, base, path, result.pairs), None
        if self.mode is not None and hw_key in current.measured and hw_key not in base.measured:
            # A machine with no timings yet: add them without touching the structure.
            merged = attach_timings(base, current, hw_key, result.pairs)
            self._write(rec, "measured", merged, base, path, keep_status=True)
        if result.regressions:
            lines = "\n".join(f"  - {m}" for m in result.regressions)
            switched = frontend_change(base, current)  # e.g. auto fell back to export
            if switched:
                lines += f"\n  ({switched})"
            return rec, (f"fusion regression against {shown}:\n{lines}\nIf this is intended, "
                         f"accept it with: {cmd.format('failing')}")
        return rec, None

    def _write(self, rec: TestRecord, action: str, snap: Snapshot, old: Snapshot | None,
               path: Path, pairs: tuple[tuple[ClusterId, ClusterId], ...] = (),
               keep_status: bool = False) -> TestRecord:
        if old is not None and action != "measured":
            snap = replace(snap, measured=carry_timings(old, snap, pairs))
        snap = replace(snap, provenance=old.provenance if action == "measured" and old
                       else self.provenance)
        # Moved source lines alone are no reason to rewrite (and churn) a baseline.
        unchanged = old is not None and same_content(snap, old)
        if not unchanged:
            self.writes.append({"path": str(path), "text": dump_yaml(to_data(snap)),
                                "action": action, "test": rec.nodeid,
                                "changes": list(rec.messages)})
            if not keep_status:
                rec.status = action
        return rec

    def record(self, rec: TestRecord) -> None:
        self.records[rec.nodeid] = asdict(rec)

    # ------------------------------------------------------------ xdist
    def to_output(self) -> dict[str, Any]:
        return {"records": self.records, "writes": self.writes,
                "collected": sorted(self.collected), "deselected": sorted(self.deselected)}

    def merge(self, data: dict[str, Any]) -> None:
        self.records.update(data.get("records", {}))
        self.writes.extend(data.get("writes", []))
        self.collected.update(data.get("collected", []))
        self.deselected.update(data.get("deselected", []))

    # ------------------------------------------------------------ session end
    def stale(self, narrowed: set[str]) -> list[tuple[Path, str]]:
        """Baselines no collected or deselected test uses: (file, its test id).

        Judged only for test modules collected in full this run (a module named
        with `::` on the command line is not), or whose file no longer exists.
        """
        if not self.folder.is_dir():
            return []
        known = self.collected | self.deselected
        full = {n.split("::")[0] for n in known} - narrowed
        written = {w["path"] for w in self.writes}
        found = []
        for path in sorted(self.folder.glob("*.yaml")):
            try:
                test = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("test")
            except (yaml.YAMLError, OSError, UnicodeDecodeError, AttributeError):
                continue
            if not isinstance(test, str) or test in known or str(path) in written:
                continue
            module = test.split("::")[0]
            if module in full or not (self.rootdir / module).exists():
                found.append((path, test))
        return found

    def apply_writes(self, write_atomic) -> list[dict[str, Any]]:
        """Write every queued baseline (controller only); return what was written."""
        done = []
        for w in sorted(self.writes, key=lambda w: w["path"]):
            path = Path(w["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, w["text"])
            done.append(w)
        return done
