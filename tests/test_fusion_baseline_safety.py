"""The fusion plugin never loses a baseline: --lf, a killed xdist worker, a shared folder,
a CPU run after lines moved, killed writers' temp files, and file modes."""

import os
import stat
import subprocess
import sys

import pytest
import yaml
from fusion_plugin_helpers import (
    MEASURE_CONFTEST,
    PLUGIN_ARGS,
    SAMPLES,
    baselines,
    marked_test,
    model_source,
    run,
    write_timings,
)

pytestmark = pytest.mark.usefixtures("torch_warm")


ORDINARY_FAILING = "\ndef test_plain():\n    assert 1 == 2\n"


def test_lf_rerun_with_update_all_keeps_the_passing_fusion_tests_baseline(proj):
    """--lf drops the passing fusion test inside collection; its baseline is still its own."""
    proj.makepyfile(test_net=marked_test() + ORDINARY_FAILING)
    run(proj, "--fusion-update-baselines=new", cache=True).assert_outcomes(passed=1, failed=1)
    (path,) = baselines(proj.path).values()
    r = run(proj, "--lf", "--fusion-update-baselines=all", cache=True)
    r.assert_outcomes(failed=1)  # only the ordinary test ran
    assert "stale" not in r.stdout.str()
    assert path.exists()
    proj.makepyfile(test_net=ORDINARY_FAILING)  # the fusion test really is gone now
    r = run(proj, "--lf", "--fusion-update-baselines=all", cache=True)
    r.stdout.fnmatch_lines(["removed stale fusion_baselines/* (test test_net.py::test_net no "
                            "longer exists)"])
    assert not path.exists()


CRASH = "\nimport os\n\ndef test_zz_crash():\n    os._exit(1)\n"


@pytest.mark.cpu
def test_killed_xdist_worker_keeps_the_baselines_of_the_tests_it_finished(pytester, monkeypatch):
    pytest.importorskip("xdist")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makeini("[pytest]\n")
    # The only worker finishes both fusion tests, then dies: before, their pending writes
    # died with it ("1 failed, 2 passed", no file).
    pytester.makepyfile(model=model_source("base"),
                        test_net=marked_test("test_a") + "\n" + marked_test("test_b") + CRASH)
    r = pytester.runpytest_subprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p",
                                      "no:hypothesispytest", "-n", "1", "-p", "no:randomly",
                                      "--fusion-update-baselines=new")
    r.assert_outcomes(passed=2, failed=1)
    assert set(baselines(pytester.path)) == {"test_net.py::test_a", "test_net.py::test_b"}
    r.stdout.fnmatch_lines_random(["created fusion_baselines/*.yaml (test_net.py::test_a)",
                                   "created fusion_baselines/*.yaml (test_net.py::test_b)",
                                   "stale baselines not judged: worker gw0 went down before "
                                   "reporting what they collected"])


def test_projects_sharing_one_absolute_folder_keep_each_others_baselines(pytester, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    shared = pytester.path / "shared_baselines"
    files = {}
    for name in ("proj_a", "proj_b"):
        root = pytester.mkdir(name)
        (root / "pytest.ini").write_text(f"[pytest]\nfusion_baselines_dir = {shared}\n")
        (root / f"model_{name}.py").write_text(model_source("base"))
        (root / f"test_{name}.py").write_text(marked_test(module=f"model_{name}"))
        monkeypatch.chdir(root)
        monkeypatch.syspath_prepend(root)
        run(pytester, "--fusion-update-baselines=new").assert_outcomes(passed=1)
        files[name] = {yaml.safe_load(p.read_text())["test"]: p for p in shared.glob("*.yaml")}
    (b_file,) = [p for t, p in files["proj_b"].items() if "proj_b" in t]
    assert yaml.safe_load(b_file.read_text())["provenance"]["project"] == "proj_b"
    monkeypatch.chdir(pytester.path / "proj_a")
    r = run(pytester, "--fusion-update-baselines=all")
    r.assert_outcomes(passed=1)
    assert "stale" not in r.stdout.str() and b_file.exists()
    # proj_a's own test goes away: its baseline is stale, proj_b's is still not judged.
    (pytester.path / "proj_a" / "test_proj_a.py").write_text("def test_other():\n    pass\n")
    r = run(pytester, "--fusion-update-baselines=all")
    r.stdout.fnmatch_lines(["removed stale */shared_baselines/* (test test_proj_a.py::test_net*"])
    assert b_file.exists()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_writers_temp_file_is_removed_by_the_next_run(proj):
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    stray = path.with_name(f".{path.name}.{_dead_pid()}.k3x9.fusion-tmp")
    stray.write_text("schema_version: 1\nclusters: [")  # half a baseline
    live = path.with_name(f".{path.name}.{os.getpid()}.a1b2.fusion-tmp")  # a live writer's
    live.write_text("")
    r = run(proj)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["removed 1 leftover temp file of an interrupted baseline write "
                            "in fusion_baselines/"])
    assert not stray.exists() and live.exists()



@pytest.mark.cpu
def test_update_all_on_cpu_keeps_gpu_timings_after_lines_moved(proj):
    proj.makeconftest(MEASURE_CONFTEST)
    write_timings(proj.path, SAMPLES)
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    before = yaml.safe_load(path.read_text())["measured"]
    (proj.path / "timings.json").unlink()  # this machine measures nothing
    # A comment line moves every cluster down, and a bigger bias changes the traffic, so
    # =all really rewrites the file.
    proj.makepyfile(model="# a comment line\n" + model_source("base", bias="4, 8"))
    r = run(proj, "--fusion-update-baselines=all")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["updated fusion_baselines/*"])
    data = yaml.safe_load(path.read_text())
    assert data["clusters"][0]["lines"] == "model.py:11-13"  # the move was written
    assert data["measured"] == before  # ...and the H200 timings were not dropped


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.cpu
def test_files_get_the_umask_mode_and_a_rewritten_baseline_keeps_its_own(proj, umask_022):
    run(proj, "--fusion-update-baselines=new", "--fusion-report=out/rep").assert_outcomes(
        passed=1)
    (path,) = baselines(proj.path).values()

    def mode(p):
        return stat.S_IMODE(p.stat().st_mode)

    assert mode(path) == 0o644
    assert mode(proj.path / "out/rep.md") == mode(proj.path / "out/rep.json") == 0o644
    path.chmod(0o640)
    before = path.read_text()
    proj.makepyfile(model=model_source("grown"))
    run(proj, "--fusion-update-baselines=all").assert_outcomes(passed=1)
    assert path.read_text() != before and mode(path) == 0o640
