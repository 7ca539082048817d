"""FusionResult: the assertions live on the result (the fixture's methods alias them), and
its kernels are generated once per analysis."""

import json

import pytest
from fusion_plugin_helpers import run

from pytest_fusion.fixture import FusionAdvisor
from pytest_fusion.result import FusionResult
from pytest_fusion.snapshot import ClusterRec, RejectionRec, Snapshot


def result() -> FusionResult:
    cluster = ClusterRec(("mul", "relu", "add"), "model.py:10-12", "elementwise-chain",
                         ("mul", "relu", "add"), 400, 100, kernel="elementwise", module="")
    rejection = RejectionRec("shape", ("mm", "add"), "model.py:14", ("mm", "add"), ("mm",),
                             "matmul is not elementwise")
    snap = Snapshot("t.py::t", "Net", ("4×8 float32",), (cluster,), (rejection,))
    return FusionResult(analysis=None, snapshot=snap, measurement=None, hw_key=None)


def test_assert_fused_accepts_ops_in_order_with_others_between():
    r = result()
    r.assert_fused(["mul", "relu", "add"])
    r.assert_fused(["mul", "add"])
    with pytest.raises(AssertionError, match="`mul → mul` are not fused together"):
        r.assert_fused(["mul", "mul"])  # an op named twice must occur twice
    with pytest.raises(AssertionError) as info:
        r.assert_fused(["add", "mul"])
    assert str(info.value).splitlines() == [
        "`add → mul` are not fused together.", "Net: 1 cluster",
        "  cluster `mul → relu → add` (elementwise-chain) at model.py:10-12",
        "  rejected: shape on `mm → add` at model.py:14: matmul is not elementwise"]


def test_assert_fused_says_which_named_op_no_cluster_can_hold():
    """`SiLU` (the module's name) is no op of the graph, and `topk` a call never fused: the
    failure says so above the clusters instead of leaving the user to compare spellings."""
    import torch
    import torch.nn.functional as F

    from fusion_core.pipeline import analyze

    class Gate(torch.nn.Module):
        def forward(self, x):
            w, _ = torch.topk(torch.softmax(x, dim=-1), 2, dim=-1)
            return F.silu(w) * 2.0

    r = FusionResult(analysis=analyze(Gate(), (4, 8)), snapshot=result().snapshot,
                     measurement=None, hw_key=None)
    with pytest.raises(AssertionError) as info:
        r.assert_fused(["SiLU", "mul"])
    assert info.value.args[0].splitlines()[1] == "`SiLU` names no op of Gate: did you mean `silu`?"
    with pytest.raises(AssertionError) as info:
        r.assert_fused(["softmax", "topk"])
    assert info.value.args[0].splitlines()[1].startswith(
        "`topk` is no op fusion-advisor fuses: `torch.topk` (line ")


def test_assert_no_rejection_names_each_rejection_or_only_the_given_check():
    r = result()
    r.assert_no_rejection("aliasing")
    with pytest.raises(AssertionError, match=r"expected no `shape` rejection, found 1:\n"
                                             r"  shape on `mm → add` at model.py:14"):
        r.assert_no_rejection("shape")
    with pytest.raises(AssertionError, match="expected no rejection, found 1"):
        r.assert_no_rejection()


def test_assert_traffic_saved_by_bytes_and_by_fraction():
    r = result()
    r.assert_traffic_saved(at_least=300, fraction=0.75)
    with pytest.raises(AssertionError, match=r"fusion saves 300 B \(300 B\), expected at least"):
        r.assert_traffic_saved(at_least=301)
    with pytest.raises(AssertionError, match="fusion saves 75% of the cluster traffic, "
                                             "expected at least 80%"):
        r.assert_traffic_saved(fraction=0.8)


def test_the_fixtures_methods_are_the_results_assertions():
    r, advisor = result(), FusionAdvisor.__new__(FusionAdvisor)  # aliases read no test state
    for alias, args, own in ((advisor.assert_fused, (["add", "mul"],), r.assert_fused),
                             (advisor.assert_no_rejection, (), r.assert_no_rejection),
                             (advisor.assert_traffic_saved, (301,), r.assert_traffic_saved)):
        with pytest.raises(AssertionError) as via_fixture:
            alias(r, *args)
        with pytest.raises(AssertionError) as via_result:
            own(*args)
        assert str(via_fixture.value) == str(via_result.value)


MEASURE_SEES_KERNELS = """\
import json
import pathlib

def pytest_fusion_measure(analysis, config, kernels):
    seen = None if kernels is None else sorted(kernels.kernels)
    pathlib.Path(config.rootpath, "measured.json").write_text(json.dumps(seen))
    return {}
"""

BODY_ASSERTS = """\
import pytest
import model

@pytest.mark.fusion_check(model.Net, (4, 8))
def test_net(fusion_advisor):
    r = fusion_advisor.result
    r.assert_fused(["mul", "relu", "add"])
    fusion_advisor.assert_fused(r, ["mul", "add"])
    r.assert_traffic_saved(fraction=0.1)
"""


@pytest.mark.usefixtures("torch_warm")
def test_a_test_generates_each_kernel_once_for_its_baseline_timings_and_page(
        proj, generate_calls):
    calls = generate_calls
    proj.makeconftest(MEASURE_SEES_KERNELS)
    proj.makepyfile(test_net=BODY_ASSERTS)
    r = run(proj, "--fusion-update-baselines=new", "--fusion-report=out/")
    r.assert_outcomes(passed=1)
    assert (proj.path / "out" / "index.html").is_file()
    (page,) = (proj.path / "out" / "tests").glob("*.html")
    assert "cluster0" in page.read_text()  # the page shows the kernel it was handed
    assert calls == [0]  # one cluster, one generation
    assert json.loads((proj.path / "measured.json").read_text()) == [0]
