"""Every Inductor kernel fusing two or more ops that we do not match gets a named reason.

Hand-built captures over a small model with one line per reason: no compile needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from inductor_reason_model import ReasonNet
from rich.console import Console

from fusion_core.agreement import print_agreement
from fusion_core.inductor.capture import InductorCapture, InductorKernel, InductorNode
from fusion_core.inductor.explain import EPILOGUE, collapse, short_name
from fusion_core.inductor.match import match, missed_lines, to_dict
from fusion_core.pipeline import analyze

FILE = str(Path(__file__).resolve().with_name("inductor_reason_model.py"))


def _k(name, *nodes):
    return InductorKernel(name, tuple(InductorNode(f"{op}_{line}", op, module, FILE, line)
                                      for op, line, module in (n + ("",)[len(n) - 2:]
                                                               for n in nodes)))


@pytest.fixture(scope="module")
def agreement():
    a = analyze(ReasonNet(), (4, 8), (4, 8), capture="fx")
    cap = InductorCapture((
        _k("cpp_fused_add_relu_0", ("add", 15, "lin"), ("relu", 15)),  # bias add, ReLU
        _k("cpp_fused_mul_sigmoid_1", ("mul", 16), ("sigmoid", 16)),
        _k("cpp_fused_exp_mul_2", ("mul", 17), ("exp", 17)),  # decomposed cumprod
        _k("cpp_fused_cos_exp_3", ("exp", 18), ("cos", 19)),
    ), "define_kernel", (), "x")
    return match(a, cap)


def test_each_missed_kernel_has_its_reason(agreement):
    reasons = {k.kernel: k.reason for k in agreement.kernels}
    assert [k.status for k in agreement.kernels] == ["missed"] * 4
    assert reasons["cpp_fused_add_relu_0"] == EPILOGUE
    assert reasons["cpp_fused_mul_sigmoid_1"].startswith("split by our aliasing check: `.mul_()`")
    assert reasons["cpp_fused_exp_mul_2"].startswith("capture: opaque `torch.cumprod` (line 17)")
    assert "horizontal" in reasons["cpp_fused_cos_exp_3"]
    assert all(d["reason"] for d in to_dict(agreement)["kernels"])


def test_long_names_are_shortened_keeping_the_number():
    name = "cpp_fused_" + "_".join(["native_batch_norm_legit_no_training", "add", "relu"] * 8)
    name += "_17"
    short = short_name(name)
    assert len(short) <= 48 and short.endswith("…_17") and short.startswith("cpp_fused_native")
    assert short_name("cpp_fused_add_0") == "cpp_fused_add_0"


def test_repeated_misses_collapse_to_one_line():
    rows = [(f"cpp_fused_add_mul_{i}", ("add", "mul"), (10 + i,), "same reason") for i in range(5)]
    rows.append(("cpp_fused_exp_9", ("exp", "neg"), (3,), "other"))
    lines = collapse(rows)
    assert [str(x) for x in lines] == [
        "cpp_fused_add_mul_0 and 4 more like it (add → mul; L10,L11,L12,L13,L14): same reason",
        "cpp_fused_exp_9 (exp → neg; L3): other"]


def test_the_agreement_command_prints_one_line_per_reason(agreement):
    console = Console(record=True, width=300)
    print_agreement(agreement, console)
    text = console.export_text()
    assert text.count("  missed   ") == len(missed_lines(agreement)) == 4
    assert f"cpp_fused_add_relu_0 (add → relu; L15): {EPILOGUE}" in text
