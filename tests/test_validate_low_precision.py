"""Model numerics for low-precision models: the patched graph judged against a float64 run
of the same graph (``validate/model_check.py``), and a failure bisected to its cluster.

The model: ``h = sigmoid(x) * scale + 0.3`` (cluster 0, values up to ~12 where one bf16
step is 0.0625), a linear layer whose rows take differences of neighbours (near-zero results
from values near 10), then ``relu(y) * 2 - 0.5`` (cluster 1). A kernel computes each cluster
in float32 and rounds once; eager rounds after every op. Both are rounding, and the
differences land next to near-zero values, where the elementwise tolerance refuses them.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from rich.console import Console

from fusion_core import codegen
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze
from fusion_core.validate import LoadedKernel, codegen_provider, model_check, validate
from fusion_core.validate.float64 import graph_in_float64, inputs_in_float64
from fusion_core.validate.kernels import build_kernels
from fusion_core.validate.model_check import Verdict, _culprits
from fusion_core.validate.numerics import MODEL_TOL, as_tuple, compare
from fusion_core.validate.prepare import recording
from fusion_core.validate.report import print_validation
from fusion_core.validate.run import load_generated
from fusion_core.validate.subgraph import patch

SHAPE = InputSpec((2, 32, 64), torch.bfloat16)


class Differences(nn.Module):
    def __init__(self, scale: float = 12.0, width: int = 64) -> None:
        super().__init__()
        self.scale = scale
        self.mix = nn.Linear(width, width, bias=False)
        eye = torch.eye(width)
        with torch.no_grad():
            self.mix.weight.copy_(eye - torch.roll(eye, 1, dims=1))

    def forward(self, x):
        h = torch.sigmoid(x) * self.scale + 0.3
        return torch.relu(self.mix(h)) * 2.0 - 0.5


def _analysis(scale: float = 12.0):
    return analyze(Differences(scale).to(torch.bfloat16), SHAPE)


@pytest.fixture(scope="module")
def rounding_only():
    analysis = _analysis()
    assert [c.chain for c in analysis.clusters] == ["sigmoid → mul → add", "relu → mul → sub"]
    return analysis


@pytest.fixture(scope="module")
def generated(rounding_only, tmp_path_factory):
    """The two generated kernels' launchers, and the recording at the analysed shape."""
    kernels = build_kernels(rounding_only)
    workdir = tmp_path_factory.mktemp("kernels")
    launchers = {i: load_generated(kernels.kernels[i], workdir).launcher for i in (0, 1)}
    # Where validation records: the kernels are compiled for CUDA when there is one.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rec = recording(rounding_only, [], keep_rows=False, device=device, seed=0)
    return rec, launchers


def test_the_float64_graph_widens_casts_factories_and_constants():
    class Casts(nn.Module):
        def forward(self, x):
            wide = x.float() * torch.full((x.shape[-1],), 1 / 3, dtype=torch.bfloat16)
            return wide.to(torch.bfloat16) + torch.tensor([0.5], dtype=torch.bfloat16)

    gm = analyze(Casts(), InputSpec((4, 8), torch.bfloat16), capture="export").graph_module
    (x,) = inputs_in_float64([torch.randn(4, 8).to(torch.bfloat16)])
    wide = graph_in_float64(gm)
    out = wide(x)
    assert x.dtype == out.dtype == torch.float64
    assert torch.allclose(out, x * (1 / 3) + 0.5, rtol=1e-12, atol=0)  # not rounded to bf16
    constants = [getattr(wide, n.target) for n in wide.graph.nodes if n.op == "get_attr"]
    assert constants and all(t.dtype == torch.float64 for t in constants)
    dtypes = [
        a
        for n in gm.graph.nodes
        for a in (*n.args, *n.kwargs.values())
        if isinstance(a, torch.dtype)
    ]
    assert torch.bfloat16 in dtypes  # the premise: the trace bakes bf16 in (left untouched)
    assert gm(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_a_rounding_only_bf16_model_passes_where_the_elementwise_rule_fails(generated):
    rec, launchers = generated
    patched = patch(rec.gm, {i: (rec.clusters[i], launchers[i]) for i in launchers})
    with torch.no_grad():
        out = as_tuple(patched(*[t.clone() for t in rec.inputs]))
    strict, err, why = compare(out, as_tuple(rec.model_out), MODEL_TOL)
    assert not strict and "beyond atol 0.05 + rtol 0.1" in why  # the old rule refused it
    check = model_check.model_check(rec, launchers)
    assert check.passed and check.blamed == () and check.max_abs_err == err
    # The kernels round once: closer to float64 than eager, which rounds after every op.
    assert 0 < check.patched_rmse <= check.eager_rmse


def test_a_rounding_only_bf16_model_offers_every_kernel(rounding_only):
    report = validate(rounding_only, timing=False)
    assert [r.usable for r in report.results] == [True, True], [r.status for r in report.results]
    buf = io.StringIO()
    print_validation(report, Console(file=buf, width=400))
    (line,) = [ln for ln in buf.getvalue().splitlines() if ln.startswith("model numerics")]
    assert line.startswith("model numerics: pass (2 kernels patched")
    assert "RMSE against a float64 run" in line and "where eager's is" in line


def _with_wrong_constant(twin):
    """Cluster 0's kernel generated from a twin whose scale is 4 % off (12.48, not 12): a
    real kernel with a wrong constant. The other cluster's kernel is the right one."""

    def provider(analysis, cluster, workdir: Path) -> LoadedKernel:
        if cluster.index != 0:
            return codegen_provider(analysis, cluster, workdir)
        return load_generated(codegen.generate(twin, twin.clusters[0]), workdir / "twin")

    return provider


def test_a_wrong_constant_in_one_kernel_withholds_that_cluster_only(rounding_only):
    report = validate(rounding_only, _with_wrong_constant(_analysis(12.48)), timing=False)
    wrong, right = report.result(0), report.result(1)
    # Within bf16's per-kernel tolerance (5 %): only the model check can catch it.
    assert wrong.gate("cluster numerics").passed and wrong.max_abs_err > 0
    assert report.model.passed is False and report.model.blamed == (0,)
    assert not wrong.usable and wrong.failed.gate == "model numerics"
    assert "RMSE against float64" in wrong.failed.detail
    assert "beyond 3x eager's + one bfloat16 step" in wrong.failed.detail
    assert right.usable and report.model.offered == (1,)
    buf = io.StringIO()
    print_validation(report, Console(file=buf, width=400))
    text = buf.getvalue()
    assert "cluster 0 not offered" in text
    assert "the other kernel passes (max abs err" in text


def test_the_elementwise_rule_decides_without_a_float64_run(generated, monkeypatch):
    """An op with no float64 kernel leaves no reference: the strict rule then refuses the
    rounding-only model, and says why nothing excused it."""
    rec, launchers = generated

    def no_float64(gm):
        raise RuntimeError("\"addmm\" not implemented for 'Double'")

    monkeypatch.setattr(model_check, "graph_in_float64", no_float64)
    check = model_check.model_check(rec, launchers)
    assert check.passed is False
    assert "beyond atol 0.05 + rtol 0.1; no float64 run of the graph (RuntimeError" in check.detail


def test_nan_fails_whatever_float64_says():
    nan = torch.tensor([1.0, float("nan")], dtype=torch.bfloat16)
    eager = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    verdict = model_check.judge((nan,), (eager,), lambda: pytest.fail("no reference needed"))
    assert not verdict.passed and "NaN" in verdict.why


def test_a_float32_output_within_the_elementwise_tolerance_needs_no_float64_run():
    x = torch.randn(64)
    verdict = model_check.judge((x + 1e-6,), (x,), lambda: pytest.fail("no reference needed"))
    assert verdict.passed and verdict.patched_rmse is None


def test_a_bf16_output_within_the_elementwise_tolerance_is_still_held_to_float64():
    """bf16's model tolerance (rtol 10 %) passes a 4 % bias; the float64 rule does not."""
    exact = torch.linspace(1, 4, 256, dtype=torch.float64)
    eager = exact.to(torch.bfloat16)
    biased = (exact * 1.04).to(torch.bfloat16)
    assert compare((biased,), (eager,), MODEL_TOL)[0]
    reference = lambda: model_check.Float64Reference((exact,))  # noqa: E731
    verdict = model_check.judge((biased,), (eager,), reference)
    assert not verdict.passed and "RMSE against float64" in verdict.why
    assert model_check.judge((eager.clone(),), (eager,), reference).passed


def test_bisection_names_each_culprit_with_its_reason_and_keeps_a_passing_set():
    """Clusters 2 and 5 fail alone; 6 fails only beside 1. Every run of a set is judged by
    the rule here, so the test checks the search itself."""
    runs: list[frozenset[int]] = []

    def run(indices):
        s = frozenset(indices)
        runs.append(s)
        if 2 in s or 5 in s:
            return Verdict(False, 1.0, f"broken {min(s & {2, 5})}")
        if {1, 6} <= s:
            return Verdict(False, 1.0, "1 and 6 together")
        return Verdict(True, 0.0)

    found = _culprits(run, (), tuple(range(12)))
    assert dict(found) == {
        2: "broken 2",
        5: "broken 5",
        6: "passes alone, not beside clusters 0, 1, 3, 4: 1 and 6 together",
    }
    kept = set(range(12)) - {2, 5, 6}
    assert run(tuple(kept)).passed
    assert len(set(runs)) < 2 * 12  # fewer distinct runs than patching each cluster twice
