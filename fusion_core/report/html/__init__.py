"""The visual report: a self-contained HTML page with the graph, its clusters and kernels.

``page_data`` collects what a page shows (data.py, laid out by layout.py); ``analysis_html``,
``compare_html`` and ``index_html`` write the pages (page.py); ``write_html`` is the CLI's
``--html FILE``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .data import Ghost, page_data
from .page import analysis_html, compare_html, index_html, write_page

__all__ = ["CLI_HINTS", "Ghost", "analysis_html", "compare_html", "index_html", "page_data",
           "write_html"]


# What the CLI's page says where a section is empty: the flag that fills it.
CLI_HINTS = {"inductor": "run with --vs-inductor",
             "untimed": "timings not run: --no-timing"}


def write_html(path: str | Path, analysis: Any, extra: dict[str, Any] | None = None,
               mappings: Any = None, kernels: Any = None) -> None:
    """Write the page for `analysis` and the CLI's later results (`extra`) to `path`;
    `kernels` (cluster -> source, why none) spares generating each kernel again."""
    write_page(path, analysis_html(page_data(analysis, extra, mappings, kernels=kernels,
                                             hints=CLI_HINTS)))
