"""The HTML side of `--fusion-report=PATH`: an index of checked tests and a page per test.

Reads, after each checked test, its result (``FusionAdvisor.checked_result``: the analysis
and the kernels already generated for it), its record and, for a test whose baseline
differs, that baseline file; builds the test's page there (in the worker under xdist, where
the analysis lives) and keeps the HTML text in the session. The controller collects the pages
(``workeroutput["fusion_html"]``) and writes ``DIR/index.html`` (rows from the run's
``FusionReport``, as the terminal table's) and ``DIR/tests/<test>.html`` when PATH is a
folder (as the md/json files decide), else ``PATH.html`` and ``PATH-tests/``.
The page of a test that differs from its baseline (regressed, improved, changed) puts the
baseline's clusters and the current ones side by side, on one layout of both graphs, with
each cluster's status and the ops it lost or gained marked on both panes
(``page_diff.py``), paired as the comparison paired them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .baseline_names import baseline_name
from .records import TestRecord
from .snapshot import BaselineError, Snapshot

if TYPE_CHECKING:  # imported where used: it imports torch
    from .page_diff import Change, PageDiff
    from .result import FusionResult
    from .session import FusionSession

PAGES_KEY = "fusion_html"
# Statuses whose page shows the baseline beside the current clusters.
DIFFERS = ("regressed", "unaccepted", "improved", "changed")
# Why a page's section is empty: the plugin runs no Inductor and no numerics check (and
# names no command-line flags: those are the CLI's).
HINTS = {"inductor": "the pytest plugin does not run Inductor",
         "numerics": "the pytest plugin checks structure and, on a GPU, timings"}


def _change(c: Change) -> dict[str, Any]:
    return {"status": c.status, "parts": list(c.parts), "lost": list(c.lost),
            "new": list(c.new)}


def _baseline_view(base: Snapshot, diff: PageDiff) -> list[dict[str, Any]]:
    return [{"ops": list(c.ops), "where": c.lines, "category": c.category,
             "nodes": list(ch.nodes), "unfused_bytes": c.unfused_bytes,
             "fused_bytes": c.fused_bytes, **_change(ch),
             "note": "" if c.kernel else f"no kernel: {c.kernel_error}" if c.kernel_error else ""}
            for c, ch in zip(base.clusters, diff.baseline, strict=True)]


class HtmlReport:
    """Registered when `--fusion-report=PATH` names a path; see the module docstring."""

    def __init__(self, session: FusionSession) -> None:
        self.session = session

    def page_name(self, nodeid: str) -> str:
        return baseline_name(nodeid).removesuffix(".yaml") + ".html"

    def _page(self, nodeid: str, result: FusionResult, rec: TestRecord) -> str:
        import fusion_core

        back = "../index.html"
        base = None
        if rec.status in DIFFERS:
            try:
                base = self.session.storage.read_test(nodeid)
            except BaselineError:
                pass
        # The page takes typed results: the kernels generated with the analysis (not again
        # here) and the measurement hook's timings
        # and, with a compiled record, its agreement in the Inductor tab (the first backend's)
        generated, matches = result.generated, result.compiled_matches or {}
        results = fusion_core.PageResults(
            kernels=fusion_core.kernel_set(generated.kernels, generated.failed),
            agreement=matches[min(matches)] if matches else None,
            measured=fusion_core.measured_times(result.measurement))
        hints = HINTS if not matches else {k: v for k, v in HINTS.items() if k != "inductor"}
        if base is None:
            page = fusion_core.page_data(result.analysis, results, title=nodeid, hints=hints)
            return fusion_core.analysis_html(page, back=back)
        from .compare import compare
        from .page_diff import page_diff

        diff = page_diff(base, result.snapshot, result.analysis.graph,
                         compare(base, result.snapshot).pairs)
        page = fusion_core.page_data(result.analysis, results, title=nodeid,
                                     hints=hints, ghosts=diff.ghosts,
                                     current_only=diff.current_only)
        return fusion_core.compare_html(page, _baseline_view(base, diff),
                                        [_change(c) for c in diff.current], diff.marks,
                                        rec.status, list(rec.messages), back=back)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        from .plugin import advisor_key

        advisor = item.stash.get(advisor_key, None)
        result = getattr(advisor, "checked_result", None)
        rec = self.session.records.get(item.nodeid)
        if result is None or rec is None:
            return
        page = self._page(item.nodeid, result, rec)
        if self.session.is_worker:  # shipped with the worker's output, whatever the hook order
            item.config.workeroutput.setdefault(PAGES_KEY, {})[item.nodeid] = page
        else:
            self.session.pages[item.nodeid] = page

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session):
        # After the plugin's own session end: the records are final, the md/json written.
        result = yield
        if not self.session.is_worker and not self.write():
            # Asked for and not written, as for the md/json files (the plugin's session end,
            # which set the exit status from those, has run already).
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return result

    def targets(self) -> tuple[Path, Path]:
        """(index file, folder of the test pages)."""
        config = self.session.config
        given = config.getoption("fusion_report")
        where = Path(config.invocation_params.dir, given)
        if given.endswith(("/", os.sep)) or where.is_dir():  # as for the md/json files
            return where / "index.html", where / "tests"
        if where.suffix in (".md", ".json", ".html"):
            where = where.with_suffix("")
        return where.with_name(where.name + ".html"), where.with_name(where.name + "-tests")

    def write(self) -> bool:
        """Write the pages and the index; False (and one line in the session's errors) when a
        file or the pages folder cannot be written: the run still ends with its summary."""
        index, folder = self.targets()
        try:
            self._write(index, folder)
        except OSError as e:
            where = e.filename or index
            if isinstance(e, (FileExistsError, NotADirectoryError)):
                reason = (f"{where} is not a folder (a file of that name is in the way): "
                          "move it away or choose another --fusion-report PATH")
            else:
                reason = (f"{e.strerror or e} (check that folder's permissions, or choose "
                          "another --fusion-report PATH)")
                reason = f"{where}: {reason}"
            self.session.errors.append(f"could not write the fusion HTML report: {reason}")
            return False
        return True

    def _write(self, index: Path, folder: Path) -> None:
        import fusion_core

        s = self.session
        hrefs = {}
        for nodeid in sorted(set(s.pages) & set(s.records)):
            folder.mkdir(parents=True, exist_ok=True)
            name = self.page_name(nodeid)
            fusion_core.write_atomic(folder / name, s.pages[nodeid])
            hrefs[nodeid] = f"{folder.name}/{name}"
        index.parent.mkdir(parents=True, exist_ok=True)
        rows = s.report().index_rows(hrefs)
        fusion_core.write_atomic(index, fusion_core.index_html(rows, s.provenance))
        s.report_files.append(index)

    def merge(self, node: Any) -> None:
        self.session.pages.update(getattr(node, "workeroutput", {}).get(PAGES_KEY, {}))


class _XdistPages:
    def __init__(self, report: HtmlReport) -> None:
        self.report = report

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.report.merge(node)


def register(config: pytest.Config, session: FusionSession) -> None:
    """Register the HTML report (`--fusion-report` was given a path)."""
    report = HtmlReport(session)
    config.pluginmanager.register(report, "fusion-html-report")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistPages(report), "fusion-html-xdist")
