"""The HTML report without a browser: layout, repeated blocks, page data, self-containment,
and the baseline-vs-current cluster classification of the plugin's pages."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
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
    assert [b.label for b in bands.bands] == ["", "h.0", "h.1", "h.2", ""]
    # h.2 computes something else, so only h.0-h.1 collapse
    assert [(g.label, g.bands) for g in bands.groups] == [("h.0–1", (1, 2))]
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
    assert [gr["label"] for gr in g["groups"]] == ["blocks.0–1"]
    assert {b["label"] for b in g["bands"]} >= {"blocks.0", "blocks.1"}
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
    pages = [analysis_html(page), compare_html(page, [], {}, "regressed", ["lost"]),
             index_html([{"test": "t", "href": "tests/t.html"}], {"torch": "x"})]
    for text in pages:
        assert _remote_references(text) == []
        assert "http://" not in text and "https://" not in text
        assert text.count("<script>") in (0, len(SCRIPTS))  # every script inline
        assert "<script src" not in text
    assert _remote_references('<img src="https://x/y.png">')  # the check does catch one


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


def _rec(ops, nodes, lines="m.py:1-3"):
    from pytest_fusion.snapshot import ClusterRec

    return ClusterRec(ops=tuple(ops), lines=lines, category="elementwise-chain",
                      nodes=tuple(nodes), unfused_bytes=10, fused_bytes=5, kernel="elementwise")


def _snap(*clusters):
    from pytest_fusion.snapshot import Snapshot

    return Snapshot(test="t", model="M", inputs=(), clusters=tuple(clusters), rejections=())


def test_baseline_clusters_are_kept_split_merged_or_lost():
    from pytest_fusion.html_report import cluster_status

    base = _snap(_rec(["mul", "relu", "add"], ["mul", "relu", "add"]),
                 _rec(["tanh", "exp"], ["tanh", "exp"], "m.py:5-6"),
                 _rec(["sub", "neg"], ["sub", "neg"], "m.py:8-9"),
                 _rec(["sin", "cos"], ["sin", "cos"], "m.py:10-11"))
    cur = _snap(_rec(["mul", "relu"], ["mul", "relu"], "m.py:1-2"),
                _rec(["add", "sigmoid"], ["add", "sigmoid"], "m.py:3-4"),
                _rec(["tanh", "exp", "log"], ["tanh", "exp", "log"], "m.py:5-7"),
                _rec(["sin", "cos"], ["sin", "cos"], "m.py:10-11"),
                _rec(["abs", "sqrt"], ["abs", "sqrt"], "m.py:20-21"))
    base_status, cur_status = cluster_status(base, cur)
    assert base_status == ["split", "merged", "lost", "kept"]
    assert cur_status == {0: "split", 1: "split", 2: "kept", 3: "kept", 4: "new"}


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
