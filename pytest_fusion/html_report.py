"""The HTML side of `--fusion-report=PATH`: an index of checked tests and a page per test.

Reads, after each checked test, its analysis (``FusionAdvisor.checked_result``), its
record and, for a regressed test, its baseline file; builds the test's page there (in the
worker under xdist, where the analysis lives) and keeps the HTML text. The controller
collects the pages (``workeroutput["fusion_html"]``) and writes ``DIR/index.html`` and
``DIR/tests/<test>.html`` when PATH is a folder (as the md/json files decide), else
``PATH.html`` and ``PATH-tests/``.
A regressed test's page puts the baseline's clusters and the current ones side by side
on the current graph, with lost, split and new clusters marked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .compare import fmt_bytes
from .snapshot import BaselineError, Snapshot, baseline_name

PAGES_KEY = "fusion_html"
# Why a page's section is empty: the plugin runs no Inductor and no numerics check (and
# names no command-line flags: those are the CLI's).
HINTS = {"inductor": "the pytest plugin does not run Inductor",
         "numerics": "the pytest plugin checks structure and, on a GPU, timings"}
# How the comparison pairs clusters, stage by stage (compare.py); baselines of schema 1
# record no identity, so their clusters pair by the later keys.
PAIRING = (lambda c: c.ident, lambda c: (c.ops, c.lines), lambda c: c.ops)


def _pairs(rec: Any) -> set[tuple[str, str]]:
    return set(zip(rec.nodes, rec.ops, strict=False))


def cluster_status(base: Snapshot, cur: Snapshot) -> tuple[list[str], dict[int, str]]:
    """Per baseline cluster kept/merged/split/lost; per current cluster index kept/split/new.

    Clusters pair as the comparison pairs them: by identity (ops, module, function,
    ordinal), then by ops and lines, then by ops alone, each stage over what the earlier
    ones left. An unpaired baseline cluster whose (node, op) pairs now sit in one larger
    cluster merged, in several or in a smaller one split, in none was lost.
    """
    rest = list(range(len(cur.clusters)))
    paired: set[int] = set()
    for key in PAIRING:
        for bi, b in enumerate(base.clusters):
            if bi in paired:
                continue
            hit = next((i for i in rest if key(cur.clusters[i]) == key(b)), None)
            if hit is not None:
                paired.add(bi)
                rest.remove(hit)
    base_status = ["kept" if bi in paired else "" for bi in range(len(base.clusters))]
    unpaired = [bi for bi in range(len(base.clusters)) if bi not in paired]
    cur_status = {i: "kept" for i in range(len(cur.clusters)) if i not in rest}
    for bi in unpaired:
        mine = _pairs(base.clusters[bi])
        parts = [i for i in range(len(cur.clusters)) if _pairs(cur.clusters[i]) & mine]
        if any(mine <= _pairs(cur.clusters[i]) for i in parts):
            base_status[bi] = "merged"
            cur_status.update({i: "kept" for i in parts})
        elif parts:
            base_status[bi] = "split"
            cur_status.update({i: "split" for i in parts})
        else:
            base_status[bi] = "lost"
    for i in rest:
        cur_status.setdefault(i, "new")
    return base_status, cur_status


def _baseline_view(base: Snapshot, status: list[str]) -> list[dict[str, Any]]:
    return [{"ops": list(c.ops), "where": c.lines, "category": c.category,
             "nodes": list(c.nodes), "status": s, "unfused_bytes": c.unfused_bytes,
             "fused_bytes": c.fused_bytes,
             "note": "" if c.kernel else f"no kernel: {c.kernel_error}" if c.kernel_error else ""}
            for c, s in zip(base.clusters, status, strict=True)]


class HtmlReport:
    """Registered when `--fusion-report=PATH` names a path; see the module docstring."""

    def __init__(self, plugin: Any) -> None:
        self.plugin = plugin
        self.pages: dict[str, str] = {}  # nodeid -> page HTML

    def page_name(self, nodeid: str) -> str:
        return baseline_name(nodeid).removesuffix(".yaml") + ".html"

    def _page(self, nodeid: str, result: Any, rec: dict[str, Any]) -> str:
        import fusion_core

        back = "../index.html"
        page = fusion_core.page_data(result.analysis, measured=result.measurement,
                                     title=nodeid, hints=HINTS)
        if rec["status"] != "regressed":
            return fusion_core.analysis_html(page, back=back)
        from .session import read_baseline

        path = self.plugin.folder / baseline_name(nodeid)
        try:
            base = read_baseline(path, self.plugin.shown(path))
        except BaselineError:
            base = None
        if base is None:
            return fusion_core.analysis_html(page, back=back)
        base_status, cur_status = cluster_status(base, result.snapshot)
        return fusion_core.compare_html(page, _baseline_view(base, base_status), cur_status,
                                        rec["status"], rec["messages"], back=back)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        from .plugin import advisor_key

        advisor = item.stash.get(advisor_key, None)
        result = getattr(advisor, "checked_result", None)
        rec = self.plugin.session.records.get(item.nodeid)
        if result is None or rec is None:
            return
        page = self._page(item.nodeid, result, rec)
        if self.plugin.is_worker:  # shipped with the worker's output, whatever the hook order
            item.config.workeroutput.setdefault(PAGES_KEY, {})[item.nodeid] = page
        else:
            self.pages[item.nodeid] = page

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session):
        # After the plugin's own session end: the records are final, the md/json written.
        result = yield
        if not self.plugin.is_worker:
            self.write()
        return result

    def targets(self) -> tuple[Path, Path]:
        """(index file, folder of the test pages)."""
        p = self.plugin
        given = p.config.getoption("fusion_report")
        where = Path(p.config.invocation_params.dir, given)
        if given.endswith(("/", os.sep)) or where.is_dir():  # as for the md/json files
            return where / "index.html", where / "tests"
        if where.suffix in (".md", ".json", ".html"):
            where = where.with_suffix("")
        return where.with_name(where.name + ".html"), where.with_name(where.name + "-tests")

    def write(self) -> None:
        import fusion_core

        p = self.plugin
        index, folder = self.targets()
        rows = []
        for rec in sorted(p.session.records.values(), key=lambda r: r["nodeid"]):
            href = ""
            if rec["nodeid"] in self.pages:
                folder.mkdir(parents=True, exist_ok=True)
                name = self.page_name(rec["nodeid"])
                fusion_core.write_atomic(folder / name, self.pages[rec["nodeid"]])
                href = f"{folder.name}/{name}"
            speedup = rec.get("model_speedup")
            timing = rec.get("timing_note") or "—"
            rows.append({"test": rec["nodeid"], "model": rec["model"],
                         "clusters": rec["clusters"], "href": href,
                         "traffic saved": fmt_bytes(rec["saved_bytes"]),
                         "baseline": rec["status"],
                         "timings": f"model {speedup:.2f}× faster fused; {timing}" if speedup
                         else timing})
        index.parent.mkdir(parents=True, exist_ok=True)
        fusion_core.write_atomic(index, fusion_core.index_html(rows, p.provenance))
        p.report_files = [*getattr(p, "report_files", []), index]

    def merge(self, node: Any) -> None:
        self.pages.update(getattr(node, "workeroutput", {}).get(PAGES_KEY, {}))


class _XdistPages:
    def __init__(self, report: HtmlReport) -> None:
        self.report = report

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.report.merge(node)


def register(config: pytest.Config, plugin: Any) -> None:
    """Register the HTML report (`--fusion-report` was given a path)."""
    report = HtmlReport(plugin)
    config.pluginmanager.register(report, "fusion-html-report")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistPages(report), "fusion-html-xdist")
