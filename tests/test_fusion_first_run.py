"""A project's first run: one command for every missing baseline, the marker test's body
still runs, file names a shell takes as they are, and the report's accept commands."""

import shlex

import pytest
import yaml
from fusion_plugin_helpers import baselines, marked_test, model_source, run

from pytest_fusion.baseline_names import baseline_name, legacy_baseline_name

pytestmark = pytest.mark.usefixtures("torch_warm")

CMD = "pytest --fusion-update-baselines"

PARAMETRIZED = """\
import pytest
import model

@pytest.mark.parametrize("size", ["small", "big one"])
@pytest.mark.fusion_check(model.Net, (4, 8))
def test_sized(size):
    pass
"""
IDS = ["test_net.py::test_a", "test_net.py::test_b", "test_sized.py::test_sized[big one]",
       "test_sized.py::test_sized[small]"]


def _four_tests(p) -> None:
    p.makepyfile(test_net=marked_test("test_a") + "\n" + marked_test("test_b"),
                 test_sized=PARAMETRIZED)


def test_missing_baselines_get_one_command_that_creates_them_all(proj):
    _four_tests(proj)
    r = run(proj)
    r.assert_outcomes(failed=4)
    quoted = " ".join(shlex.quote(i) for i in IDS)
    assert "'test_sized.py::test_sized[small]'" in quoted  # zsh would glob it unquoted
    r.stdout.fnmatch_lines(["*- fusion baselines -*",
                            f"4 fusion baselines are missing; create them with: {CMD}=new "
                            f"{quoted}"])
    # Each test's own failure stays one line, with its own command.
    failures = [line for line in r.stdout.lines if line.startswith("no fusion baseline")]
    assert len(failures) == 4 and all("\n" not in f for f in failures)
    # The command does what it says: every baseline, nothing else.
    args = shlex.split(r.stdout.lines[[i for i, line in enumerate(r.stdout.lines)
                                       if line.startswith("4 fusion baselines")][0]]
                       .split("create them with: ")[1])
    assert args[0] == "pytest"
    run(proj, *args[1:]).assert_outcomes(passed=4)
    assert sorted(baselines(proj.path)) == IDS
    r = run(proj)
    r.assert_outcomes(passed=4)
    assert "fusion baselines are missing" not in r.stdout.str()


BODY = """\
import pathlib
import pytest
import model

@pytest.mark.fusion_check(model.Net, (4, 8))
def test_net(fusion_advisor):
    pathlib.Path("body-ran").write_text("yes")
    assert fusion_advisor.result.kernels == {kernels}
"""


def test_a_marker_test_without_baseline_runs_its_body_and_still_fails(proj):
    proj.makepyfile(test_net=BODY.format(kernels=1))
    r = run(proj, "--fusion-report=rep")
    r.assert_outcomes(failed=1)
    assert (proj.path / "body-ran").exists()
    r.stdout.fnmatch_lines(["no fusion baseline for this test (*); create it with: "
                            f"{CMD}=new test_net.py::test_net"])
    assert '"status": "missing"' in (proj.path / "rep.json").read_text()

    # A failing body and the missing baseline are both reported, in the one failure.
    (proj.path / "body-ran").unlink()
    proj.makepyfile(test_net=BODY.format(kernels=5))
    r = run(proj)
    r.assert_outcomes(failed=1)
    assert (proj.path / "body-ran").exists()
    r.stdout.fnmatch_lines(["E*assert 1 == 5*", "*no fusion baseline for this test (*); "
                            f"create it with: {CMD}=new test_net.py::test_net"])

    # With the baseline in place the body runs as ever, after the check.
    proj.makepyfile(test_net=BODY.format(kernels=1))
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    run(proj).assert_outcomes(passed=1)


def test_baseline_names_carry_no_glob_characters(proj):
    proj.makepyfile(test_net=PARAMETRIZED)
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=2)
    names = sorted(p.name for p in (proj.path / "fusion_baselines").iterdir())
    assert names == sorted(baseline_name(i.replace("test_sized.py", "test_net.py"))
                           for i in IDS[2:])
    assert not any(set("[]*? ") & set(n) for n in names)


def _as_legacy(p, nodeid: str):
    """Move the test's baseline to the name earlier versions gave it."""
    folder = p.path / "fusion_baselines"
    new, old = folder / baseline_name(nodeid), folder / legacy_baseline_name(nodeid)
    assert new != old
    new.rename(old)
    return new, old


@pytest.mark.cpu
def test_an_old_bracketed_baseline_is_read_kept_and_moved_on_rewrite(proj):
    proj.makepyfile(test_net=PARAMETRIZED)
    small = "test_net.py::test_sized[small]"
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=2)
    new, old = _as_legacy(proj, small)
    text = old.read_text() + "# the user's comment\n"
    old.write_text(text)

    # Read as it is: no failure, not stale (its test exists), not moved by a plain run.
    r = run(proj)
    r.assert_outcomes(passed=2)
    assert "stale" not in r.stdout.str() and old.exists() and not new.exists()
    run(proj, "--fusion-update-baselines=failing").assert_outcomes(passed=2)
    assert old.read_text() == text and not new.exists()  # nothing failed: nothing written

    # A regression names the file it read; accepting it writes the new name, drops the old.
    proj.makepyfile(model=model_source("split"))
    r = run(proj, small)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([f"fusion regression against fusion_baselines/{old.name}:"])
    r = run(proj, "--fusion-update-baselines=failing", small)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([f"updated fusion_baselines/{new.name} ({small})"])
    assert new.exists() and not old.exists()
    assert yaml.safe_load(new.read_text())["test"] == small

    # `=all` moves an unchanged old-named file as it is, bytes and all.
    new, old = _as_legacy(proj, small)
    old.write_text(old.read_text() + "# kept\n")
    before = old.read_bytes()
    r = run(proj, "--fusion-update-baselines=all")
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines([f"renamed fusion_baselines/{new.name} ({small})",
                            f"    from fusion_baselines/{old.name}"])
    assert new.read_bytes() == before and not old.exists()
    assert "stale" not in r.stdout.str()
    run(proj).assert_outcomes(passed=2)


@pytest.mark.cpu
def test_the_markdown_report_ends_with_the_accept_commands(proj):
    _four_tests(proj)
    run(proj, "test_net.py", "--fusion-update-baselines").assert_outcomes(passed=2)
    proj.makepyfile(model=model_source("split"))  # test_a and test_b regress
    r = run(proj, "--fusion-report=rep")
    r.assert_outcomes(failed=4)
    md = (proj.path / "rep.md").read_text()
    sized = " ".join(shlex.quote(i) for i in IDS[2:])
    assert md.rstrip().endswith(
        "### Accept\n\n"
        f"Create the missing baselines:\n\n```sh\n{CMD}=new {sized}\n```\n\n"
        "Accept the regressions above, if they are intended:\n\n"
        f"```sh\n{CMD}=failing test_net.py::test_a test_net.py::test_b\n```")
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=4)
    run(proj, "--fusion-report=rep").assert_outcomes(passed=4)
    assert "### Accept" not in (proj.path / "rep.md").read_text()
