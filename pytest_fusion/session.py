"""The run's state, in one object: ``FusionSession`` (kept in ``config.stash``).

Owns the options (``options.Settings``), the baselines folder (``storage.BaselineStorage``),
each checked test's ``TestRecord``, the queued ``BaselineWrite``s, what collection saw
(for stale baselines), the HTML pages made so far, what the session end did
(``SessionEnd``) and the lines to say.
Writes nothing during tests: writes are queued and applied by the controller at session
end (``finish``), so under xdist the controller alone touches the baselines folder. A
worker sends each test's record and writes to the controller as soon as the test ends
(``take``, ``merge``: JSON-able data), so a worker that dies loses only the test it was
running; its collection lists follow at its end (``to_output``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .judge import Judge, Verdict
from .measure import local_device
from .options import Settings, settings
from .records import BaselineWrite, SessionEnd, StaleBaseline, TestRecord
from .storage import BaselineStorage, dump_yaml

if TYPE_CHECKING:  # loaded when a fusion test runs, not by a run without one
    from .compare import Tolerances
    from .report import FusionReport
    from .snapshot import Snapshot

__all__ = ["FusionSession", "TestRecord", "dump_yaml"]


def _versions() -> dict[str, str]:
    found = {}
    for pkg in ("torch", "triton"):
        try:
            found[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            found[pkg] = "not installed"
    return found


class FusionSession:
    """Everything one pytest run knows about its fusion checks."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.settings: Settings = settings(config)
        self.rootdir = config.rootpath
        self.storage = BaselineStorage(self.settings.folder, self.rootdir)
        self.judge = Judge(self.storage, self.settings.mode, lambda: self.provenance,
                           config.get_verbosity())
        self.is_worker = hasattr(config, "workerinput")
        self.records: dict[str, TestRecord] = {}
        self.writes: list[BaselineWrite] = []
        self.collected: set[str] = set()  # items this run would run
        self.deselected: set[str] = set()
        # Every test id the collected files define, seen before any plugin narrowed them
        # (pytest's --lf drops items inside collection, not through deselection).
        self.defined: set[str] = set()
        self.lost_workers: set[str] = set()
        self.end: SessionEnd | None = None  # set by finish() on the controller
        self.pages: dict[str, str] = {}  # test id -> its HTML page (--fusion-report=PATH)
        self._report: FusionReport | None = None  # see report()
        self.report_files: list[Path] = []
        self.errors: list[str] = []  # problems that fail the run
        self.notes: list[str] = []  # things worth a line that do not

    @property
    def folder(self) -> Path:
        return self.settings.folder

    @cached_property
    def versions(self) -> dict[str, str]:
        return _versions()  # package metadata (~10 ms): for the header and provenance only

    @cached_property
    def device(self) -> str:
        return local_device()  # imports torch: only once a fusion test or report needs it

    @property
    def hw_key(self) -> str | None:
        return None if self.device == "cpu" else self.device

    @cached_property
    def provenance(self) -> dict[str, str]:
        prov = {**self.versions, "device": self.device,
                "date": datetime.date.today().isoformat()}
        if not self.storage.owns({}):  # a folder outside the rootdir may be shared
            prov["project"] = self.rootdir.name
        return prov

    def shown(self, path: Path) -> str:
        return self.storage.shown(path)

    # ------------------------------------------------------------ per test
    def check(self, current: Snapshot, tol: Tolerances, checks: tuple[str, ...] | None = None,
              hw_key: str | None = None, fail_improvements: bool = False,
              compiler_change: str = "report",
              compiled: Mapping[str, Any] | None = None) -> Verdict:
        """Judge `current` against its baseline; record the verdict (with `compiled`, the
        report's summary of the compiled record) and queue its write."""
        verdict = self.judge.check(current, tol, checks, hw_key, fail_improvements,
                                   compiler_change, compiled)
        if verdict.write is not None:
            self.writes.append(verdict.write)
        self.record(verdict.record)
        return verdict

    def record(self, rec: TestRecord) -> None:
        self.records[rec.nodeid] = rec

    # ------------------------------------------------------------ xdist
    def take(self, nodeid: str) -> dict[str, Any] | None:
        """Remove and return one test's record and queued writes (a worker sends them)."""
        writes = [w for w in self.writes if w.test == nodeid]
        record = self.records.pop(nodeid, None)
        if record is None and not writes:
            return None
        self.writes = [w for w in self.writes if w.test != nodeid]
        return {"records": {nodeid: record.to_data()} if record else {},
                "writes": [w.to_data() for w in writes]}

    def to_output(self) -> dict[str, Any]:
        return {"records": {k: r.to_data() for k, r in self.records.items()},
                "writes": [w.to_data() for w in self.writes],
                "collected": sorted(self.collected), "deselected": sorted(self.deselected),
                "defined": sorted(self.defined)}

    def merge(self, data: dict[str, Any]) -> None:
        self.records.update((k, TestRecord.from_data(r))
                            for k, r in data.get("records", {}).items())
        self.writes.extend(BaselineWrite.from_data(w) for w in data.get("writes", []))
        self.collected.update(data.get("collected", []))
        self.deselected.update(data.get("deselected", []))
        self.defined.update(data.get("defined", []))

    # ------------------------------------------------------------ session end
    def stale(self, narrowed: set[str]) -> list[StaleBaseline]:
        """Baselines no test of this run's files uses.

        Judged only for test files that contributed items to this run (minus files
        named with `::` on the command line), against every test id those files
        define (so --lf, -k, -m and --deselect keep the tests they leave out), or whose
        file no longer exists; never for another project's baselines.
        """
        known = self.collected | self.deselected | self.defined
        full = {n.split("::")[0] for n in self.collected | self.deselected} - narrowed
        written = {w.path for w in self.writes}
        found = []
        for path, data in self.storage.discover():
            test = data.get("test")
            if not isinstance(test, str) or test in known or str(path) in written:
                continue
            module = test.split("::")[0]
            if self.storage.owns(data) and (module in full
                                            or not (self.rootdir / module).exists()):
                found.append(StaleBaseline(path, self.shown(path), test))
        return found

    def report(self) -> FusionReport:
        """The run's report, built from the typed records once the session end has applied
        the writes and judged the stale files (built afresh on each call before that)."""
        from .report import FusionReport

        if self._report is not None:
            return self._report
        end = self.end or SessionEnd()
        report = FusionReport(tuple(sorted(self.records.values(), key=lambda r: r.nodeid)),
                              end.written, end.stale, end.stale_removed)
        if self.end is not None:
            self._report = report
        return report
