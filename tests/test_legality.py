"""Each legality check, alone, on groups picked from tiny traced modules: one group it
accepts and one it rejects (with the culprit the pruning drops), plus the check order."""

from __future__ import annotations

import inspect
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F
from analysis_helpers import names_by_op, run

from fusion_core.analysis import legality as L
from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze


def _group(g, *ops):
    return set(names_by_op(g, *ops))


# --- fan-out -----------------------------------------------------------------

def test_fan_out_accepts_the_diamond():
    g = run(lambda x: (lambda e: e * 2.0 + e)(torch.exp(x))).graph
    assert L.check_fan_out(g, _group(g, "exp", "mul", "add")) is None


# Storing an escaping value pays (multi-output) unless it is smaller than the kernel's
# domain: `exp(x[0])` (8,) escaping from an (8, 8) kernel would be stored by every row.
def test_fan_out_accepts_an_escaping_value_when_storing_it_pays():
    g = run(lambda x: (lambda r: (r * 2.0, r))(torch.relu(x))).graph
    assert L.check_fan_out(g, _group(g, "relu", "mul")) is None


# `run` wraps a function of this file in analysis_helpers' module: the model's lines span two
# files, so every line in a reason names its file (`exp` (test_legality.py:38)).
def test_fan_out_rejects_a_value_also_used_outside():
    g = run(lambda x: (lambda e: (x * e, e))(torch.exp(x[0])), (8, 8)).graph
    failure = L.check_fan_out(g, _group(g, "exp", "mul"))
    assert failure is not None and failure.check == "fan-out"
    assert failure.culprits == ("exp",)
    # The graph's `output` node is no op the user wrote: the `return` that hands `e` back is.
    # The ops are in this file, the `return` in Fn.forward's: a bare "line 21" would be here.
    assert re.search(r"`exp` \(test_legality\.py:\d+\) is also one of the model's results, "
                     r"returned at analysis_helpers\.py:\d+;", failure.reason)
    assert "`output`" not in failure.reason
    assert "not less than" in failure.reason


def test_fan_out_says_sizes_as_the_report_writes_them():
    g = run(lambda x: (lambda e: (x * e, e))(torch.exp(x[0])), (64, 64)).graph
    failure = L.check_fan_out(g, _group(g, "exp", "mul"))
    assert re.search(r"would move [\d.]+ KB, not less than [\d.]+ KB split", failure.reason), \
        failure.reason
    assert not re.search(r"\d{4,} B", failure.reason)  # was "16640 B"


class MaskTwice(nn.Module):
    """The mask's second `unsqueeze` (the graph's `unsqueeze_1`) reads `eq` outside the group."""

    def forward(self, x):
        pad = x[..., 0] == 0
        h = (x * 2.0).masked_fill(pad.unsqueeze(-1), 0.0)
        return torch.softmax(h.masked_fill(pad.unsqueeze(-1), -1.0), dim=-1)


def test_fan_out_names_an_outside_view_by_op_and_line():
    g = analyze(MaskTwice(), (2, 4, 4)).graph
    failure = L.check_fan_out(g, _group(g, "eq", "mul") | {"unsqueeze", "masked_fill"})
    assert failure is not None and failure.check == "fan-out"
    line = inspect.getsourcelines(MaskTwice.forward)[1] + 3
    assert f"is also used by `unsqueeze` (line {line})" in failure.reason
    assert "unsqueeze_1" not in failure.reason


def test_fan_out_names_an_outside_call_with_no_rule_as_written():
    g = run(lambda x: (lambda e: (x * e, torch.roll(e, 1, 0)))(torch.exp(x[0])), (8, 8)).graph
    failure = L.check_fan_out(g, _group(g, "exp", "mul"))
    assert failure is not None
    assert "is also used by `torch.roll` (test_legality.py:" in failure.reason


def test_fan_out_rejects_two_results_and_blames_the_fork():
    g = run(lambda x: (lambda e: (e * 2.0, x * e))(torch.exp(x[0])), (8, 8)).graph
    failure = L.check_fan_out(g, _group(g, "exp", "mul"))
    assert failure is not None
    assert failure.culprits == ("exp",)
    assert "2 results" in failure.reason


# --- convexity ---------------------------------------------------------------

class ReEnter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        a = torch.exp(x)
        return a + self.lin(a)  # exp -> lin (outside) -> add: leaves and re-enters


def test_convexity_accepts_a_chain():
    g = run(lambda x: torch.exp(x) * 2.0 + 1.0).graph
    assert L.check_convexity(g, _group(g, "exp", "mul", "add")) is None


def test_convexity_rejects_a_path_through_an_outside_node():
    g = analyze(ReEnter(), (4, 8)).graph
    failure = L.check_convexity(g, _group(g, "exp", "add"))
    assert failure is not None and failure.check == "convexity"
    assert failure.culprits == ("add",)
    assert "`self.lin`" in failure.reason and "re-enters" in failure.reason


class ReEnterSecond(nn.Module):
    """The path re-enters at the second `add` (the graph's `add_1`), not the first."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        a = torch.exp(x + 1.0)
        return a + self.lin(a)


def test_convexity_names_the_path_as_the_user_wrote_it():
    g = analyze(ReEnterSecond(), (4, 8)).graph
    failure = L.check_convexity(g, _group(g, "add", "exp"))
    assert failure is not None and failure.check == "convexity"
    first = inspect.getsourcelines(ReEnterSecond.forward)[1] + 1
    assert (f"path `exp` (line {first}) → `self.lin` (line {first + 1}) → `add` "
            f"(line {first + 1}) leaves the group") in failure.reason
    assert "add_1" not in failure.reason


class ReEnterThroughATuple(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        a = torch.exp(x)
        o, _ = self.mha(a, a, a, need_weights=False)
        return a + o


def test_convexity_names_the_call_a_path_leaves_through_not_its_unpacking():
    g = analyze(ReEnterThroughATuple(), (2, 4, 8)).graph
    failure = L.check_convexity(g, _group(g, "exp", "add"))
    assert failure is not None
    first = inspect.getsourcelines(ReEnterThroughATuple.forward)[1] + 1
    assert (f"path `exp` (line {first}) → `self.mha` (line {first + 1}) → `add` "
            f"(line {first + 2}) leaves the group") in failure.reason, failure.reason


def test_convexity_is_not_confused_by_an_outside_branch_that_never_returns():
    class Side(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            a = torch.exp(x)
            return a * 2.0, self.lin(a)

    g = analyze(Side(), (4, 8)).graph
    assert L.check_convexity(g, _group(g, "exp", "mul")) is None


class MaskSizedByResult(nn.Module):
    """A causal mask sliced to the size of a value the group computes (`h.shape[-1]`). With
    `shifted`, a reduction in the group (`amax`) is on the way to that value, so no value
    read before the group tells its shape (``group.shape_sources``): the read is a use."""

    def __init__(self, from_input: bool = False, shifted: bool = False) -> None:
        super().__init__()
        self.from_input, self.shifted = from_input, shifted
        self.register_buffer("mask", torch.tril(torch.ones(8, 8, dtype=torch.bool)))

    def forward(self, x):
        z = x - x.amax(-1, keepdim=True) if self.shifted else x
        h = torch.exp(z)  # MASK_EXP_LINE
        n = x.shape[-1] if self.from_input else h.shape[-1]
        return torch.softmax(h.masked_fill(~self.mask[:n, :n], 0.0), dim=-1)


SHIFTED = ("amax", "sub", "exp", "bitwise_not", "masked_fill")


def test_convexity_names_the_shape_read_a_path_leaves_through():
    g = analyze(MaskSizedByResult(shifted=True), (4, 8, 8)).graph
    failure = L.check_convexity(g, _group(g, *SHIFTED))
    assert failure is not None and failure.check == "convexity"
    assert re.search(r"shape, size or dtype read of the result of `exp` \(line \d+\)",
                     failure.reason)
    assert "(`n = x.shape[-1] if self.from_input else h.shape[-1]`)" in failure.reason
    assert "an input's `.shape`" in failure.reason


def test_convexity_through_a_module_gives_no_shape_hint():
    g = analyze(ReEnter(), (4, 8)).graph
    failure = L.check_convexity(g, _group(g, "exp", "add"))
    assert failure is not None and "shape, size or dtype" not in failure.reason


class ShapeReadAndModuleBetween(nn.Module):
    """A UNet attention entry: `x.shape` is read after the residual add, and the norm's
    result also reaches the closing residual add through a module (`self.proj`)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(2, 8)
        self.proj = nn.Conv2d(8, 8, 1)

    def forward(self, x, h):
        x = x + h
        b, c, hh, ww = x.shape
        a = self.proj(self.norm(x)).reshape(b, c, hh, ww)
        return x + a


def test_convexity_gives_no_shape_hint_when_another_path_also_re_enters():
    """Reading `x.shape` earlier would not make `add → group_norm → add` convex (the path
    through `self.proj` stays), so the reason must not say the ops can then fuse."""
    g = analyze(ShapeReadAndModuleBetween(), (2, 8, 4, 4), (2, 8, 4, 4)).graph
    failure = L.check_convexity(g, _group(g, "add", "group_norm", "add"))
    assert failure is not None and failure.check == "convexity"
    assert failure.reason.startswith("path `self.norm` (line")  # the GroupNorm's call
    assert "shape, size or dtype" not in failure.reason and "can fuse" not in failure.reason


MASK_EXP_LINE = next(i for i, line in enumerate(inspect.getsource(
    inspect.getmodule(MaskSizedByResult)).splitlines(), 1) if line.endswith("# MASK_EXP_LINE"))


class TwoGelus(nn.Module):
    """The audio encoder's shape: two conv → norm → gelu stages and a residual from the
    first; the first gelu also feeds the second conv."""

    def __init__(self) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm1d(8)
        self.conv2 = nn.Conv1d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm1d(8)

    def forward(self, x):
        r = F.gelu(self.bn1(x))
        h = F.gelu(self.bn2(self.conv2(r)))
        return (h + r).transpose(1, 2)


def test_fan_out_names_the_escaping_value_by_op_and_line_not_node_name():
    g = analyze(TwoGelus().eval(), (2, 8, 16)).graph
    group = _group(g, "batch_norm", "gelu", "add")
    failure = L.check_fan_out(g, group)
    assert failure is not None and failure.check == "fan-out"
    first = min(_group(g, "gelu"), key=g.position)
    line = g[first].source.line
    # Was "`gelu` is also used by `self.conv2`": which of the group's two gelus?
    assert failure.reason.startswith(f"`gelu` (line {line}) is also used by `self.conv2`")


def test_fan_out_names_a_shape_read_by_its_line_and_the_fix():
    g = analyze(MaskSizedByResult(shifted=True), (4, 8, 8)).graph
    failure = L.check_fan_out(g, _group(g, *SHIFTED, "softmax"))
    assert failure is not None and failure.check == "fan-out"
    assert f"`exp` (line {MASK_EXP_LINE}) is also used by a shape, size or dtype read at line " \
        f"{MASK_EXP_LINE + 1}" in failure.reason and "getattr" not in failure.reason
    assert "an input's `.shape`" in failure.reason


class TwoReadsOnALine(MaskSizedByResult):
    def forward(self, x):
        h = torch.exp(x - x.amax(-1, keepdim=True))
        return torch.softmax(h.masked_fill(~self.mask[:h.shape[-1], :h.shape[-1]], 0.0), -1)


def test_fan_out_names_two_shape_reads_on_one_line_once():
    g = analyze(TwoReadsOnALine(), (4, 8, 8)).graph
    failure = L.check_fan_out(g, _group(g, *SHIFTED, "softmax"))
    assert failure is not None and failure.reason.count("shape, size or dtype read at") == 1


def test_a_shape_the_group_inputs_tell_is_no_use_of_the_value():
    g = analyze(MaskSizedByResult(), (4, 8, 8)).graph
    group = _group(g, "exp", "bitwise_not", "masked_fill", "softmax")
    assert L.check_convexity(g, group) is None and L.check_fan_out(g, group) is None


def test_fan_out_names_an_outside_op_by_op_and_line_not_node_name():
    g = run(lambda x: (lambda e: (x * e, e + 1.0, e + 2.0))(torch.exp(x[0])), (8, 8)).graph
    failure = L.check_fan_out(g, _group(g, "exp", "mul"))
    assert failure is not None
    assert "`add` (test_legality.py:" in failure.reason and "add_1" not in failure.reason


def test_reading_the_size_from_the_input_fuses_what_the_hint_says():
    split = analyze(MaskSizedByResult(shifted=True), (4, 8, 8))
    fused = analyze(MaskSizedByResult(from_input=True, shifted=True), (4, 8, 8))
    assert all("amax" not in c.nodes for c in split.clusters) and split.rejections
    assert [len(c.nodes) for c in fused.clusters] == [6]  # amax, -, exp, ~, masked_fill, softmax
    assert not fused.rejections


# --- shapes ------------------------------------------------------------------

def test_shapes_accepts_broadcast_operands_and_per_row_values():
    g = run(lambda x, y: (lambda e: e - e.amax(dim=-1, keepdim=True))(torch.exp(x) * y),
            (4, 8), (8,)).graph
    assert L.check_shapes(g, _group(g, "exp", "mul", "amax", "sub")) is None


def test_shapes_rejects_a_result_larger_than_the_reduction_domain():
    # softmax iterates over (4, 8); the product with y is (3, 4, 8).
    g = run(lambda x, y: F.softmax(x, dim=-1) * y, (4, 8), (3, 4, 8)).graph
    failure = L.check_shapes(g, _group(g, "softmax", "mul"))
    assert failure is not None and failure.check == "shapes"
    assert failure.culprits == ("mul",)
    assert "(3, 4, 8)" in failure.reason and "(4, 8)" in failure.reason
    assert re.search(r"^`mul` \(test_legality\.py:\d+\) reads `y` of shape \(3, 4, 8\)",
                     failure.reason)


def test_shapes_rejects_a_python_value_operand():
    g = run(lambda x: torch.exp(x) * math.log2(x.shape[-1])).graph
    failure = L.check_shapes(g, _group(g, "exp", "mul"))
    assert failure is not None and failure.culprits == ("mul",)
    assert "Python value" in failure.reason


def test_shapes_accepts_a_number_of_sizes_alone():
    """`x.shape[-1]` is a kernel scalar (``ir/run_scalars.py``)."""
    g = run(lambda x: torch.exp(x) * x.shape[-1]).graph
    assert L.check_shapes(g, _group(g, "exp", "mul")) is None



# A reduction without keepdim right-aligns with the last axis: on a square x, element
# (i, j) of `x.sum(-1) + x` reads row j's sum, which a row-per-program kernel never holds.
def test_shapes_rejects_a_per_row_result_broadcast_against_the_full_shape():
    g = run(lambda x: x.sum(-1) + x, (8, 8)).graph
    failure = L.check_shapes(g, _group(g, "sum", "add"))
    assert failure is not None and failure.check == "shapes"
    assert failure.culprits == ("add",)
    assert re.search(r"`add` \(\S+:\d+\) broadcasts `sum` \(\S+:\d+\) of shape \(8,\), "
                     "reduced without keepdim", failure.reason)
    assert "sum_1" not in failure.reason
    assert "(8, 8)" in failure.reason and "keepdim=True" in failure.reason


def test_shapes_follows_the_per_row_result_through_pointwise_ops():
    g = run(lambda x: x.amax(-1) * 2.0 - x, (8, 8)).graph
    failure = L.check_shapes(g, _group(g, "amax", "mul", "sub"))
    assert failure is not None and failure.culprits == ("sub",)


def test_shapes_accepts_keepdim_and_per_row_epilogues():
    keep = run(lambda x: x - x.amax(-1, keepdim=True), (8, 8)).graph
    assert L.check_shapes(keep, _group(keep, "amax", "sub")) is None
    # Per-row values combined with each other (and with a one-element value) stay per row.
    rows = run(lambda x: x.sum(-1) * 2.0 + x.sum(), (8, 8)).graph
    group = set(names_by_op(rows, "sum")[:1]) | _group(rows, "mul", "add")
    assert L.check_shapes(rows, group) is None


def test_detection_does_not_fuse_a_cross_row_broadcast():
    a = run(lambda x: (x * 2.0).sum(-1) + x, (8, 8))
    assert [c.ops for c in a.clusters] == [("mul", "sum")]  # the add is dropped
    assert [(r.check, r.culprits) for r in a.rejections] == [("shapes", ("add",))]
    assert "reduced without keepdim" in a.rejections[0].reason
    # The keepdim form of the same pattern still fuses into one cluster.
    k = run(lambda x: (x * 2.0).sum(-1, keepdim=True) + x, (8, 8))
    assert [c.ops for c in k.clusters] == [("mul", "sum", "add")]


# --- aliasing ----------------------------------------------------------------

def test_aliasing_accepts_pure_pointwise():
    g = run(lambda x: torch.relu(x * 2.0)).graph
    assert L.check_aliasing(g, _group(g, "mul", "relu")) is None


def test_aliasing_rejects_an_inplace_op():
    g = run(lambda x: torch.relu(x.add_(1.0) * 2.0)).graph  # the input stays in place
    failure = L.check_aliasing(g, _group(g, "mul", "add_", "relu"))
    assert failure is not None and failure.check == "aliasing"
    assert failure.culprits == ("add_",)
    assert "in place" in failure.reason


def test_aliasing_accepts_a_view_inside_the_group():
    """A view between two ops is a change of index map, not a hazard."""
    g = run(lambda x: torch.exp(x).transpose(0, 1) * 2.0).graph
    group = _group(g, "exp", "mul") | {n.name for n in g.nodes if n.op == "transpose"}
    assert L.check_aliasing(g, group) is None


def test_aliasing_rejects_an_escaping_view_of_an_input():
    """Eager's `x.t()` shares x's memory; a kernel's result would be a copy."""
    g = run(lambda x: (lambda v: (v, torch.exp(v) * 2.0))(x.t())).graph
    view = tuple(n.name for n in g.nodes if n.op == "t")
    failure = L.check_aliasing(g, _group(g, "exp", "mul") | set(view))
    assert failure is not None and failure.check == "aliasing"
    assert failure.culprits == view
    assert "view of the group's input `x`" in failure.reason


# --- reduction ---------------------------------------------------------------

def test_reduction_accepts_one_reduction_over_the_last_axis():
    for dim in (-1, 1):
        g = run(lambda x, d=dim: F.softmax(x * 2.0, dim=d)).graph
        assert L.check_reduction(g, _group(g, "mul", "softmax")) is None


def test_reduction_rejects_two_reductions():
    # over different rows: the sum's (4, 8) rows, then the (4,) vector it wrote
    g = run(lambda x: F.softmax(torch.exp(x).sum(dim=-1), dim=-1)).graph
    assert L.check_reduction(g, _group(g, "exp", "sum")) is None
    failure = L.check_reduction(g, _group(g, "exp", "sum", "softmax"))
    assert failure is not None and failure.check == "reduction"
    assert failure.culprits == tuple(names_by_op(g, "softmax"))
    assert "2 reductions" in failure.reason


def test_reduction_accepts_any_set_of_dims():
    for fn in (lambda x: torch.exp(x).sum(dim=0), lambda x: torch.exp(x).mean((0, 1)),
               lambda x: torch.exp(x).var(0, unbiased=False)):
        g = run(fn).graph
        red = next(n.name for n in g.nodes if n.kind is OpKind.REDUCTION)
        assert L.check_reduction(g, _group(g, "exp", g[red].op)) is None


def test_reduction_rejects_a_softmax_without_a_dim():
    # the implicit (deprecated) dim is not a dim the kernel can reduce
    g = run(lambda x: F.softmax(torch.exp(x), dim=None)).graph
    failure = L.check_reduction(g, _group(g, "exp", "softmax"))
    assert failure is not None and failure.culprits == tuple(names_by_op(g, "softmax"))
    assert "names no dims" in failure.reason


def test_reduction_rejects_two_reductions_over_different_dims_of_one_shape():
    g = run(lambda x: (lambda h: h.sum(0, keepdim=True) + h.sum(1, keepdim=True))(
        torch.exp(x))).graph
    sums = names_by_op(g, "sum")
    failure = L.check_reduction(g, {*names_by_op(g, "exp"), *sums})
    assert failure is not None and failure.culprits == (sums[1],)
    # In words, with the verb agreeing and no Python tuple (was "reduce other dims than
    # `sum` (line 5) ((0,))").
    # The model's ops are in this file, its forward in analysis_helpers: lines carry the file.
    at = r"\(test_legality\.py:\d+\)"
    assert re.fullmatch(rf"`sum` {at} reduces dim 1 where `sum` {at} reduces "
                        r"dim 0; one kernel reduces one set of dims", failure.reason), \
        failure.reason


def test_reduction_says_several_dims_as_a_list():
    g = run(lambda x: (lambda h: h.sum(dim=(2, 3)) + h.amax(dim=(1, 3)))(x * 2.0),
            (4, 8, 8, 8)).graph
    failure = L.check_reduction(g, _group(g, "mul", "sum", "amax"))
    assert failure is not None and failure.culprits == tuple(names_by_op(g, "amax"))
    at = r"\(test_legality\.py:\d+\)"
    assert re.fullmatch(rf"`amax` {at} reduces dims 1, 3 where `sum` {at} "
                        r"reduces dims 2, 3; one kernel reduces one set of dims", failure.reason), \
        failure.reason


# --- lowering ----------------------------------------------------------------

def test_lowering_accepts_ops_with_rules():
    g = run(lambda x: torch.div(x ** 3.7, 2.0)).graph
    assert L.check_lowering(g, _group(g, "pow", "div")) is None


def test_lowering_rejects_an_op_whose_arguments_have_no_rule():
    # round to decimals has no rule (div's rounding modes had none before they lowered)
    g = run(lambda x: torch.round(x * 2.0, decimals=1)).graph
    failure = L.check_lowering(g, _group(g, "mul", "round"))
    assert failure is not None and failure.check == "lowering"
    assert [g[n].op for n in failure.culprits] == ["round"]


# --- order and end-to-end ----------------------------------------------------

def test_checks_run_in_the_documented_order():
    from fusion_core import pipeline

    assert [name for name, _ in L.CHECKS] == [
        "device", "fan-out", "convexity", "shapes", "aliasing", "aliasing", "reduction", "lowering"]
    # the pipeline asks the code generator last (legality imports no codegen)
    assert pipeline.CHECKS == (*L.CHECKS, ("lowering", pipeline.lowers))


def test_first_failure_wins():
    # This group breaks fan-out (exp escapes to self.lin) and convexity: fan-out is reported.
    g = analyze(ReEnter(), (4, 8)).graph
    failure = L.first_failure(g, _group(g, "exp", "add"))
    assert failure is not None and failure.check == "fan-out"


def test_each_check_produces_a_rejection_in_detection():
    cases = {
        "fan-out": lambda x: (lambda e: (x * e, e))(torch.exp(x[0])),
        "aliasing": lambda x: torch.relu(x.add_(1.0)) * 3.0,
        "reduction": lambda x: F.softmax(torch.exp(x).sum(dim=-1), dim=-1),
        "lowering": lambda x: torch.round(x * 2.0, decimals=1),
    }
    for check, fn in cases.items():
        rejections = run(fn).rejections
        assert [r.check for r in rejections][:1] == [check], check
        assert rejections[0].lines is not None and rejections[0].lines.file == __file__


def test_lowering_check_dry_runs_the_code_generator():
    """`e + e.t()`: legal by every check of the graph alone, but the kernel would hold `e`
    in registers over two index maps. The dry run names `exp` and the view; every group
    legality accepts lowers."""
    from fusion_core.codegen import generate

    class M(torch.nn.Module):
        def forward(self, x):
            e = torch.exp(x * 2.0)
            return e + e.t()

    analysis = analyze(M(), (8, 8))
    (rejection,) = analysis.rejections
    assert rejection.check == "lowering" and set(rejection.culprits) == {"exp", "t"}
    assert "needed through two different index maps" in rejection.reason
    for cluster in analysis.clusters:
        generate(analysis, cluster)


class ScaleFromShape(nn.Module):
    """`math.log2(x.shape[-1])` is a Python float the trace computes at run time (SCALE_LINE)
    by a call ``ir/run_scalars.py`` does not model (`x.shape[-1] ** -0.5` fuses)."""

    def forward(self, x):
        scale = math.log2(x.shape[-1])  # SCALE_LINE
        return torch.softmax(x * scale, -1)


class ScaleFromInit(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.scale = dim ** -0.5

    def forward(self, x):
        return torch.softmax(x * self.scale, -1)


def test_a_run_time_python_value_is_named_at_its_line_with_the_fix():
    line = next(i for i, text in enumerate(inspect.getsource(
        inspect.getmodule(ScaleFromShape)).splitlines(), 1) if text.endswith("# SCALE_LINE"))
    g = analyze(ScaleFromShape(), (4, 8)).graph
    failure = L.check_shapes(g, _group(g, "mul", "softmax"))
    assert failure is not None and failure.check == "shapes"
    assert failure.reason.startswith(
        f"`mul` (line {line + 1}) reads a Python value computed at run time at line {line} "
        "(`scale = math.log2(x.shape[-1])  # SCALE_LINE`), not a tensor"), failure.reason
    assert "compute it once in `__init__`" in failure.reason
    # ...which holds: the same softmax with the scale computed in __init__ fuses
    assert [c.ops for c in analyze(ScaleFromInit(), (4, 8)).clusters] == [("mul", "softmax")]


class ScaleFromValues(nn.Module):
    """`.item()` of a tensor the input computes: `__init__` cannot compute it (SCALE_ITEM)."""

    def __init__(self, item: bool = True) -> None:
        super().__init__()
        self.item = item

    def forward(self, x):
        scale = x.abs().amax()
        scale = scale.item() if self.item else scale  # SCALE_ITEM
        return torch.softmax(x * scale, -1)


def test_a_python_value_read_from_a_tensor_is_not_sent_to_init():
    g = analyze(ScaleFromValues(), (4, 8)).graph
    failure = L.check_shapes(g, _group(g, "mul", "softmax"))
    assert failure is not None and failure.check == "shapes"
    assert "`__init__`" not in failure.reason, failure.reason
    assert "keep it a tensor (it depends on a tensor's values: drop `.item()`)" in failure.reason
    # ...which holds: kept a tensor, the scale fuses with the `mul` that reads it
    a = analyze(ScaleFromValues(item=False), (4, 8))
    assert [c.ops for c in a.clusters] == [("abs", "amax", "mul")], a.clusters
    assert not any("Python value" in r.reason for r in a.rejections)
