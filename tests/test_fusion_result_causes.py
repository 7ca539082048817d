"""`assert_fused` names why the ops are not one cluster, first, in the user's spelling with
source lines: the layer between them, the check that rejected them together, the op a value
used outside the group left unfused, the reduction rule, or the order they do fuse in. The
clusters and rejections (`describe()`) follow as context."""

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from fusion_plugin_helpers import run

from fusion_core.pipeline import analyze
from pytest_fusion.result import FusionResult
from pytest_fusion.snapshot_build import from_analysis

pytestmark = pytest.mark.usefixtures("torch_warm")
# The models' lines: the project files of the pytester test below are other files.
SOURCE = Path(__file__).read_text().partition('\nMODEL = """')[0].splitlines()


def line(code: str) -> int:
    """The line of this file that holds `code` (the models' lines move with edits above)."""
    (found,) = [i for i, text in enumerate(SOURCE, 1) if text.strip() == code]
    return found


class LinearBetween(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        y = F.relu(x * 2.0)
        z = self.fc(y)
        return self.ln(z + 1.0)


class TwoSoftmaxes(nn.Module):
    def forward(self, x):
        a = torch.softmax(x * 2.0, dim=-1)
        b = torch.softmax(a + 1.0, dim=0)
        return b * 3.0


class UsedOutside(nn.Module):
    """`h` feeds `self.fc` and `sigmoid`: the add that reads both would re-enter the group."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.exp(x * 2.0)
        return self.fc(h) + torch.sigmoid(h)


class AlsoRead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        r = F.relu(x)
        y = r * 2.0 + 1.0
        return y + self.proj(r)


class InPlace(nn.Module):
    def forward(self, x):
        y = torch.tanh(x * 2.0)
        y.mul_(3.0)
        return torch.sigmoid(y + 1.0)


class Transposed(nn.Module):
    def forward(self, x):
        a = torch.softmax(x * 2.0, dim=-1) + 1.0
        b = torch.softmax(a.t() * 3.0, dim=-1)
        return b + 1.0


class Sandwiched(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x))) * 2.0 + 1.0


def failure(model: nn.Module, ops: list[str]) -> list[str]:
    """The lines of `assert_fused(ops)`'s message on `model`'s analysis (no kernels run)."""
    analysis = analyze(model, (4, 8))
    snap = from_analysis(analysis, "t.py::t", Path.cwd())
    result = FusionResult(analysis=analysis, snapshot=snap, measurement=None, hw_key=None)
    with pytest.raises(AssertionError) as info:
        result.assert_fused(ops)
    return str(info.value).splitlines()


def test_a_linear_between_two_clusters_is_named_with_its_line():
    lines = failure(LinearBetween(), ["mul", "relu", "add"])
    relu, fc, add = (line(c) for c in ("y = F.relu(x * 2.0)", "z = self.fc(y)",
                                       "return self.ln(z + 1.0)"))
    assert lines[:4] == [
        "`mul → relu → add` are not fused together.",
        f"`relu` (line {relu}) is in cluster 0 `mul → relu`, `add` (line {add}) in cluster 1 "
        "`add → layer_norm`",
        f"between them `self.fc` (line {fc}), a Linear, runs as a kernel of its own: "
        "fusion-advisor cannot fuse through it (it leaves this torch.nn layer to PyTorch's "
        "own kernel, which writes its result to memory)",
        "LinearBetween: 2 clusters"]  # the cause first, then every cluster


def test_a_rejected_candidate_holding_both_ops_is_quoted_with_its_check():
    lines = failure(TwoSoftmaxes(), ["softmax", "softmax"])
    first, second = line("a = torch.softmax(x * 2.0, dim=-1)"), line(
        "b = torch.softmax(a + 1.0, dim=0)")
    assert lines[1:3] == [
        f"`softmax` (line {first}) is in cluster 0 `mul → softmax → add`, `softmax` "
        f"(line {second}) in cluster 1 `softmax → mul`",
        f"fusion-advisor rejected `mul → softmax → add → softmax → mul` (lines {first}-"
        f"{second + 1}): reduction, `softmax` (line {second}) reduces dim 0 where `softmax` "
        f"(line {first}) reduces dim 1"]


def test_an_op_a_value_used_outside_left_unfused_says_the_check():
    add, h = line("return self.fc(h) + torch.sigmoid(h)"), line("h = torch.exp(x * 2.0)")
    assert failure(UsedOutside(), ["exp", "add"])[1] == (
        f"`add` (line {add}) is in no cluster: convexity, path `exp` (line {h}) → `self.fc` "
        f"(line {add}) → `add` (line {add}) leaves the group and re-enters")
    relu, proj = line("r = F.relu(x)"), line("return y + self.proj(r)")
    assert failure(AlsoRead(), ["relu", "mul"])[1] == (
        f"`relu` (line {relu}) is in no cluster: fan-out, `relu` (line {relu}) is also used by "
        f"`self.proj` (line {proj}) outside the group")


def test_an_in_place_write_between_clusters_is_named():
    tanh, mul_, add = (line(c) for c in ("y = torch.tanh(x * 2.0)", "y.mul_(3.0)",
                                         "return torch.sigmoid(y + 1.0)"))
    lines = failure(InPlace(), ["tanh", "add"])
    assert lines[1:3] == [
        f"`tanh` (line {tanh}) is in cluster 0 `mul → tanh`, `add` (line {add}) in cluster 1 "
        "`add → sigmoid`",
        f"between them `.mul_()` (line {mul_}) writes in place: fusion-advisor cannot fuse "
        "across an in-place op; write it out of place"]  # not the aliasing rejections again


def test_reductions_over_different_rows_cut_without_a_rejection_name_the_rule():
    first, second = line("a = torch.softmax(x * 2.0, dim=-1) + 1.0"), line(
        "b = torch.softmax(a.t() * 3.0, dim=-1)")
    assert failure(Transposed(), ["softmax", "softmax"])[1:3] == [
        f"`softmax` (line {first}) is in cluster 0 `mul → softmax`, `softmax` (line {second}) "
        "in cluster 1 `add → t → mul → softmax → add`",
        f"`softmax` (line {first}) and `softmax` (line {second}) reduce over different rows: "
        "fusion-advisor gives each reduction a kernel of its own (one region per reduction)"]


def test_an_op_alone_between_layers_is_in_no_cluster():
    at = line("return self.fc2(F.relu(self.fc1(x))) * 2.0 + 1.0")
    assert failure(Sandwiched(), ["relu", "mul"])[1] == (
        f"`relu` (line {at}) is in no cluster: the ops beside it (`self.fc1` (line {at}) and "
        f"`self.fc2` (line {at})) run as kernels of their own, and a cluster needs two ops")


def test_a_layer_named_as_an_op_says_what_the_layer_runs():
    # `fc` and `ln` are the model's attribute names, not ops: say what each layer runs.
    fc, ln = line("z = self.fc(y)"), line("return self.ln(z + 1.0)")
    assert failure(LinearBetween(), ["relu", "fc"])[1] == (
        f"`fc` is a layer, not an op: `self.fc` (line {fc}), a Linear, runs as a kernel of its "
        "own, so no cluster holds it")
    assert failure(LinearBetween(), ["add", "self.ln"])[1] == (
        f"`self.ln` is a layer, not an op: `self.ln` (line {ln}) runs `layer_norm`; name those")


def test_ops_fused_in_another_order_say_the_order_found():
    y = line("y = F.relu(x * 2.0)")
    assert failure(LinearBetween(), ["relu", "mul"])[1] == (
        f"`relu → mul` fuse in cluster 0 `mul → relu`, in another order: `mul` (line {y}) → "
        f"`relu` (line {y}); to assert that order: assert_fused([\"mul\", \"relu\"])")


def test_an_op_named_more_often_than_the_model_computes_it():
    y = line("y = F.relu(x * 2.0)")
    assert failure(LinearBetween(), ["relu", "relu"])[1] == (
        f"`relu` is named 2 times, but LinearBetween computes it once: `relu` (line {y})")


MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        y = F.relu(x * 2.0)
        return torch.sigmoid(self.fc(y) + 1.0)
"""

TEST = """\
import pytest
import model

@pytest.mark.fusion_check(model.Net, (4, 8))
def test_net(fusion_advisor):
    fusion_advisor.result.assert_fused(["relu", "add"])
"""


def test_a_failing_fusion_test_shows_the_cause_in_pytests_output(proj):
    proj.makepyfile(model=MODEL, test_net=TEST)
    r = run(proj, "--fusion-update-baselines=new")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([
        "E*AssertionError: `relu → add` are not fused together.",
        "E*`relu` (line 9) is in cluster 0 `mul → relu`, `add` (line 10) in cluster 1 "
        "`add → sigmoid`",
        "E*between them `self.fc` (line 10), a Linear, runs as a kernel of its own: "
        "fusion-advisor cannot fuse through it (it leaves this torch.nn layer to PyTorch's "
        "own kernel, which writes its result to memory)",
        "E*Net: 2 clusters"])
