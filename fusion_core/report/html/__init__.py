"""The visual report: a self-contained HTML page with the graph, its clusters and kernels.

``page_data`` collects what a page shows (data.py, laid out by layout.py) from an analysis and
the typed results of later steps (``PageResults``, results.py); ``analysis_html``,
``compare_html`` and ``index_html`` write the pages (page.py); ``write_html`` is the CLI's
``--html FILE``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .data import Ghost, page_data
from .page import analysis_html, compare_html, index_html, write_page
from .results import ClusterTimes, PageResults, measured_times

if TYPE_CHECKING:
    from ...pipeline import Analysis

__all__ = ["CLI_HINTS", "ClusterTimes", "Ghost", "PageResults", "analysis_html", "compare_html",
           "index_html", "measured_times", "page_data", "write_html"]


# What the CLI's page says where a section is empty: the flag that fills it.
CLI_HINTS = {"inductor": "run with --vs-inductor",
             "untimed": "timings not run: --no-timing"}


def write_html(path: str | Path, analysis: Analysis, results: PageResults | None = None) -> None:
    """Write the page for `analysis` and the CLI run's later results to `path` (its
    kernels, generated once, spare generating each again)."""
    write_page(path, analysis_html(page_data(analysis, results, hints=CLI_HINTS)))
