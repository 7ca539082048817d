"""A pytest plugin that writes each failure's traceback the moment it is reported.

For runs that may be cut off before pytest's summary (a device call's time limit): with
``-p failures_now`` (``tools/`` on ``PYTHONPATH``) every failed or errored test's report is
appended to ``$FAILURES_LOG`` (default ``failures.log``) as it arrives. Under xdist the
controller writes (workers' reports reach its hook); the workers do not, so each failure is
written once. With ``$DURATIONS_LOG`` set, each test's seconds (setup, call and teardown
together) are appended there when its teardown is reported, slowest-first sorting left to the
reader (``sort -rn``): a run killed by its time limit still says where the time went.
"""

from __future__ import annotations

import os

import pytest

_WRITES = pytest.StashKey[bool]()
_config: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config
    config.stash[_WRITES] = not hasattr(config, "workerinput")  # an xdist worker has it


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _config is None or not _config.stash.get(_WRITES, True):
        return
    _note_duration(report)
    if not report.failed:
        return
    path = os.environ.get("FAILURES_LOG", "failures.log")
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n")
        for title, text in report.sections:  # captured output: a pytester run's own report
            log.write(f"---- {title}\n{text[-6000:]}\n")
        log.write("\n")


_SPENT: dict[str, float] = {}


def _note_duration(report: pytest.TestReport) -> None:
    path = os.environ.get("DURATIONS_LOG")
    if not path:
        return
    _SPENT[report.nodeid] = _SPENT.get(report.nodeid, 0.0) + report.duration
    if report.when == "teardown":
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{_SPENT.pop(report.nodeid):8.1f} {report.nodeid}\n")
