"""The compiled record in the plugin, end to end (pytester, one process per run so Dynamo's
lazily imported modules are never reloaded). Each run compiles a 2-3 op model, on this
machine's backend whatever the analysis target: cpu-inductor without a GPU, cuda-inductor
with one (the inner runs see the same devices)."""

import json
import re

import pytest
import yaml
from fusion_plugin_helpers import PLUGIN_ARGS, TIMED_INI, baselines

from pytest_fusion.compiled_gate import compiled_device

pytestmark = pytest.mark.slow  # every run here is a real torch.compile (~20 s on CPU)

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
    # Line 10 of model.py reads a value into Python: Dynamo breaks the graph there.
    "item": "y = F.relu(x * 2.0)\ns = y.sum().item()\nreturn y + s",
    # A matmul between the pointwise ops: a kernel before it, the library call, one after.
    "matmul": "y = F.relu(x * 2.0) @ self.w\nreturn torch.sigmoid(y)",
    "merged": "y = F.relu(x * 2.0) * self.w[0]\nreturn torch.sigmoid(y)",
}
TEST = """\
import pytest
import model

@pytest.mark.fusion_check(model.Net, (4, 8), checks=["clusters"]{kwargs})
def test_net():
    pass
"""


def project(p, body: str, ini: str = "", **marker) -> None:
    p.makeini(TIMED_INI + ini)
    p.makepyfile(
        model=HEAD + "".join(f"        {ln}\n" for ln in BODIES[body].splitlines()),
        test_net=TEST.format(kwargs="".join(f", {k}={v!r}" for k, v in marker.items())),
    )


def run(p, *args):
    return p.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *PLUGIN_ARGS, *args
    )


def compiled_of(p) -> dict:
    (path,) = baselines(p.path).values()
    return yaml.safe_load(path.read_text())["compiled"]


def test_a_new_item_graph_break_fails_naming_line_and_reason(pytester):
    project(pytester, "base", compiled=True)
    run(pytester, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    assert compiled_of(pytester)[BACKEND]["graph_breaks"] == []
    project(pytester, "item", compiled=True)
    r = run(pytester)
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert re.search(
        r"new graph break at model\.py:10 \(`s = y\.sum\(\)\.item\(\)`\): "
        r"Unsupported Tensor\.item\(\) call",
        out,
    ), out
    # The extra graph is that break: said once in the failure (with CI set, pytest's short
    # summary repeats whole messages, so only the text before it is counted).
    assert out.split("short test summary info")[0].count("new graph break") == 1


def test_merged_kernels_pass_and_are_listed_as_improved(pytester):
    project(pytester, "matmul", compiled=True)
    run(pytester, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    before = compiled_of(pytester)[BACKEND]["kernels"]
    assert len(before) >= 2
    project(pytester, "merged", compiled=True)
    r = run(pytester)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(
        [
            "test_net.py::test_net: improved",
            f"*Inductor now emits 1 kernel (baseline {len(before)})*",
            "accept with: pytest --fusion-update-baselines=all*",
        ]
    )
    assert "regress" not in r.stdout.str()


def test_another_torch_version_is_said_and_follows_the_option(pytester):
    project(pytester, "base", compiled=True)
    run(pytester, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    (path,) = baselines(pytester.path).values()
    data = yaml.safe_load(path.read_text())
    now = data["compiled"][BACKEND]["torch"]
    data["compiled"][BACKEND]["torch"] = "2.11.0"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    said = f"compiler changed: torch 2.11.0 → {now} (backend {BACKEND})"
    r = run(pytester, "-rA")
    r.assert_outcomes(passed=1)
    assert said in r.stdout.str()
    r = run(pytester, "-o", "fusion_compiler_change=fail")
    r.assert_outcomes(failed=1)
    assert said in r.stdout.str()


def test_a_baseline_without_a_compiled_record_keeps_loading(pytester):
    project(pytester, "base")  # compiled off: the schema-3 shape of a baseline
    run(pytester, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    (path,) = baselines(pytester.path).values()
    data = yaml.safe_load(path.read_text())
    data["schema_version"] = 3
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    r = run(pytester, "-o", "fusion_compiled=true")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([f"*compiled record taken on {BACKEND}, none in the baseline*"])
    run(pytester, "-o", "fusion_compiled=true", "--fusion-update-baselines=new")
    assert compiled_of(pytester)[BACKEND]["graphs"] == 1


def test_a_split_kernel_fails_naming_the_op_that_now_separates_it(pytester):
    project(pytester, "merged", compiled=True)
    run(pytester, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    (merged,) = compiled_of(pytester)[BACKEND]["kernels"]
    project(pytester, "matmul", compiled=True)  # line 9 now multiplies by the matrix
    r = run(pytester, "--fusion-report=rep")
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert re.search(
        rf"`{merged['name']}` \(mul → relu → select → sigmoid\) at model\.py:9, model\.py:10 "
        rf"splits into `{POINTWISE}mul_relu_0` \(mul → relu\) at model\.py:9 and "
        rf"`{POINTWISE}sigmoid_1` \(sigmoid\) at model\.py:10: the matrix product "
        r"`operator\.matmul` \(line 9\) sits between them",
        out,
    ), out
    # The agreement: in the terminal report, the Markdown and JSON files and the HTML page.
    assert f"test_net.py::test_net [{BACKEND}]: 2 kernels, 1 library call" in out
    md = (pytester.path / "rep.md").read_text()
    assert "### torch.compile: our clusters beside Inductor's kernels" in md
    assert f"| `mul → relu` | model.py:9 | `{POINTWISE}mul_relu_0` | same group |" in md
    (test,) = json.loads((pytester.path / "rep.json").read_text())["tests"]
    assert test["compiled"][BACKEND]["clusters"][0]["verdict"] == "same group"
    (page,) = (pytester.path / "rep-tests").iterdir()
    assert f"{POINTWISE}mul_relu_0" in page.read_text()


def test_a_bound_fails_with_measured_beside_bound(pytester):
    project(pytester, "matmul", compiled_max_kernels=1, compiled_max_graph_breaks=0)
    r = run(pytester, "--fusion-update-baselines=new")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(
        [
            f"*compiled bound exceeded on {BACKEND}: 2 generated kernels (library calls not "
            f"counted) (`{POINTWISE}mul_relu_0`, `{POINTWISE}sigmoid_1`), more than "
            "compiled_max_kernels=1"
        ]
    )
    assert "compiled_max_graph_breaks" not in r.stdout.str()  # within that bound: not said
