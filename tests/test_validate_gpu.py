"""The four gates natively on a CUDA GPU: ExampleNet at 16384×1024 (skipped without CUDA)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fusion_core
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.validate import devicetime, validate
from fusion_core.validate.bench import IMPLAUSIBLE_PEAK, SAMPLES

pytestmark = [pytest.mark.gpu, pytest.mark.timing,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "example_net.py"


@pytest.fixture(scope="module")
def analysis():
    return analyze_file(EXAMPLE, [InputSpec((16384, 1024))])


@pytest.fixture(scope="module")
def report(analysis):
    return validate(analysis, inductor=True)


def test_cluster_numerics_native(report):
    assert report.mode == "cuda"
    for r in report.results:
        assert r.mode == "cuda" and r.shape[0] == 16384
        assert r.gate("cluster numerics").passed, r.status
        assert r.status == "verified (cuda)"


def test_model_numerics_with_every_kernel(report, analysis):
    assert report.model.passed and len(report.model.patched) == len(analysis.clusters)


def test_benchmark_regime_and_speedup(report):
    for r in report.results:
        assert r.gate("benchmark").passed, r.status
        assert r.timing.clock == "device", "kernel and eager subgraph captured in CUDA graphs"
        assert len(r.timing.kernel_us) == devicetime.SAMPLES and min(r.timing.kernel_us) > 0
        assert len(r.timing.kernel_host_us) == SAMPLES
        # 64-128 MB of fused traffic per cluster: more than the H200's 60 MiB L2.
        assert r.regime == "dram-bound", (r.cluster, r.regime, r.fused_bytes)
        assert r.cluster_speedup > 1.2, (r.cluster, r.cluster_speedup)
        assert r.model_speedup is not None and r.model_speedup > 1.0
        assert r.timing.inductor_us, "Inductor time for the same cluster"
    assert report.model_timing.speedup > 1.0
    assert report.model_timing.clock == "device" and report.model_timing.patched_host_us


def test_bandwidth_against_detected_peak(report):
    assert report.peak_gbps and report.peak_source == "detected"
    for r in report.results:
        assert r.gate("bandwidth").passed
        assert r.gbps == pytest.approx(r.fused_bytes / (r.timing.kernel * 1e-6) / 1e9)
        assert 0.2 * report.peak_gbps < r.gbps < IMPLAUSIBLE_PEAK * report.peak_gbps


def test_peak_override(analysis):
    small = analyze_file(EXAMPLE, [InputSpec((256, 1024))])
    rep = validate(small, peak_gbps=1000.0)
    assert rep.peak_gbps == 1000.0 and rep.peak_source == "--peak-gbps"


def test_measure_for_the_plugin(analysis):
    out = fusion_core.measure(analysis)
    assert out["device"]["name"] and len(out["device"]["capability"]) == 2
    assert [c["index"] for c in out["clusters"]] == [0, 1, 2]
    for c in out["clusters"]:
        assert len(c["kernel_us"]) >= 3 and len(c["eager_us"]) >= 3
        assert c["regime"] in ("launch-bound", "l2-resident", "dram-bound")
    assert len(out["model"]["fused_us"]) >= 3
