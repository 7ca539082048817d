"""FusionReport: one object built from the typed records, rendered as every report."""

import json
from pathlib import Path

import fusion_core
from pytest_fusion.records import BaselineWrite, StaleBaseline, TestRecord
from pytest_fusion.report import HEADER, FusionReport

PROV = {"torch": "2.13", "triton": "3.9", "device": "cpu", "date": "2026-12-04"}


def records() -> tuple[TestRecord, ...]:
    return (
        TestRecord("t.py::test_a", "pass", "Net", 2, 4096, 2048, timing_note="timings checked",
                   model_speedup=1.66, model_wall_speedup=0.95, timings_judged=2,
                   hw_key="NVIDIA H200 sm_90"),
        TestRecord("t.py::test_b[x|y]", "regressed", "Mlp", 1, 1024, 512,
                   messages=("lost cluster `mul → relu` at m.py:3",)),
        TestRecord("t.py::test_c", "missing", "Net"),
        TestRecord("t.py::test_d", "improved", "Net", 3, 0, 0, messages=("gained `add`",)),
    )


def report(**kw) -> FusionReport:
    return FusionReport(records(), **kw)


def test_every_rendering_shows_the_same_cells_for_each_test():
    rep = report()
    table = rep.table_lines()
    md_rows = [line for line in rep.markdown(PROV).splitlines() if line.startswith("| t.py")]
    index = rep.index_rows({"t.py::test_a": "tests/a.html"})
    assert len(rep.rows) == len(md_rows) == len(index) == len(table) - 1 == 4
    for row, line, md, idx in zip(rep.rows, table[1:], md_rows, index, strict=True):
        assert tuple(idx[c] for c in HEADER) == row
        for cell in row:
            assert cell in line
            assert cell.replace("|", "\\|") in md  # Markdown escapes a pipe in a test id
    assert "model 1.05× slower fused (wall time; device time 1.66× faster)" in rep.rows[0][5]
    assert [r["href"] for r in index] == ["tests/a.html", "", "", ""]
    assert table[0].split() == ["test", "model", "clusters", "traffic", "saved", "baseline",
                                "timings"]


def test_the_html_index_is_made_from_the_reports_rows():
    rep = report()
    page = fusion_core.index_html(rep.index_rows({}), PROV)
    for row in rep.rows:
        assert row[5] in page and f">{row[4]}<" in page
    assert "4 tests checked" in page


def test_summary_lines_say_writes_stale_files_ratchets_and_missing_baselines():
    written = (BaselineWrite("/r/fusion_baselines/a.yaml", "fusion_baselines/a.yaml",
                             "t.py::test_a", "updated", ("lost `add`",), "text"),
               BaselineWrite("/r/fusion_baselines/e.yaml", "fusion_baselines/e.yaml",
                             "t.py::test_e", "created", ("created with 1 cluster",), "text"))
    stale = (StaleBaseline(Path("/r/fusion_baselines/old.yaml"), "fusion_baselines/old.yaml",
                           "t.py::gone"),)
    lines = report(written=written, stale=stale).summary_lines()
    assert lines == [
        "updated fusion_baselines/a.yaml (t.py::test_a)", "    lost `add`",
        "created fusion_baselines/e.yaml (t.py::test_e)",  # a creation lists no changes
        "stale fusion_baselines/old.yaml: test t.py::gone no longer exists; remove it with "
        "pytest --fusion-prune-stale",
        "t.py::test_d: improved", "    gained `add`",
        "accept with: pytest --fusion-update-baselines=all t.py::test_d",
        "1 fusion baseline is missing; create it with: pytest --fusion-update-baselines=new "
        "t.py::test_c"]
    removed = report(stale=stale, stale_removed=True).summary_lines()
    assert "removed stale fusion_baselines/old.yaml (test t.py::gone no longer exists)" in removed


def test_markdown_counts_failures_lists_messages_and_ends_with_quoted_accept_commands():
    md = report().markdown(PROV)
    assert "4 tests checked, 2 failing. torch 2.13, triton 3.9, device cpu." in md
    assert "2026-12-04" not in md  # the date would change every report
    assert "**t.py::test_b[x\\|y]** — regressed\n- lost cluster `mul → relu` at m.py:3" in md
    tail = md[md.index("### Accept"):]
    assert "pytest --fusion-update-baselines=new t.py::test_c" in tail
    assert "pytest --fusion-update-baselines=failing 't.py::test_b[x|y]'" in tail
    assert "pytest --fusion-update-baselines=all t.py::test_d" in tail


def test_json_doc_holds_the_records_as_data_that_reads_back():
    stale = (StaleBaseline(Path("/r/b/old.yaml"), "b/old.yaml", "t.py::gone"),)
    doc = json.loads(json.dumps(report(stale=stale, stale_removed=True).json_doc(PROV)))
    assert doc["provenance"] == PROV and doc["schema_version"] == 1
    assert tuple(TestRecord.from_data(t) for t in doc["tests"]) == records()
    assert doc["stale"] == [{"path": "b/old.yaml", "test": "t.py::gone", "removed": True}]


def test_unjudged_line_reads_the_typed_records():
    rep = FusionReport((TestRecord("t.py::a", "pass", hw_key="NVIDIA H200 sm_90",
                                   timing_gap="launch-bound"),))
    assert rep.unjudged_line() == "no timing judged on NVIDIA H200: 1 test has only " \
                                  "launch-bound kernels"
    assert report().unjudged_line() == ""  # test_a judged its timings


def test_unjudged_line_leaves_out_tests_whose_baseline_this_run_wrote():
    """A `--fusion-update-baselines=new` run records this GPU's timings: it must not tell
    the user to record them."""
    new = TestRecord("t.py::a", "pass", hw_key="NVIDIA H200 sm_90", timing_gap="no-baseline")
    old = TestRecord("t.py::b", "pass", hw_key="NVIDIA H200 sm_90", timing_gap="launch-bound")
    wrote = (BaselineWrite("/r/a.yaml", "a.yaml", "t.py::a", "measured"),)
    assert FusionReport((new,), written=wrote).unjudged_line(required=True) == ""
    assert FusionReport((new, old), written=wrote).unjudged_line() == (
        "no timing judged on NVIDIA H200: 1 test has only launch-bound kernels")
    assert "no baseline for this GPU" in FusionReport((new,)).unjudged_line()


def test_records_and_writes_cross_to_the_controller_as_plain_data():
    rec = records()[1]
    data = json.loads(json.dumps(rec.to_data()))
    assert TestRecord.from_data({**data, "from_a_newer_plugin": 1}) == rec
    w = BaselineWrite("/r/a.yaml", "a.yaml", "t.py::a", "renamed", ("from old",), None, "/r/o")
    assert BaselineWrite.from_data(json.loads(json.dumps(w.to_data()))) == w
