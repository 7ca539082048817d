"""Self-contained HTML pages: one analysis, a baseline-vs-current comparison, and an index.

Reads the dict ``data.page_data`` builds (and, for a comparison, the baseline's clusters,
what became of each cluster and the ops to mark on each pane); writes one HTML string with
the CSS, the scripts (``static/*.js``, package data) and the data (JSON in a
``<script type=application/json>``) inline, so the file opens from disk with no network.
Nothing in a page loads anything.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from ...fileio import write_atomic
from ...units import counted
from ..units import fmt_bytes

SCRIPTS = ("graph.js", "panel.js", "main.js")  # in load order


def asset(name: str) -> str:
    return resources.files("fusion_core.report.html").joinpath("static", name).read_text(
        encoding="utf-8")


def _json_script(doc: dict[str, Any]) -> str:
    # `<` escaped so no `</script>` or `<!--` inside the data can end the element.
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    return f'<script type="application/json" id="fusion-data">{text}</script>'


def _shell(title: str, header: str, body: str, scripts: bool, doc: dict | None = None) -> str:
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(title)}</title>", f"<style>{asset('page.css')}</style>",
             "</head><body>", f"<header>{header}</header>", body]
    if doc is not None:
        parts.append(_json_script(doc))
    if scripts:
        parts += [f"<script>{asset(name)}</script>" for name in SCRIPTS]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _facts(page: dict[str, Any]) -> str:
    saved = page["unfused_bytes"] - page["fused_bytes"]
    share = f" ({saved / page['unfused_bytes']:.0%})" if page["unfused_bytes"] else ""
    bits = [f"{page['n_nodes']} nodes", counted(len(page['clusters']), "fusable cluster"),
            f"captured with {page['frontend']}", "inputs " + ", ".join(page["inputs"]),
            f"{fmt_bytes(saved)} of {fmt_bytes(page['unfused_bytes'])} cluster traffic "
            f"avoided{share}", counted(len(page['rejections']), "rejection")]
    if page.get("mode"):
        bits.append(f"kernels checked on {page['device']} ({page['mode']})")
    return " · ".join(html.escape(b) for b in bits)


_WORKSPACE = """<main><div id="panes"></div><aside>
<div class="tabs"><div class="tab" data-tab="details">Details</div>
<div class="tab" data-tab="rejections">Rejections ({n_rej})</div>
<div class="tab" data-tab="inductor">Inductor{n_ind}</div></div>
<div class="tab-body" id="tab-details"><p class="muted">Click a cluster (a coloured box) or an op
to see its source lines, diff, generated Triton kernel, traffic, numerics and timings. Dark
boxes are opaque ops (GEMMs, convolutions, attention): barriers no fused kernel crosses. A red
dashed op is part of a rejected candidate; ✗ names the failed check.</p></div>
<div class="tab-body" id="tab-rejections" hidden></div>
<div class="tab-body" id="tab-inductor" hidden></div></aside></main>"""


def _workspace(page: dict[str, Any]) -> str:
    n_ind = f" ({len(page['inductor_missed'])} unmatched)" if page["inductor_ran"] else ""
    return _WORKSPACE.format(n_rej=len(page["rejections"]), n_ind=n_ind)


def analysis_html(page: dict[str, Any], back: str = "") -> str:
    """The page for one analysis (the CLI's `--html`, the plugin's page per test)."""
    link = f'<a href="{html.escape(back)}">← all tests</a> · ' if back else ""
    header = (f"<h1>{html.escape(page['title'])}</h1><div class=facts>{link}{_facts(page)}"
              "</div>")
    return _shell(f"fusion-advisor: {page['title']}", header, _workspace(page), True,
                  {"kind": "analysis", "page": page})


# What a compare page's colours mean: cluster outlines by status, then marked ops.
LEGEND = (
    ("clusters", (("st-kept", "kept"), ("st-grown", "grown"), ("st-merged", "merged"),
                  ("st-shrunk", "shrunk: its ops in one smaller cluster"),
                  ("st-split", "split: in several"), ("st-lost", "lost: in none"),
                  ("st-new", "new"))),
    ("ops", (("mark-lost", "lost from its baseline cluster"),
             ("mark-outside", "now outside that cluster"),
             ("mark-gone", "no longer in the graph"),
             ("mark-new", "new in a cluster"),
             ("absent", "dashed: only in the other pane's graph"))),
)


def _legend() -> str:
    rows = "".join(f"<span class=legend-group>{html.escape(title)}:</span>" + "".join(
        f'<span class="key {cls}">{html.escape(text)}</span>' for cls, text in keys)
        for title, keys in LEGEND)
    return f'<div class="legend">{rows}</div>'


def compare_html(page: dict[str, Any], baseline: Sequence[dict[str, Any]],
                 current: Sequence[dict[str, Any]],
                 marks: Mapping[str, Mapping[str, Sequence[str]]], status: str,
                 messages: Sequence[str], back: str = "") -> str:
    """The baseline's clusters and the current ones side by side, on one layout.

    `baseline`: the baseline's clusters, each with `nodes` (as drawn: `page`'s graph holds
    the baseline's nodes the current graph lacks), `ops`, `where`, `category`, traffic and
    what became of it (`status`, `parts`, `lost`, `new`); `current`: per current cluster the
    same change fields; `marks`: per pane (`base`, `current`) node name -> (mark, why).
    """
    link = f'<a href="{html.escape(back)}">← all tests</a> · ' if back else ""
    items = "".join(f"<li>{html.escape(m)}</li>" for m in messages)
    header = (f"<h1>{html.escape(page['title'])} — {html.escape(status)}</h1>"
              f"<div class=facts>{link}{_facts(page)}</div><ul class=messages>{items}</ul>"
              f"{_legend()}")
    doc = {"kind": "compare", "page": page,
           "compare": {"baseline": list(baseline), "current": list(current),
                       "marks": {pane: {n: list(m) for n, m in by_node.items()}
                                 for pane, by_node in marks.items()},
                       "status": status}}
    return _shell(f"fusion-advisor: {page['title']} ({status})", header, _workspace(page),
                  True, doc)


INDEX_COLUMNS = ("test", "model", "clusters", "traffic saved", "baseline", "timings")


def index_html(rows: Sequence[dict[str, Any]], provenance: dict[str, str]) -> str:
    """One row per checked test, linking to its page; rows hold the INDEX_COLUMNS keys
    (already formatted) and `href` (the test's page, or "" when none was written)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in INDEX_COLUMNS)
    body = []
    for r in rows:
        cells = []
        for c in INDEX_COLUMNS:
            text = html.escape(str(r.get(c, "")))
            if c == "test" and r.get("href"):
                text = f'<a href="{html.escape(r["href"])}">{text}</a>'
            cls = f' class="status-{html.escape(str(r.get(c, "")))}"' if c == "baseline" else ""
            cells.append(f"<td{cls}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    prov = ", ".join(f"{k} {v}" for k, v in provenance.items())
    header = (f"<h1>Fusion report</h1><div class=facts>{counted(len(rows), 'test')} checked · "
              f"{html.escape(prov)}</div>")
    table = f'<div class="index"><table><tr>{head}</tr>{"".join(body)}</table></div>'
    return _shell("fusion-advisor: fusion report", header, table, False)


def write_page(path: Any, text: str) -> None:
    write_atomic(path, text)
