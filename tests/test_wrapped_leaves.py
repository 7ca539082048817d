"""`--capture auto` and torch.fx.wrap-ed functions: keep the capture that fuses more."""

from __future__ import annotations

from wrapped_leaf_models import ResidualWithSkip, WrappedMix

from fusion_core.ir.capture import captured, wrapped_leaves
from fusion_core.ir.shapes import InputSpec
from fusion_core.ir.trace import trace_fx
from fusion_core.pipeline import analyze
from fusion_core.report.console import header


def test_wrapped_functions_are_found_as_leaves():
    assert wrapped_leaves(trace_fx(ResidualWithSkip())) == ["skip_rows"]


def test_auto_prefers_export_when_a_wrapped_leaf_splits_a_chain():
    fx = analyze(ResidualWithSkip(), (4, 8), capture="fx")
    assert [c.ops for c in fx.clusters] == [("mul", "gelu"), ("add", "sigmoid")]
    auto = analyze(ResidualWithSkip(), (4, 8))
    assert auto.graph.frontend == "export"
    assert [c.ops for c in auto.clusters] == [("mul", "gelu", "add", "sigmoid")]
    assert auto.capture_choice == (
        "chose torch.export over FX: FX left `skip_rows` opaque (torch.fx.wrap); export fuses "
        "4 ops into 1 kernel, FX 4 ops into 2 kernels")
    assert f"Capture: {auto.capture_choice}" in header(auto)


def test_auto_keeps_fx_when_export_fuses_no_more_and_says_so():
    auto = analyze(WrappedMix(), (4, 8))
    assert auto.graph.frontend == "fx"
    assert [c.ops for c in auto.clusters] == [("tanh", "mul")]
    assert auto.capture_choice == (
        "kept FX: FX left `token_mix` opaque (torch.fx.wrap), but torch.export fuses no more "
        "(2 ops into 1 kernel, FX 2 ops into 1 kernel)")


def test_explicit_fx_does_not_export():
    c = captured(ResidualWithSkip(), (InputSpec((4, 8)),), "fx")
    assert (c.frontend, c.alternative, c.choice) == ("fx", None, "")
