"""The fusion plugin under pytest-xdist: workers ship results, the controller alone writes."""

import json

import pytest
import yaml
from fusion_plugin_helpers import PLUGIN_ARGS, baselines, marked_test, model_source

pytest.importorskip("xdist")


@pytest.mark.cpu
def test_two_workers_create_update_report_and_find_stale(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        model=model_source("base"), model2=model_source("base"),
        test_one=marked_test("test_a") + "\n" + marked_test("test_b", "model2"),
        test_two=marked_test("test_c") + "\n" + marked_test("test_d", "model2"))
    args = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-n", "2")

    r = pytester.runpytest_subprocess(*PLUGIN_ARGS, *args, "--fusion-update-baselines")
    r.assert_outcomes(passed=4)
    ids = {f"test_{f}.py::test_{t}" for f, ts in (("one", "ab"), ("two", "cd")) for t in ts}
    r.stdout.fnmatch_lines_random([f"created fusion_baselines/*.yaml ({i})" for i in ids])
    files = baselines(pytester.path)
    assert set(files) == ids  # every file parses and names its own test
    assert all(yaml.safe_load(p.read_text())["clusters"][0]["ops"] == ["mul", "relu", "add"]
               for p in files.values())
    assert not list((pytester.path / "fusion_baselines").glob(".*.fusion-tmp"))

    # test_a and test_c regress, test_d is gone: one run accepts both, finds the stale file from
    # the workers' collection lists, removes it, and reports every worker's result.
    pytester.makepyfile(model=model_source("split"), test_two=marked_test("test_c"))
    r = pytester.runpytest_subprocess(*PLUGIN_ARGS, *args, "--fusion-update-baselines=all",
                                      "--fusion-report=rep")
    r.assert_outcomes(passed=3)
    split = ("    `mul → relu → add` at model.py:10-12 split into `mul → relu` (model.py:10-11) + "
             "`add → tanh` (model.py:12): `self.lin` (Linear) at model.py:12 now sits between "
             "`relu` (line 11) and `add` (line 12): fusion-advisor cannot fuse through it "
             "(it leaves this torch.nn layer to PyTorch's own kernel, which writes its result "
             "to memory)")
    r.stdout.fnmatch_lines(["updated fusion_baselines/*.yaml (test_one.py::test_a)", split])
    r.stdout.fnmatch_lines(["updated fusion_baselines/*.yaml (test_two.py::test_c)", split])
    r.stdout.fnmatch_lines(["removed stale fusion_baselines/*.yaml (test test_two.py::test_d*"])
    assert set(baselines(pytester.path)) == ids - {"test_two.py::test_d"}
    for test in ("test_one.py::test_a", "test_two.py::test_c"):
        ops = [c["ops"] for c in yaml.safe_load(files[test].read_text())["clusters"]]
        assert ops == [["mul", "relu"], ["add", "tanh"]]
    doc = json.loads((pytester.path / "rep.json").read_text())
    assert {t["nodeid"]: t["status"] for t in doc["tests"]} == {
        "test_one.py::test_a": "updated", "test_one.py::test_b": "pass",
        "test_two.py::test_c": "updated"}
    assert [s["test"] for s in doc["stale"]] == ["test_two.py::test_d"]
