"""The HTML report without a browser: layout, repeated blocks, page data, self-containment,
and the baseline-vs-current cluster classification of the plugin's pages."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fusion_core.report.html import analysis_html, compare_html, index_html, page_data
from fusion_core.report.html.blocks import block_key, find_bands
from fusion_core.report.html.layout import LayoutNode, layout
from fusion_core.report.html.page import SCRIPTS

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "fusion_core" / "report" / "html" / "static"
sys.path.insert(0, str(ROOT / "examples"))


@pytest.fixture(scope="module")
def microgpt():
    import torch

    from fusion_core.ir.shapes import InputSpec
    from fusion_core.pipeline import analyze_file

    torch.manual_seed(0)
    return analyze_file(ROOT / "examples" / "microgpt.py", [InputSpec.parse("2,16", "int64")])


def test_layout_puts_every_edge_downwards_and_keeps_a_layer_free_of_overlaps():
    # a diamond and a long skip edge: x -> a -> b -> c -> d, x -> d
    names = ["x", "a", "b", "c", "d"]
    nodes = [LayoutNode(n, 40.0, 0) for n in names]
    edges = [("x", "a"), ("a", "b"), ("b", "c"), ("c", "d"), ("x", "d"), ("a", "c")]
    lay = layout(nodes, edges)
    assert [lay.layer[n] for n in names] == [0, 1, 2, 3, 4]
    assert all(lay.layer[v] > lay.layer[u] for u, v, _ in lay.edges)
    skip = next(pts for u, v, pts in lay.edges if (u, v) == ("x", "d"))
    assert [layer for _, layer in skip] == [1, 2, 3]  # one bend per crossed layer
    for layer in range(5):  # the bend never overlaps the node of its layer
        node = next(n for n in names if lay.layer[n] == layer)
        for x, bend_layer in skip:
            if bend_layer == layer:
                assert abs(x - lay.x[node]) >= 20 + 3
    assert not lay.stubs


def test_layout_sinks_input_less_nodes_and_stubs_edges_that_skip_a_band():
    nodes = [LayoutNode("in", 30, 0), LayoutNode("k", 30, 0, sink=True),
             LayoutNode("a", 30, 0), LayoutNode("copy", 30, 0, sink=True),
             LayoutNode("b", 30, 0), LayoutNode("c", 30, 0),
             LayoutNode("m", 30, 1), LayoutNode("z", 30, 2)]
    edges = [("in", "a"), ("a", "b"), ("b", "c"), ("k", "c"), ("c", "m"), ("in", "z"),
             ("in", "copy"), ("copy", "c")]
    lay = layout(nodes, edges)
    assert lay.layer["k"] == lay.layer["c"] - 1  # next to its consumer, not at the top
    assert lay.layer["copy"] == lay.layer["c"] - 1  # a recompute copy beside its reader
    assert lay.band_start == (0, 4, 5) and lay.band_depth == (4, 1, 1)
    assert lay.stubs == (("in", "z"),)


def test_block_keys_and_repeated_runs():
    assert block_key("blocks.3.attn.proj") == ("blocks", 3)
    assert block_key("transformer.h.11") == ("transformer.h", 11)
    assert block_key("L['self'].h.0.mlp") == ("h", 0)
    assert block_key("lm_head") is None
    nodes = ["e", "a0", "b0", "a1", "b1", "a2", "c2", "f"]
    paths = {"a0": "h.0", "b0": "h.0.mlp", "a1": "h.1", "b1": "h.1.mlp", "a2": "h.2",
             "c2": "h.2.mlp"}
    ops = dict.fromkeys(nodes, "add") | {"b0": "gelu", "b1": "gelu", "c2": "tanh"}
    bands = find_bands(nodes, paths, ops)
    # labelled as the model indexes them, `self.h[0]`, not the module path `h.0`
    assert [b.label for b in bands.bands] == ["", "self.h[0]", "self.h[1]", "self.h[2]", ""]
    # h.2 computes something else, so only h.0-h.1 collapse
    assert [(g.label, g.bands) for g in bands.groups] == [("self.h[0–1]", (1, 2))]
    assert dict(bands.groups[0].counterpart) == {"a1": "a0", "b1": "b0"}


def test_without_module_paths_blocks_come_from_a_repeated_op_sequence():
    from fusion_core.report.html.blocks import repeated_run

    layer = ["layer_norm", "Linear", "gelu", "Linear", "add"]
    ops = ["input", "Embedding"] + layer * 3 + ["layer_norm", "output"]
    assert repeated_run(ops) == (2, 5, 3)
    nodes = [f"n{i}" for i in range(len(ops))]
    bands = find_bands(nodes, {}, dict(zip(nodes, ops, strict=True)))
    assert [b.label for b in bands.bands] == ["", "repeat.0", "repeat.1", "repeat.2", ""]
    assert bands.groups[0].label == "repeat.0–2"
    assert repeated_run(["a", "b", "c", "d", "e", "f"]) is None


def test_page_data_for_microgpt_draws_its_blocks_clusters_and_kernels(microgpt):
    page = page_data(microgpt)
    g = page["graph"]
    drawn = {n[0] for n in g["nodes"]}
    assert not any(n.startswith("blocks_0_ln1_weight") for n in drawn)  # parameters aren't
    assert [gr["label"] for gr in g["groups"]] == ["self.blocks[0–1]"]
    assert {b["label"] for b in g["bands"]} >= {"self.blocks[0]", "self.blocks[1]"}
    for c in microgpt.clusters:  # every cluster member is drawn and tagged with its cluster
        for name in c.nodes:
            row = next(n for n in g["nodes"] if n[0] == name)
            assert row[6] == c.index
    attn = next(c for c in page["clusters"] if "softmax" in c["ops"])
    assert "@triton.jit" in attn["kernel"]
    assert any("F.softmax" in text for _, text in attn["source"])
    assert attn["diff"].startswith("examples/microgpt.py:31-34")


def _remote_references(text: str) -> list[str]:
    attrs = re.findall(r"""(?:src|href|action|xlink:href)\s*=\s*["']?\s*(?:https?:)?//""", text,
                       flags=re.I)
    css = re.findall(r"url\(\s*['\"]?(?:https?:)?//|@import", text, flags=re.I)
    calls = re.findall(r"\bfetch\s*\(|XMLHttpRequest|\bimport\s*\(|new\s+WebSocket|"
                       r"navigator\.sendBeacon|<link\b|<iframe\b", text)
    return attrs + css + calls


def test_pages_are_self_contained(microgpt):
    page = page_data(microgpt)
    pages = [analysis_html(page), compare_html(page, [], [], {}, "regressed", ["lost"]),
             index_html([{"test": "t", "href": "tests/t.html"}], {"torch": "x"})]
    for text in pages:
        assert _remote_references(text) == []
        assert "http://" not in text and "https://" not in text
        assert text.count("<script>") in (0, len(SCRIPTS))  # every script inline
        assert "<script src" not in text
    assert _remote_references('<img src="https://x/y.png">')  # the check does catch one


def test_rejections_say_what_was_dropped_as_the_user_wrote_it(tmp_path):
    """The panel prints `retried` as is: the dropped `h * s` by op and line, not `mul_1`."""
    from model_sources import RUNTIME_SCALE

    from fusion_core.ir.shapes import InputSpec
    from fusion_core.pipeline import analyze_file

    (tmp_path / "scale.py").write_text(RUNTIME_SCALE)
    page = page_data(analyze_file(tmp_path / "scale.py", [InputSpec((4, 8))]))
    assert [r["retried"] for r in page["rejections"]] == ["; dropped `mul` (line 8) and retried"]
    panel = (STATIC / "panel.js").read_text()
    assert "r.culprits.join" not in panel and "r.reason + r.retried" in panel


def test_data_cannot_close_the_script_element(microgpt):
    page = page_data(microgpt)
    page["title"] = "</script><script>alert(1)</script>"
    text = analysis_html(page)
    assert text.count("</script>") == len(SCRIPTS) + 1


def test_static_files_ship_as_package_data():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["fusion_core"]
    shipped = {p.name for g in globs for p in (ROOT / "fusion_core").glob(g)}
    assert set(SCRIPTS) | {"page.css"} <= shipped


def test_scripts_parse_as_javascript():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the browser tests still load every script")
    for name in SCRIPTS:
        done = subprocess.run([node, "--check", str(STATIC / name)], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr


def _rec(ops, nodes, lines="m.py:1-3", module="blk"):
    from pytest_fusion.snapshot import ClusterRec

    return ClusterRec(ops=tuple(ops), lines=lines, category="elementwise-chain",
                      nodes=tuple(nodes), unfused_bytes=10, fused_bytes=5, kernel="elementwise",
                      module=module, function="forward")


def _snap(*clusters):
    from pytest_fusion.snapshot import Snapshot

    return Snapshot(test="t", model="M", inputs=(), clusters=tuple(clusters), rejections=())


def _graph(*specs):
    """A FusionGraph of (name, refs) nodes, or (name, refs, copy_of) for a recompute copy;
    each node's op is its name up to the first `_` (`add_5` adds)."""
    from fusion_core.ir.graph import FusionGraph, Node, OpKind, Ref

    nodes = [Node(s[0], s[0].split("_")[0] if s[1] else "input",
                  OpKind.POINTWISE_BINARY if s[1] else OpKind.INPUT,
                  inputs=tuple(Ref(r) for r in s[1]), copy_of=s[2] if len(s) > 2 else "")
             for s in specs]
    return FusionGraph("M", tuple(nodes))


def _chain(*names, start="x"):
    out, prev = [], start
    for n in names:
        out.append((n, (prev,)))
        prev = n
    return out


def test_baseline_clusters_are_kept_grown_merged_shrunk_split_or_lost():
    from pytest_fusion.page_diff import page_diff

    graph = _graph(("x", ()), *_chain("mul", "relu", "add"), *_chain("tanh", "exp", "log"),
                   *_chain("sub", "neg"), *_chain("sin", "cos"),
                   *_chain("a1", "a2", "a3", "a4"), *_chain("p", "q", "r", "s"),
                   *_chain("abs", "sqrt"), *_chain("u", "v"))
    base = _snap(_rec(["mul", "relu", "add"], ["mul", "relu", "add"]),
                 _rec(["tanh", "exp"], ["tanh", "exp"]), _rec(["sub", "neg"], ["sub", "neg"]),
                 _rec(["sin", "cos"], ["sin", "cos"]),
                 _rec(["a1", "a2", "a3", "a4"], ["a1", "a2", "a3", "a4"]),
                 _rec(["p", "q"], ["p", "q"]), _rec(["r", "s"], ["r", "s"]),
                 _rec(["u", "v"], ["u", "v"], module="old_name"))
    cur = _snap(_rec(["mul", "relu"], ["mul", "relu"]),
                _rec(["tanh", "exp", "log"], ["tanh", "exp", "log"]),
                _rec(["sin", "cos"], ["sin", "cos"]), _rec(["a1", "a2"], ["a1", "a2"]),
                _rec(["a3", "a4"], ["a3", "a4"]), _rec(["p", "q", "r", "s"], ["p", "q", "r", "s"]),
                _rec(["abs", "sqrt"], ["abs", "sqrt"]),
                _rec(["u", "v"], ["u", "v"], lines="m.py:9", module="new_name"))
    d = page_diff(base, cur, graph)
    assert [c.status for c in d.baseline] == [
        "shrunk", "grown", "lost", "kept", "split", "merged", "merged", "kept"]
    assert [c.status for c in d.current] == [
        "shrunk", "grown", "kept", "split", "split", "merged", "new", "kept"]
    assert [c.parts for c in d.baseline][:5] == [(0,), (1,), (), (2,), (3, 4)]
    assert d.baseline[0].lost == ("add",) and d.current[1].new == ("log",)
    # each changed op is marked on both panes
    assert {n: m for n, (m, _) in d.marks["base"].items()} == {
        "add": "lost", "sub": "lost", "neg": "lost", "log": "new", "abs": "new", "sqrt": "new"}
    assert {n: m for n, (m, _) in d.marks["current"].items()} == {
        "add": "outside", "sub": "outside", "neg": "outside", "log": "new", "abs": "new",
        "sqrt": "new"}
    assert not d.ghosts and not d.current_only


def test_clusters_pair_by_identity_not_by_their_node_names():
    from pytest_fusion.page_diff import page_diff

    # blocks.1's cluster took the node names blocks.0's had: each still pairs with its own
    graph = _graph(("x", ()), *_chain("add", "ln"), *_chain("add_1", "ln_1", start="ln"))
    base = _snap(_rec(["add", "ln"], ["add", "ln"], module="blocks.0"),
                 _rec(["add", "ln"], ["add_1", "ln_1"], module="blocks.1"))
    cur = _snap(_rec(["add", "ln"], ["add_1", "ln_1"], module="blocks.0"),
                _rec(["add", "ln"], ["add", "ln"], module="blocks.1"))
    d = page_diff(base, cur, graph)
    assert [(c.status, c.parts) for c in d.baseline] == [("kept", (0,)), ("kept", (1,))]
    assert not d.marks["base"] and not d.marks["current"]


def test_a_baseline_recompute_copy_the_current_graph_lacks_is_drawn_and_marked():
    from fusion_core.report.html import Ghost
    from pytest_fusion.page_diff import page_diff

    # The baseline's `add_5` recomputed add_1 for add_2; the current graph has no such copy,
    # and its own `add_5` is another one (of add_2, for add_3).
    graph = _graph(("x", ()), ("y", ()), ("add_1", ("x", "y")), ("ln_2", ("add_1",)),
                   ("add_2", ("add_1", "y")), ("ln_3", ("add_2",)),
                   ("add_5", ("add_1", "y"), "add_2"), ("add_3", ("add_5", "x")))
    base = _snap(_rec(["add", "ln"], ["add_1", "ln_2"]),
                 _rec(["add", "add", "ln"], ["add_5", "add_2", "ln_3"]))
    cur = _snap(_rec(["add", "ln"], ["add_1", "ln_2"]), _rec(["add", "ln"], ["add_2", "ln_3"]),
                _rec(["add", "add"], ["add_5", "add_3"]))
    d = page_diff(base, cur, graph)
    shrunk = d.baseline[1]
    assert (shrunk.status, shrunk.parts) == ("shrunk", (1,))  # one smaller cluster, not split
    assert shrunk.nodes == ("add_5 (baseline)", "add_2", "ln_3")
    assert set(shrunk.nodes) != set(cur.clusters[1].nodes)  # the panes differ
    assert d.ghosts == (Ghost("add_5 (baseline)", "add", anchor="add_2", copy_of="add_1"),)
    assert shrunk.lost == ("add (a recompute of add_1 for add_2)",)
    assert d.current_only == {"add_5"}
    assert d.marks["base"]["add_5 (baseline)"][0] == "lost"
    assert d.marks["current"]["add_1"][0] == "outside"  # add_2 reads it from memory now
    assert d.marks["base"]["add_5"][0] == d.marks["current"]["add_5"][0] == "new"
    assert [c.status for c in d.current] == ["kept", "shrunk", "new"]


def test_an_op_the_current_graph_lacks_is_gone_and_drawn_beside_its_cluster():
    from fusion_core.report.html import Ghost
    from pytest_fusion.page_diff import page_diff

    graph = _graph(("x", ()), ("gate", ("x",)), ("mul", ("x", "gate")), ("add", ("mul", "x")))
    base = _snap(_rec(["sigmoid", "mul", "add"], ["sigmoid", "mul", "add"]))
    cur = _snap(_rec(["mul", "add"], ["mul", "add"]))
    d = page_diff(base, cur, graph)
    assert [(c.status, c.nodes) for c in d.baseline] == [
        ("shrunk", ("sigmoid (baseline)", "mul", "add"))]
    assert d.ghosts == (Ghost("sigmoid (baseline)", "sigmoid", anchor="mul"),)
    assert d.baseline[0].lost == ("sigmoid (not in the current graph)",)
    assert d.marks["base"]["sigmoid (baseline)"][0] == "lost"
    assert d.marks["current"]["sigmoid (baseline)"][0] == "gone"


def _doc(text: str) -> dict:
    found = re.search(r'<script type="application/json" id="fusion-data">(.*?)</script>', text,
                      re.S)
    return json.loads(found.group(1))


class _Elements(HTMLParser):
    """(tag, classes, ancestors' classes) of every element of a page, in order."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.found: list[tuple[str, set[str], set[str]]] = []
        self.stack: list[tuple[str, set[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        above = set().union(*(c for _, c in self.stack))
        self.found.append((tag, classes, above))
        if tag not in ("meta", "br", "img", "input", "link"):
            self.stack.append((tag, classes))

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass


def _page(folder: Path, test: str) -> tuple[str, dict]:
    (path,) = folder.glob(f"test_blocks__{test}-*.html")
    text = path.read_text()
    return text, _doc(text)


def test_regressed_page_shows_a_lost_recompute_copy_on_the_baseline_pane(verdict_report):
    text, doc = _page(verdict_report, "test_transformer")
    compare, graph = doc["compare"], doc["page"]["graph"]
    names = [n[0] for n in graph["nodes"]]
    (bi, shrunk), = [(i, c) for i, c in enumerate(compare["baseline"])
                     if c["ops"] == ["add", "add", "layer_norm"]]
    # The comparison pairs it with the same ops minus the copy ("no longer recomputes"):
    # kept, with the copy it no longer holds marked lost.
    assert shrunk["status"] == "kept" and "split" not in {
        c["status"] for c in compare["baseline"]}
    assert "no longer recomputes `add`" in text
    (ci,) = shrunk["parts"]
    current = doc["page"]["clusters"][ci]
    assert compare["current"][ci]["status"] == "kept"
    # the copy is drawn on the baseline pane: the two panes' clusters differ by that node
    assert set(current["nodes"]) < set(shrunk["nodes"])
    (ghost,) = set(shrunk["nodes"]) - set(current["nodes"])
    assert names.index(ghost) in graph["only"]["base"]
    assert graph["nodes"][names.index(ghost)][1] == "add"
    assert compare["marks"]["base"][ghost][0] == "lost"
    reader = names.index(next(n for n in current["nodes"] if n.startswith("add")))
    assert [names.index(ghost), reader] in [e[:2] for e in graph["edges"] if e[3:] == ["base"]]
    original = shrunk["lost"][0].removeprefix("add (a recompute of ").split()[0]
    assert compare["marks"]["current"][original][0] == "outside"
    # the other baseline cluster of that block now fuses into a larger one (a copy of an
    # add joined it), and the scaled residual's `mul` is in a new cluster
    assert [c["status"] for c in compare["baseline"]].count("merged") == 1
    assert any("mul" in c["new"] for c in compare["current"] if c["status"] == "new")
    assert {m for m, _ in compare["marks"]["current"].values()} == {"outside", "new"}


def test_regressed_page_names_a_custom_op_and_marks_the_op_it_replaced(verdict_report):
    text, doc = _page(verdict_report, "test_conv")
    graph, compare = doc["page"]["graph"], doc["compare"]
    labels = [n[1] for n in graph["nodes"]]
    assert "demo::gate" in labels and "default" not in labels
    assert ["demo::gate"] == [i[0] for i in graph["info"] if "gate" in i[0]]
    (changed,) = [c for c in compare["baseline"] if c["status"] != "kept"]
    assert changed["status"] == "shrunk" and changed["ops"] == ["sigmoid", "mul", "add"]
    assert changed["lost"] == ["sigmoid (not in the current graph)"]
    ghost = changed["nodes"][0]
    assert [n[0] for n in graph["nodes"]].index(ghost) in graph["only"]["base"]
    assert compare["marks"]["base"][ghost][0] == "lost"
    assert compare["marks"]["current"][ghost][0] == "gone"


def test_regressed_page_has_a_legend_for_every_status_and_mark(verdict_report):
    from fusion_core.report.html.page import LEGEND

    text, _ = _page(verdict_report, "test_conv")
    keys = {frozenset(c) for tag, c, above in _Elements(text).found
            if tag == "span" and "key" in c and "legend" in above}
    wanted = {cls for _, group in LEGEND for cls, _ in group}
    assert {"mark-lost", "mark-outside", "mark-gone", "mark-new", "st-shrunk",
            "st-split", "st-lost"} <= wanted
    assert {k for c in keys for k in c} - {"key"} == wanted
    assert not any("legend" in c for _, c, _ in _Elements(analysis_html(
        {**_doc(text)["page"]})).found)  # an analysis page has none


def _cli_flags() -> list[str]:
    from fusion_core.cli import cli

    return [o for p in cli.params for o in p.opts if o.startswith("--")]


def test_plugin_pages_name_no_cli_flag_the_cli_page_does(verdict_report, microgpt, tmp_path):
    from fusion_core.report.html import write_html

    pages = [*verdict_report.glob("*.html"), verdict_report.parent / "rep.html"]
    assert len(pages) == 4
    for page in pages:
        text = page.read_text()
        assert [f for f in _cli_flags() if f in text] == [], page.name
    write_html(tmp_path / "cli.html", microgpt)
    assert "--vs-inductor" in (tmp_path / "cli.html").read_text()


@pytest.mark.parametrize("target, shown", [
    ("operator.matmul", "matmul"), ("torch.roll", "roll"), ("F.gelu", "gelu"),
    (".roll()", "roll()"), ("cumprod.default", "cumprod"), ("demo::gate", "demo::gate"),
    ("demo::gate.out", "demo::gate.out"), ("my_helper", "my_helper")])
def test_an_opaque_call_is_labelled_by_its_name(target, shown):
    from fusion_core.report.html.data import call_label

    assert call_label(target) == shown


def test_cli_refuses_an_html_path_it_cannot_write(tmp_path):
    from click.testing import CliRunner

    from fusion_core.cli import cli

    target = tmp_path / "missing" / "page.html"
    result = CliRunner().invoke(cli, ["--model", str(ROOT / "examples" / "example_net.py"),
                                      "--input-shape", "4,8", "--html", str(target)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: cannot write --html {target}: its folder does not exist or is not writable "
        "(choose another path)"]


def test_plugin_pages_under_xdist(example_report):
    """Workers build the pages, the controller writes them: DIR/index.html and DIR/tests/."""
    out, stdout = example_report
    index = (out / "index.html").read_text()
    pages = sorted((out / "tests").glob("*.html"))
    assert len(pages) == 6  # the six fusion_check tests of examples/test_examples_fusion.py
    for page in pages:
        assert f'href="tests/{page.name}"' in index
        assert '"kind":"analysis"' in page.read_text()
    assert f"wrote {out}/index.html" in stdout


@pytest.mark.parametrize("given, index, pages", [
    ("out", "out.html", "out-tests"), ("out.md", "out.html", "out-tests"),
    ("folder", "folder/index.html", "folder/tests"),
    ("new/", "new/index.html", "new/tests")])
def test_report_path_names_the_index_and_the_pages_folder(tmp_path, given, index, pages):
    from types import SimpleNamespace

    from pytest_fusion.html_report import HtmlReport

    (tmp_path / "folder").mkdir()
    config = SimpleNamespace(invocation_params=SimpleNamespace(dir=tmp_path),
                             getoption={"fusion_report": given}.get)
    report = HtmlReport(SimpleNamespace(config=config))
    assert report.targets() == (tmp_path / index, tmp_path / pages)
