"""The compiled record on a GPU (run on a CUDA machine): Inductor's Triton backend, kept
beside the CPU record of the same test in one baseline, each under its backend's key."""

import pytest
import yaml
from fusion_plugin_helpers import baselines
from test_fusion_compiled_plugin import one_case_project, run

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_cuda_record_is_kept_beside_the_cpu_record_in_one_baseline(pytester, monkeypatch):
    one_case_project(pytester, "matmul", compiled=True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the CPU runner's record first
    run(pytester, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    r = run(pytester, "--fusion-update-baselines=new")  # this GPU adds its own beside it
    r.assert_outcomes(passed=1)
    (path,) = baselines(pytester.path).values()
    compiled = yaml.safe_load(path.read_text())["compiled"]
    assert set(compiled) == {"cpu-inductor", "cuda-inductor"}
    cpu, cuda = compiled["cpu-inductor"], compiled["cuda-inductor"]
    assert all(k["name"].startswith("cpp_fused_") for k in cpu["kernels"] if k["kind"] != "extern")
    generated = [k for k in cuda["kernels"] if k["kind"] != "extern"]
    assert generated and all(k["name"].startswith("triton_") for k in generated)
    assert cuda["triton"] and cuda["graphs"] == 1
    # The matmul splits the pointwise ops on both backends: mul → relu, then sigmoid.
    assert sorted(tuple(k["ops"]) for k in generated) == [("mul", "relu"), ("sigmoid",)]
    run(pytester).assert_outcomes(passed=1)  # this GPU's record now gates this GPU's run
