"""The run's typed records: what one test found, what a baseline write will do, what the
session end did.

Plain frozen values made by the judging step (``judge``) and the session end (``finish``),
read by the report (``report.FusionReport``) and the HTML index. A worker sends them to
the xdist controller as JSON-able data (``to_data``/``from_data``): pytest serializes
what travels with a test report, so nothing richer than lists and dicts may cross.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

# Statuses that fail their test (and the run's report counts as failing).
FAILING = ("missing", "error", "regressed", "unaccepted")
NOT_CHECKED = "not checked: test failed before check"


@dataclass(frozen=True)
class TestRecord:
    """One checked test's verdict, as the reports show it."""

    __test__ = False  # a data class, not a pytest test class

    nodeid: str
    # created updated replaced renamed measured missing error regressed unaccepted (an
    # improvement, under fusion_improvements = fail) improved changed pass, or NOT_CHECKED
    status: str
    model: str = ""
    clusters: int = 0
    unfused_bytes: int = 0
    saved_bytes: int = 0
    timing_note: str = ""
    model_speedup: float | None = None  # median eager / median fused, when measured here
    # The same by wall time (a Python caller's clock), when model_speedup is device time
    model_wall_speedup: float | None = None
    # Its wall time / its device time, when judged by device time: above HOST_BOUND_FACTOR
    # the report says the model is host-bound
    model_host_factor: float | None = None
    model_launches: int | None = None  # GPU kernels a forward of the patched model launches
    messages: tuple[str, ...] = ()
    baseline: str = ""  # the baseline file, rootdir-relative
    hw_key: str | None = None  # the GPU the test's timings came from (None: no CUDA)
    timings_judged: int = 0  # timings compared with the baseline's
    timing_gap: str = ""  # why none was (compare.GAPS), "" when some were
    # {backend: counts and our clusters beside Inductor's kernels} (compiled_report.summary)
    compiled: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failing(self) -> bool:
        return self.status in FAILING

    def to_data(self) -> dict[str, Any]:
        data = asdict(self)
        data["messages"] = list(self.messages)
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> TestRecord:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["messages"] = tuple(values.get("messages", ()))
        return cls(**values)


@dataclass(frozen=True)
class BaselineWrite:
    """A baseline file the controller writes at session end (queued during the test)."""

    path: str  # where it goes (absolute)
    shown: str  # the same, rootdir-relative, for the report
    test: str
    action: str  # created updated replaced renamed measured, or "refreshed lines of"
    changes: tuple[str, ...] = ()  # what changed, one line each, for the summary
    text: str | None = None  # the YAML; None: a rename of `move_from` only
    move_from: str | None = None  # the old-named file it replaces (removed once written)

    def to_data(self) -> dict[str, Any]:
        data = asdict(self)
        data["changes"] = list(self.changes)
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> BaselineWrite:
        return cls(**{**data, "changes": tuple(data.get("changes", ()))})


@dataclass(frozen=True)
class StaleBaseline:
    """A baseline no test of this run's files uses."""

    path: Path
    shown: str  # rootdir-relative
    test: str  # the test id the file names


@dataclass(frozen=True)
class SessionEnd:
    """What the controller's session end did (``finish.finish``)."""

    written: tuple[BaselineWrite, ...] = ()
    stale: tuple[StaleBaseline, ...] = ()
    stale_removed: bool = False  # the stale files were deleted (=all or --fusion-prune-stale)
    errors: tuple[str, ...] = ()  # problems that fail the run, one line each
    notes: tuple[str, ...] = ()  # things worth a line that do not
    report_files: tuple[Path, ...] = ()  # the Markdown and JSON reports written
    failed: bool = False  # the run's exit status must become a failure
