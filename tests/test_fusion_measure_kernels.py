"""The measure step times the kernels the plugin already generated: it generates none again."""

from pathlib import Path

import pytest
import torch

import fusion_core
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from pytest_fusion import measure
from pytest_fusion.result import generate_kernels

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "example_net.py"


def test_the_default_hook_hands_the_generated_kernels_to_fusion_core_measure(monkeypatch):
    seen = []

    def fake_measure(analysis, **kwargs):
        seen.append(kwargs)
        return {"clusters": []}

    given = generate_kernels(analyze_file(EXAMPLE, [InputSpec((4, 1024))]))
    monkeypatch.setattr(fusion_core, "measure", fake_measure, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(measure, "_device_id", lambda: "test-gpu-kernels-handed")
    assert measure.default_measure(object(), "cuda", given) == {"clusters": []}
    assert seen == [{"kernels": given.kernels, "failed": given.failed}]
    assert sorted(given.kernels) == [0, 1, 2]  # ExampleNet's three clusters


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_measure_times_the_kernels_it_is_handed_without_generating_again(request):
    analysis = analyze_file(EXAMPLE, [InputSpec((4096, 1024))])
    given = generate_kernels(analysis)
    calls = request.getfixturevalue("generate_calls")  # counted from here on
    out = fusion_core.measure(analysis, kernels=given.kernels, failed=given.failed)
    assert calls == []
    timed = sorted(c["index"] for c in out["clusters"] if c.get("kernel_us"))
    assert timed == sorted(given.kernels) == [0, 1, 2]
    assert out["clock"] == "device" and out["model"]["fused_us"]
