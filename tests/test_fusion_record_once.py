"""One TestRecord per fusion check: the judge's, made with the compiled record's summary.

In-process runs with torch.compile faked (``compiled_data`` returns a constructed record):
what is under test is how often the session records a check and what that record carries,
not Inductor's output."""

import pytest
from fusion_plugin_helpers import marked_test, run

from fusion_core import CompiledKernel, CompiledRecord, OpSite
from pytest_fusion import compiled_gate
from pytest_fusion.session import FusionSession

pytestmark = pytest.mark.usefixtures("torch_warm")

BACKEND = "cpu-inductor"
KERNEL = CompiledKernel("cpp_fused_add_mul_relu_0", "generated", ("add", "mul", "relu"),
                        (OpSite("mul", "", "model.py", 10),))
RECORD = CompiledRecord(BACKEND, "2.13.0", "", 1, (), (KERNEL,), 0, bytes_moved=256)
AGREEMENT = {"cluster_verdicts": [{"cluster": 0, "verdict": "same group",
                                   "kernels": [KERNEL.name], "detail": KERNEL.name}],
             "kernels": []}

# A second test in the same file: the fixture's own analyze() and check().
FIXTURE_TEST = """
def test_fixture(fusion_advisor):
    fusion_advisor.check(fusion_advisor.analyze(model.Net, (4, 8), compiled=True))
"""


@pytest.fixture
def recorded(monkeypatch) -> list:
    """Every TestRecord the inner runs' sessions record, in order."""
    made = []
    record = FusionSession.record

    def counting(self, rec):
        made.append(rec)
        record(self, rec)

    monkeypatch.setattr(FusionSession, "record", counting)
    monkeypatch.setattr(compiled_gate, "compiled_data",
                        lambda *args, **kwargs: ({BACKEND: RECORD.to_dict()},
                                                 {BACKEND: AGREEMENT}, {}))
    return made


@pytest.mark.parametrize("update", [("--fusion-update-baselines=new",), ()],
                         ids=["created", "compared"])
def test_each_check_is_recorded_once_with_its_compiled_summary(proj, recorded, update):
    proj.makepyfile(test_net=marked_test(compiled=True) + FIXTURE_TEST)
    if not update:  # the compared run reads the baselines the first run wrote
        run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=2)
        del recorded[:]
    run(proj, *update).assert_outcomes(passed=2)
    assert sorted(r.nodeid for r in recorded) == ["test_net.py::test_fixture",
                                                   "test_net.py::test_net"]
    assert {r.status for r in recorded} == {"created" if update else "pass"}
    for rec in recorded:
        entry = rec.compiled[BACKEND]
        assert (entry["kernels"], entry["library_calls"], entry["bytes_moved"]) == (1, 0, 256)
        assert [c["verdict"] for c in entry["clusters"]] == ["same group"]
