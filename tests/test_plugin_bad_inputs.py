"""The plugin's remaining bad inputs (issue 29): a model class whose constructor needs
arguments, and an HTML report that cannot be written. Each is one line, the run keeps its
outcome and summary, and every file the user had is left as it was. Also the forms that
give a constructor its arguments: `model_kwargs=` (marker and fixture) and a factory."""

from __future__ import annotations

import stat

import pytest
from cli_inputs import NEEDS_ARGS, ROOT, snapshot
from fusion_plugin_helpers import baselines, run

pytestmark = pytest.mark.usefixtures("torch_warm")


MARKED = """\
import functools

import pytest

import needs


@pytest.mark.fusion_check(needs.NeedsArgs, (4, 8){extra})
def test_net():
    pass
"""


def _no_traceback(r) -> None:
    out = r.stdout.str() + r.stderr.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out
    assert "fixture.py" not in out  # no frame of the plugin's


def _unchanged(before: dict, after: dict) -> None:
    """Every file the user had before the run is there, same bytes and mode."""
    assert {k: after.get(k) for k in before} == before


FAILED = "fusion analysis failed: "
MARKER = "@pytest.mark.fusion_check(...)"


@pytest.mark.parametrize(
    "extra, line",
    [
        (
            "",
            f"{FAILED}NeedsArgs() needs arguments (dim); pass them as model_kwargs={{'dim': ...}} "
            f"in {MARKER}, or give it a function that builds the model with no arguments "
            "(e.g. functools.partial(NeedsArgs, ...)) or the model itself",
        ),
        (
            ", model_kwargs={'dim': 8, 'depth': 2}",
            f"{FAILED}NeedsArgs() takes no argument 'depth' (its arguments: dim, scale); "
            f"check the names given as model_kwargs in {MARKER}",
        ),
        (
            ", model_kwargs=[8]",
            f"{FAILED}model_kwargs must be a dict of keyword arguments, got list: "
            "e.g. model_kwargs={'dim': 64}",
        ),
    ],
    ids=["no arguments", "unknown argument", "not a dict"],
)
def test_a_constructor_needing_arguments_is_one_line(proj, extra, line):
    proj.makepyfile(needs=NEEDS_ARGS, test_net=MARKED.format(extra=extra))
    before = snapshot(proj.path)
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(failed=1)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines([line])  # the whole line: nothing before or after it
    _no_traceback(r)
    assert baselines(proj.path) == {}
    _unchanged(before, snapshot(proj.path))


def test_an_instance_with_model_kwargs_is_one_line(proj):
    proj.makepyfile(
        needs=NEEDS_ARGS,
        test_net="""\
import needs


def test_net(fusion_advisor):
    fusion_advisor.analyze(needs.NeedsArgs(8), (4, 8), model_kwargs={"dim": 8})
""",
    )
    before = snapshot(proj.path)
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(
        [
            "*fusion analysis failed: model_kwargs were given with a model "
            "already built (NeedsArgs instance): pass its class or a factory "
            "instead, or drop model_kwargs"
        ]
    )
    _no_traceback(r)
    _unchanged(before, snapshot(proj.path))


def test_model_kwargs_and_factories_build_the_model(proj):
    """The marker's model_kwargs, a factory (function or functools.partial), the fixture's
    model_kwargs and a `file.py:NAME` string: each analyses the same one cluster."""
    proj.makepyfile(
        needs=NEEDS_ARGS + "\n\ndef make():\n    return NeedsArgs(8)\n",
        test_net=MARKED.format(extra=", model_kwargs={'dim': 8}")
        + """

@pytest.mark.fusion_check(functools.partial(needs.NeedsArgs, dim=8), (4, 8))
def test_partial():
    pass


@pytest.mark.fusion_check(needs.make, (4, 8))
def test_function(fusion_advisor):
    assert type(fusion_advisor.result.analysis.module).__name__ == "NeedsArgs"


def test_fixture(fusion_advisor):
    for model, kwargs in ((needs.NeedsArgs, {"dim": 8, "scale": 3.0}),
                          ("needs.py:NeedsArgs", {"dim": 8}), ("needs.py:make", None)):
        result = fusion_advisor.analyze(model, (4, 8), model_kwargs=kwargs)
        assert [list(c.ops) for c in result.snapshot.clusters] == [["mul", "relu", "add"]]
    fusion_advisor.check(result)
""",
    )
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(passed=4)
    assert len(baselines(proj.path)) == 4


# ---------------------------------------------------------------- HTML report


def test_a_file_where_the_html_pages_go_is_one_error_line(proj):
    (proj.path / "rep-tests").write_text("my notes\n")
    (proj.path / "rep-tests").chmod(0o640)
    before = snapshot(proj.path)
    r = run(proj, "--fusion-update-baselines=new", "--fusion-report=rep")
    r.assert_outcomes(passed=1)
    assert r.ret == pytest.ExitCode.TESTS_FAILED  # the report was asked for and is missing
    r.stdout.fnmatch_lines(
        [
            "*fusion report*",
            "test_net.py::test_net*",  # the table
            "ERROR: could not write the fusion HTML report: */rep-tests is not a "
            "folder (a file of that name is in the way): move it away or choose "
            "another --fusion-report PATH",
        ]
    )
    assert sum("ERROR:" in line for line in r.stdout.lines) == 1  # md and json were written
    _no_traceback(r)
    after = snapshot(proj.path)
    _unchanged(before, after)
    assert "rep.md" in after and "rep.json" in after


@pytest.mark.skipif(ROOT, reason="root writes to read-only folders")
def test_a_read_only_report_folder_is_one_error_line_per_file(proj):
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    out = proj.path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    before = snapshot(proj.path)
    mode = stat.S_IMODE(out.stat().st_mode)
    out.chmod(0o555)
    try:
        r = run(proj, "--fusion-report=out/")
    finally:
        out.chmod(mode)
    r.assert_outcomes(passed=1)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    errors = [line for line in r.stdout.lines if line.startswith("ERROR:")]
    html = [line for line in errors if "HTML" in line]
    assert len(html) == 1 and len(errors) == 3, errors  # md, json, html: one line each
    assert html[0].startswith(f"ERROR: could not write the fusion HTML report: {out}")
    assert "Permission denied" in html[0] and "--fusion-report PATH" in html[0]
    r.stdout.fnmatch_lines(["*fusion report*", "test_net.py::test_net*", "*1 passed*"])
    _no_traceback(r)
    _unchanged(before, snapshot(proj.path))
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
