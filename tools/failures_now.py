"""A pytest plugin that writes each failure's traceback the moment it is reported.

For runs that may be cut off before pytest's summary (a device call's time limit): with
``-p failures_now`` (``tools/`` on ``PYTHONPATH``) every failed or errored test's report is
appended to ``$FAILURES_LOG`` (default ``failures.log``) as it arrives. Under xdist the
controller writes (workers' reports reach its hook); the workers do not, so each failure is
written once.
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
    if not report.failed or _config is None or not _config.stash.get(_WRITES, True):
        return
    path = os.environ.get("FAILURES_LOG", "failures.log")
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n")
        for title, text in report.sections:  # captured output: a pytester run's own report
            log.write(f"---- {title}\n{text[-6000:]}\n")
        log.write("\n")
