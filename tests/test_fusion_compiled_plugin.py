"""The compiled record in the plugin, end to end (inner pytest runs, one process per run so
Dynamo's lazily imported modules are never reloaded). Each run compiles 2-3 op models, on this
machine's backend whatever the analysis target: cpu-inductor without a GPU, cuda-inductor
with one (the inner runs see the same devices).

Every case is its own model module and marked test in one project: one run records all
baselines, the models are edited, one run checks them all (a process start and Inductor's
imports cost most of a run, the compiles of these models little); the tests then read what
each case's test printed and wrote."""

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from fusion_plugin_helpers import PLUGIN_ARGS, TIMED_INI, baselines

from pytest_fusion.compiled_gate import compiled_device

pytestmark = pytest.mark.slow  # four inner runs of real torch.compiles (~40 s on 2 CPU cores)

DEVICE = compiled_device()
BACKEND = f"{DEVICE}-inductor"
# How Inductor names a generated pointwise kernel on that backend: C++ or Triton.
POINTWISE = {"cpu": "cpp_fused_", "cuda": "triton_poi_fused_"}[DEVICE]

HEAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(8, 8))
    def forward(self, x):
"""
BODIES = {
    "base": "y = F.relu(x * 2.0)\nreturn y + 1.0",
    # Line 10 of the model reads a value into Python: Dynamo breaks the graph there.
    "item": "y = F.relu(x * 2.0)\ns = y.sum().item()\nreturn y + s",
    # A matmul between the pointwise ops: a kernel before it, the library call, one after.
    "matmul": "y = F.relu(x * 2.0) @ self.w\nreturn torch.sigmoid(y)",
    "merged": "y = F.relu(x * 2.0) * self.w[0]\nreturn torch.sigmoid(y)",
}
TEST = """\
import pytest
import model_{case}

@pytest.mark.fusion_check(model_{case}.Net, (4, 8), checks=["clusters"]{kwargs})
def test_{case}():
    pass
"""


def one_case_project(p, body: str, **marker) -> None:
    """A pytester project of one case (model_net.py, test_net.py::test_net): the GPU test's."""
    p.makeini(TIMED_INI)
    p.makepyfile(
        model_net=HEAD + "".join(f"        {ln}\n" for ln in BODIES[body].splitlines()),
        test_net=TEST.format(case="net", kwargs="".join(f", {k}={v!r}"
                                                        for k, v in marker.items())),
    )


def run(p, *args):
    return p.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *PLUGIN_ARGS, *args
    )


@dataclass(frozen=True)
class Case:
    recorded: str  # the body its baseline is recorded from
    checked: str  # ...and the body the later run checks
    marker: tuple[tuple[str, object], ...] = (("compiled", True),)


CASES = {
    "item": Case("base", "item"),
    "merged": Case("matmul", "merged"),
    "version": Case("base", "base"),  # its baseline's torch version is edited
    "schema3": Case("base", "base", ()),  # compiled off: the schema-3 shape of a baseline
    "split": Case("merged", "matmul"),  # line 9 now multiplies by the matrix
    "bound": Case("matmul", "matmul", (("compiled_max_kernels", 1),
                                       ("compiled_max_graph_breaks", 0))),
}


def node_id(case: str) -> str:
    return f"test_net.py::test_{case}"


@dataclass(frozen=True)
class Ran:
    out: str  # the inner run's stdout, -rA
    outcomes: dict[str, str]  # test id -> PASSED / FAILED, from the short summary

    def section(self, case: str) -> str:
        """What pytest printed under the case's `___ test_<case> ___` header (its failure, or
        its captured output among the passes)."""
        found = re.search(rf"^_+ test_{case} _+$(.*?)^(?=_+ test_|=+ )", self.out, re.M | re.S)
        assert found, self.out[-3000:]
        return found.group(1)

    def note(self, case: str) -> str:
        """The case's entry in the plugin's baseline notes: its `test id: verdict` line and the
        indented lines under it."""
        found = re.search(rf"^{re.escape(node_id(case))}: .*\n(?:    .*\n)*", self.out, re.M)
        assert found, self.out[-3000:]
        return found.group(0)


@dataclass(frozen=True)
class Project:
    path: Path
    recorded: Ran  # --fusion-update-baselines=new over every case
    checked: Ran  # every case but `bound` with its model edited: -rA, a report, compiled on
    compiler_change_fails: Ran  # `version` with -o fusion_compiler_change=fail
    schema3_updated: Ran  # `schema3` with compiled on and --fusion-update-baselines=new
    version_before: str  # the torch version `version`'s baseline was recorded with


def _write(path: Path, stage: str) -> None:
    for case, c in CASES.items():
        body = c.recorded if stage == "recorded" else c.checked
        (path / f"model_{case}.py").write_text(
            HEAD + "".join(f"        {ln}\n" for ln in BODIES[body].splitlines()))
    (path / "test_net.py").write_text("\n\n".join(
        TEST.format(case=case, kwargs="".join(f", {k}={v!r}" for k, v in c.marker))
        for case, c in CASES.items()))


def _run(path: Path, *args: str) -> Ran:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
         "-p", "no:hypothesispytest", *PLUGIN_ARGS, *args],
        cwd=path, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True,
        text=True, timeout=600)
    found = re.findall(r"^(PASSED|FAILED|ERROR) (\S+)", done.stdout, re.M)
    return Ran(done.stdout, {test: outcome for outcome, test in found})


def _edit_baseline(path: Path, case: str, edit) -> None:
    file = baselines(path)[node_id(case)]
    data = yaml.safe_load(file.read_text())
    edit(data)
    file.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    path = tmp_path_factory.mktemp("compiled")
    (path / "pytest.ini").write_text(TIMED_INI)
    _write(path, "recorded")
    recorded = _run(path, "--fusion-update-baselines=new")
    before = {}

    def older_torch(data):
        before["torch"] = data["compiled"][BACKEND]["torch"]
        data["compiled"][BACKEND]["torch"] = "2.11.0"

    _edit_baseline(path, "version", older_torch)
    _edit_baseline(path, "schema3", lambda data: data.update(schema_version=3))
    _write(path, "checked")
    checked = _run(path, "-o", "fusion_compiled=true", "--fusion-report=rep",
                   "--deselect", "test_net.py::test_bound")
    return Project(
        path, recorded, checked,
        _run(path, "-o", "fusion_compiler_change=fail", "test_net.py::test_version"),
        _run(path, "-o", "fusion_compiled=true", "--fusion-update-baselines=new",
             "test_net.py::test_schema3"),
        before["torch"])



def compiled_of(path: Path, case: str) -> dict:
    return yaml.safe_load(baselines(path)[node_id(case)].read_text())["compiled"]


def test_every_case_but_the_bound_records_its_baseline(project):
    assert project.recorded.outcomes == {
        node_id(case): "FAILED" if case == "bound" else "PASSED" for case in CASES}, \
        project.recorded.out[-3000:]


def test_a_new_item_graph_break_fails_naming_line_and_reason(project):
    assert compiled_of(project.path, "item")[BACKEND]["graph_breaks"] == []
    ran = project.checked
    assert ran.outcomes[node_id("item")] == "FAILED"
    assert re.search(
        r"new graph break at model_item\.py:10 \(`s = y\.sum\(\)\.item\(\)`\): "
        r"Unsupported Tensor\.item\(\) call",
        ran.section("item"),
    ), ran.section("item")
    # The extra graph is that break: said once in the failure (with CI set, pytest's short
    # summary repeats whole messages, so only the text before it is counted; no other case
    # breaks a graph).
    assert ran.out.split("short test summary info")[0].count("new graph break") == 1


def test_merged_kernels_pass_and_are_listed_as_improved(project):
    # recorded from `matmul` (the passing check with `merged` leaves the baseline as it was)
    before = compiled_of(project.path, "merged")[BACKEND]["kernels"]
    assert len(before) >= 2
    ran = project.checked
    assert ran.outcomes[node_id("merged")] == "PASSED"
    note = ran.note("merged")
    assert note.startswith("test_net.py::test_merged: improved\n"), note
    assert f"Inductor now emits 1 kernel (baseline {len(before)})" in note, note
    assert re.search(r"^accept with: pytest --fusion-update-baselines=all .*"
                     + re.escape(node_id("merged")), ran.out, re.M), ran.out[-3000:]
    assert "regress" not in note + ran.section("merged")
    assert re.search(rf"^{re.escape(node_id('merged'))} .* improved ", ran.out, re.M)


def test_another_torch_version_is_said_and_follows_the_option(project):
    said = (f"compiler changed: torch 2.11.0 → {project.version_before} "
            f"(backend {BACKEND})")
    assert project.checked.outcomes[node_id("version")] == "PASSED"
    assert said in project.checked.note("version")
    ran = project.compiler_change_fails
    assert ran.outcomes == {node_id("version"): "FAILED"}, ran.out[-3000:]
    assert said in ran.section("version")


def test_a_baseline_without_a_compiled_record_keeps_loading(project):
    assert project.checked.outcomes[node_id("schema3")] == "PASSED"
    assert (f"compiled record taken on {BACKEND}, none in the baseline"
            in project.checked.note("schema3"))
    assert project.schema3_updated.outcomes == {node_id("schema3"): "PASSED"}
    assert compiled_of(project.path, "schema3")[BACKEND]["graphs"] == 1


def test_a_split_kernel_fails_naming_the_op_that_now_separates_it(project):
    (merged,) = compiled_of(project.path, "split")[BACKEND]["kernels"]  # recorded: `merged`
    ran = project.checked
    assert ran.outcomes[node_id("split")] == "FAILED"
    assert re.search(
        rf"`{merged['name']}` \(mul → relu → select → sigmoid\) at model_split\.py:9, "
        rf"model_split\.py:10 splits into `{POINTWISE}mul_relu_0` \(mul → relu\) at "
        rf"model_split\.py:9 and `{POINTWISE}sigmoid_1` \(sigmoid\) at model_split\.py:10: the "
        r"matrix product `operator\.matmul` \(line 9\) sits between them",
        ran.section("split"),
    ), ran.section("split")
    # The agreement: in the terminal report, the Markdown and JSON files and the HTML page.
    assert f"{node_id('split')} [{BACKEND}]: 2 kernels, 1 library call" in ran.out
    md = (project.path / "rep.md").read_text()
    assert "### torch.compile: our clusters beside Inductor's kernels" in md
    assert f"| `mul → relu` | model_split.py:9 | `{POINTWISE}mul_relu_0` | same group |" in md
    (test,) = [t for t in json.loads((project.path / "rep.json").read_text())["tests"]
               if t["nodeid"] == node_id("split")]
    assert test["compiled"][BACKEND]["clusters"][0]["verdict"] == "same group"
    (page,) = (project.path / "rep-tests").glob("test_net__test_split-*.html")
    assert f"{POINTWISE}mul_relu_0" in page.read_text()


def test_a_bound_fails_with_measured_beside_bound(project):
    failure = project.recorded.section("bound")
    assert (f"compiled bound exceeded on {BACKEND}: 2 generated kernels (library calls not "
            f"counted) (`{POINTWISE}mul_relu_0`, `{POINTWISE}sigmoid_1`), more than "
            "compiled_max_kernels=1") in failure, failure
    assert "compiled_max_graph_breaks" not in project.recorded.out  # within that bound: not said
