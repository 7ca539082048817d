"""Code that picks a value by a module's `training` flag (sourcemap/eval_settled.py): timm's
copy of `BatchNorm2d.forward` passes `self.running_mean if not self.training or ... else
None` and a `bn_training` bound under `if self.training:` / `else:`. The edit runs only in
eval mode (its guard tests those flags), where each picks one value; both used to refuse the
edit. Kernels run under the Triton interpreter (natively with CUDA)."""

from __future__ import annotations

import ast

import pytest
import torch
from apply_checks import (
    DEVICE,
    applied_file,
    apply_net,
    original_and_rewritten,
    refused_untouched,
    same_in_train_mode,
    same_outputs,
)

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.eval_settled import chosen_store, under_eval

# timm's BatchNormAct2d, cut down: the statistics' update factor and the normalization mode
# are computed by branches on `self.training`, the statistics passed under a condition.
BN_ACT = """\
import torch
import torch.nn.functional as F
from torch import nn


class BatchNormAct(nn.BatchNorm2d):
    def __init__(self, channels):
        super().__init__(channels)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        if self.momentum is None:
            exponential_average_factor = 0.0
        else:
            exponential_average_factor = self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            exponential_average_factor = self.momentum
        if self.training:
            bn_training = True
        else:
            bn_training = (self.running_mean is None) and (self.running_var is None)
        x = F.batch_norm(
            x,
            self.running_mean if not self.training or self.track_running_stats else None,
            self.running_var if not self.training or self.track_running_stats else None,
            self.weight,
            self.bias,
            bn_training,
            exponential_average_factor,
            self.eps,
        )
        x = self.act(x)
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = BatchNormAct(8)

    def forward(self, x):
        return self.bn(self.conv(x))
"""


def test_a_batchnorm_copied_from_timm_applies_under_the_receivers_flag(tmp_path):
    path = applied_file(tmp_path, BN_ACT)
    text = path.read_text()
    stats = ", ".join(f"self.{p}.reshape(-1, 1, 1)"
                      for p in ("running_mean", "running_var", "weight", "bias"))
    assert (f"        if not self.training:\n            x = cluster0(x, {stats})\n"
            "        else:\n            x = F.batch_norm(\n") in text, text
    same_outputs(tmp_path, path, BN_ACT)


def test_the_copied_batchnorm_back_in_train_mode_computes_and_updates_as_before(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(BN_ACT)
    assert "Applied 1 edit to" in apply_net(path).output
    before, after = original_and_rewritten(tmp_path, path, BN_ACT)
    before, after = before.to(DEVICE).train(), after.to(DEVICE).train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE) * 2 + 1
    with torch.no_grad():
        torch.testing.assert_close(after(x), before(x))
    torch.testing.assert_close(after.bn.running_mean, before.bn.running_mean)
    torch.testing.assert_close(after.bn.num_batches_tracked, before.bn.num_batches_tracked)


def test_a_statistic_chosen_by_another_setting_is_still_refused(tmp_path):
    source = BN_ACT.replace("if not self.training or self.track_running_stats else None",
                            "if self.track_running_stats else None")
    out = refused_untouched(tmp_path / "net.py", source, "2,3,8,8")
    assert "chooses a kernel input by a condition" in out, out
    assert "that eval mode does not settle" in out, out


def test_a_name_bound_under_a_condition_on_another_setting_is_still_refused(tmp_path):
    source = BN_ACT.replace("        if self.training:\n            bn_training = True",
                            "        if self.momentum is None:\n            bn_training = True")
    out = refused_untouched(tmp_path / "net.py", source, "2,3,8,8")
    assert "`bn_training` is bound at lines" in out, out


@pytest.mark.parametrize(("test", "want"), [
    ("self.training", (False, {"self.training"})),
    ("not self.training or self.track_running_stats", (True, {"self.training"})),
    ("self.training and self.track_running_stats", (False, {"self.training"})),
    ("not self.bn.training and not self.drop.training",
     (True, {"self.bn.training", "self.drop.training"})),
    ("not self.training and self.track_running_stats", None),  # decided by the setting too
    # the guard would read `self.bn.training` where `self.bn` may be None
    ("self.bn is not None and self.bn.training", None),
    ("training", None),  # a local name: not a module's flag
    ("other.training", None),  # not reached from the receiver
])
def test_eval_mode_settles_only_conditions_its_flags_decide(test, want):
    got = under_eval(ast.parse(test, mode="eval").body, "self")
    assert (got if got is None else (got[0], set(got[1]))) == want


def test_a_name_bound_once_in_each_branch_is_bound_by_the_eval_branch():
    func = ast.parse("def f(self):\n"
                     "    if self.training:\n        a = 1\n"
                     "    elif self.frozen:\n        a = 2\n"
                     "    else:\n        a = 3\n").body[0]
    stores = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == "a"]
    assert chosen_store(func, stores, "self") is None  # `elif self.frozen` is not settled
    func = ast.parse("def f(self):\n"
                     "    if not self.training:\n        a = 1\n"
                     "    else:\n        a = 3\n").body[0]
    stores = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == "a"]
    top, st, flags = chosen_store(func, stores, "self")
    assert (st.lineno, set(flags)) == (3, {"self.training"})


def _applied_same_in_both_modes(tmp_path, source: str, guard: str) -> None:
    path = applied_file(tmp_path, source)
    assert guard in path.read_text(), path.read_text()
    same_outputs(tmp_path, path, source)
    same_in_train_mode(tmp_path, path, source)


PICKED = """\
import torch
from torch import nn


class Helper(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.full((8, 1, 1), 2.0))
        self.b = nn.Parameter(torch.full((8, 1, 1), -3.0))
        self.s, self.t = 2.0, -3.0

    def scale(self, x):
        return torch.relu(x * (self.a if not self.training else self.b) + 1.0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.helper = Helper()

    def forward(self, x):
        return self.helper.scale(self.conv(x))
"""


def test_a_method_other_than_forward_keeps_the_flag_its_argument_assumed(tmp_path):
    """`self.helper.scale(...)`: no module call stands for the method, and the flag the
    argument was read with was dropped (train mode computed with `self.a`, off by 6.5)."""
    _applied_same_in_both_modes(tmp_path, PICKED, "        if not self.training:\n")


def test_a_number_picked_by_the_flag_is_held_only_under_the_guard(tmp_path):
    """`self.s if not self.training else self.t`: the kernel held 2.0 unguarded."""
    source = PICKED.replace("(self.a if not self.training else self.b)",
                            "(self.s if not self.training else self.t)")
    _applied_same_in_both_modes(tmp_path, source, "        if not self.training:\n")


TWO_KERNELS = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv2 = nn.Conv2d(8, 8, 1, bias=False)
        self.a = nn.Parameter(torch.full((8, 1, 1), 2.0))
        self.b = nn.Parameter(torch.full((8, 1, 1), -3.0))

    def forward(self, x):
        return torch.sigmoid(self.conv2(torch.relu(x * 3.0 + 1.0))
                             * (self.a if not self.training else self.b) + 1.0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.blk = Block()

    def forward(self, x):
        return self.blk(self.conv(x))
"""


def test_every_kernel_of_one_statement_shares_the_guard(tmp_path):
    """Two kernels in one statement, the flag read by the second's argument: the edit was
    written from the first's mapping, which had no guard (train mode off by 1.0)."""
    path = tmp_path / "net.py"
    path.write_text(TWO_KERNELS)
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))])
    exact = [m for m in map_clusters(analysis) if m.exact]
    assert len(exact) == 2, [m.reason for m in map_clusters(analysis)]
    assert all("if not self.training:" in m.replacement for m in exact)
    _applied_same_in_both_modes(tmp_path, TWO_KERNELS, "        if not self.training:\n")


def test_a_plain_function_whose_self_is_an_argument_is_not_settled(tmp_path):
    source = PICKED.replace("    def scale(self, x):", "    @staticmethod\n    def scale(self, x):"
                            ).replace("self.helper.scale(self.conv(x))",
                                      "self.helper.scale(self.helper, self.conv(x))")
    out = refused_untouched(tmp_path / "net.py", source, "2,3,8,8")
    assert "that eval mode does not settle" in out, out
