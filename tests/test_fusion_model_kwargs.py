"""The model's constructor arguments in the baseline: `model_kwargs` (and `factory` when a
function built the model), named in the verdict when a test builds the model otherwise."""

import sys
from dataclasses import replace

import pytest
import yaml
from fusion_plugin_helpers import baseline_notes, baselines, run

from pytest_fusion.compare import compare
from pytest_fusion.construction import Construction, describe, plain
from pytest_fusion.schema import from_data, to_data
from pytest_fusion.snapshot import BaselineError, Snapshot

pytestmark = pytest.mark.usefixtures("torch_warm")

# `n_experts` widens the bias the chain adds: more experts, more bytes written.
MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
class Tag:
    pass
class MoE(nn.Module):
    def __init__(self, n_experts=1, dim=8, act=None, tag=None, note="", shape=None):
        super().__init__()
        self.b = nn.Parameter(torch.zeros(n_experts, 1, dim))
    def forward(self, x):
        y = x * 2.0
        y = F.relu(y)
        return y + self.b
def make_moe(**kwargs):
    return MoE(**kwargs)
def make_big(**kwargs):
    return MoE(**kwargs)
"""

TEST = """\
import functools
import pytest
import torch
import model

@pytest.mark.fusion_check({model}, (4, 8), checks=("clusters", "rejections", "traffic"),
                          model_kwargs={kwargs})
def test_moe():
    pass
"""
NODE = "test_moe.py::test_moe"


def marked(kwargs: str, model: str = "model.MoE") -> str:
    return TEST.format(model=model, kwargs=kwargs)


@pytest.fixture
def proj(pytester, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # model.py is rewritten
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(model=MODEL, test_moe=marked("{'n_experts': 4}"))
    return pytester


def recorded(p) -> dict:
    return yaml.safe_load(baselines(p.path)[NODE].read_text())


def test_a_changed_argument_is_named_above_what_it_changed(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    assert recorded(proj)["model_kwargs"] == {"n_experts": 4}
    proj.makepyfile(test_moe=marked("{'n_experts': 8}"))
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["fusion regression against fusion_baselines/*.yaml:",
                            "  (model built with n_experts=8, baseline with n_experts=4)",
                            "  - `mul → relu → add` at model.py:11-13 moves more traffic: *",
                            "If this is intended, accept it with: *"])
    run(proj, "--fusion-update-baselines=failing").assert_outcomes(passed=1)
    assert recorded(proj)["model_kwargs"] == {"n_experts": 8}
    r = run(proj)
    r.assert_outcomes(passed=1)
    assert baseline_notes(r.stdout.str()) == []


def test_changed_inputs_and_arguments_are_both_named_in_the_failure_and_the_report(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    proj.makepyfile(test_moe=marked("{'n_experts': 8}").replace("(4, 8)", "(2, 8)"))
    r = run(proj, "--fusion-report=rep")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["fusion regression against fusion_baselines/*.yaml:",
                            "  (model built with n_experts=8, baseline with n_experts=4)",
                            "  - the example inputs changed (4×8 float32 → 2×8 float32): the "
                            "baseline no longer applies",
                            "If this is intended, accept it with: *"])
    assert "Also:" not in r.stdout.str()  # the argument change is said once
    # The record (the report's, the written baseline's notes) names both, not the inputs only.
    report = (proj.path / "rep.md").read_text()
    assert ("- the example inputs changed (4×8 float32 → 2×8 float32): the baseline no longer "
            "applies\n- model built with n_experts=8, baseline with n_experts=4\n") in report


def test_the_baseline_records_factory_and_arguments_stably(proj):
    proj.makepyfile(test_moe=marked(
        "{'note': 'x', 'dim': 8, 'act': torch.nn.GELU, 'tag': model.Tag(), 'shape': (2, 3)}",
        "functools.partial(model.make_moe, n_experts=2)"))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    data = recorded(proj)
    assert list(data)[:5] == ["schema_version", "test", "model", "factory", "model_kwargs"]
    assert data["model"] == "MoE" and data["factory"] == "make_moe"
    # Sorted by name; not plain data by repr, without the address that differs every run.
    assert data["model_kwargs"] == {"act": "torch.nn.modules.activation.GELU", "dim": 8,
                                    "n_experts": 2, "note": "x", "shape": [2, 3],
                                    "tag": "<model.Tag object>"}
    r = run(proj)  # a new Tag() in a new process: the same argument
    r.assert_outcomes(passed=1)
    assert baseline_notes(r.stdout.str()) == []


def test_another_factory_is_named_with_its_arguments(proj):
    proj.makepyfile(test_moe=marked("{'n_experts': 4}", "model.make_moe"))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    proj.makepyfile(test_moe=marked("{'n_experts': 4}", "model.make_big"))
    r = run(proj)
    r.assert_outcomes(passed=1)  # the same clusters: a change
    r.stdout.fnmatch_lines([f"{NODE}: changed (not a regression)*",
                            "    model built by make_big(n_experts=4), baseline by "
                            "make_moe(n_experts=4)"])


def test_an_argument_given_or_dropped_names_the_default(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    proj.makepyfile(test_moe=marked("{'n_experts': 4, 'note': 'x'}"))
    r = run(proj)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([f"{NODE}: changed (not a regression)*",
                            "    model built with note='x', baseline without note (its default)"])
    proj.makepyfile(test_moe=marked("{}"))
    r = run(proj)
    r.assert_outcomes(passed=1)  # one expert: less traffic, an improvement
    r.stdout.fnmatch_lines([f"{NODE}: improved",
                            "    `mul → relu → add` at model.py:11-13 moves less traffic: *",
                            "    model built without n_experts (its default), baseline with "
                            "n_experts=4"])


def test_a_baseline_written_before_the_arguments_loads_and_says_nothing_of_them(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    path = baselines(proj.path)[NODE]
    data = recorded(proj)
    del data["model_kwargs"]  # as written before it was recorded
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    r = run(proj)
    r.assert_outcomes(passed=1)
    assert baseline_notes(r.stdout.str()) == []
    proj.makepyfile(test_moe=marked("{'n_experts': 8}"))
    r = run(proj)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["  - `mul → relu → add` at model.py:11-13 moves more traffic: *"])
    assert "model built" not in r.stdout.str()
    proj.makepyfile(test_moe=marked("{'n_experts': 4}"))
    run(proj, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    assert "model_kwargs" not in recorded(proj)  # =new adds nothing to a baseline
    run(proj, "--fusion-update-baselines=all").assert_outcomes(passed=1)
    assert recorded(proj)["model_kwargs"] == {"n_experts": 4}


def test_a_model_passed_built_records_no_arguments(proj):
    proj.makepyfile(test_moe="""\
import model

def test_moe(fusion_advisor):
    fusion_advisor.check(fusion_advisor.analyze(model.MoE(4), (4, 8)), checks=["clusters"])
""")
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    assert "model_kwargs" not in recorded(proj) and "factory" not in recorded(proj)


# ---------------------------------------------------------------- the data itself

def snap(built: Construction | None, model: str = "MoE") -> Snapshot:
    return Snapshot("t.py::t", model, ("4×8 float32",), (), (), built=built)


def test_plain_values_read_back_equal_and_others_by_stable_repr():
    import torch

    assert plain({"a": (1, [2.5, None]), "b": True}) == {"a": [1, [2.5, None]], "b": True}
    assert plain(torch.relu) == "torch.relu" and plain(int) == "int"
    assert plain(torch.float16) == "torch.float16"
    assert plain({1: "x"}) == "{1: 'x'}"  # keys YAML would not keep: the repr
    assert plain(object()) == "<object object>"
    assert plain("y" * 200).startswith("y") and len(plain(torch.zeros(50))) == 120


def test_describe_unwraps_partials_and_names_only_what_is_not_the_class():
    import functools

    import torch.nn as nn

    assert describe(nn.Linear, {"out_features": 2, "in_features": 3}, "Linear") == \
        Construction("", (("in_features", 3), ("out_features", 2)))
    partial = functools.partial(functools.partial(nn.Linear, 3, bias=False), 2)
    assert describe(partial, {"bias": True}, "Linear") == \
        Construction("Linear(3, 2)", (("bias", True),))
    assert describe("models/moe.py:make_moe", None, "MoE") == Construction("make_moe", ())
    assert describe("models/moe.py", None, "MoE") == Construction("", ())


def test_the_arguments_round_trip_and_a_bad_field_is_one_line():
    built = Construction("make_moe", (("act", "torch.relu"), ("n_experts", 4)))
    assert from_data(to_data(snap(built)), "x.yaml").built == built
    old = to_data(snap(built))
    del old["model_kwargs"], old["factory"]
    assert from_data(old, "x.yaml").built is None
    bad = {**to_data(snap(built)), "model_kwargs": [4]}
    with pytest.raises(BaselineError, match="corrupt fusion baseline x.yaml: `model_kwargs` "
                                            "has the wrong type"):
        from_data(bad, "x.yaml")


def test_only_a_construction_both_sides_record_is_compared():
    four = Construction("", (("n_experts", 4),))
    eight = replace(four, kwargs=(("n_experts", 8),))
    result = compare(snap(four), snap(eight))
    assert result.changes == ("model built with n_experts=8, baseline with n_experts=4",)
    assert result.status == "changed"
    moved = compare(snap(four), replace(snap(eight), inputs=("2×8 float32",)))
    assert moved.regressions == ("the example inputs changed (4×8 float32 → 2×8 float32): the "
                                 "baseline no longer applies",)
    assert moved.changes == ("model built with n_experts=8, baseline with n_experts=4",)
    assert compare(snap(None), snap(eight)).messages == ()
    assert compare(snap(four), snap(None)).messages == ()
    assert compare(snap(four), snap(four, "MoE2")).changes == (
        "model built by MoE2(n_experts=4), baseline by MoE(n_experts=4)",)
    nan = Construction("", (("eps", float("nan")),))
    assert compare(snap(nan), snap(nan)).messages == ()
