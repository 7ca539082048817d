"""More defects that random and hand-written models found in `--apply`
(tools/apply_fuzz.py; the first ones are in test_apply_fuzz_found.py), each reduced to a
model. Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import torch
from apply_checks import DEVICE, apply_net, original_and_rewritten, refused_untouched

# `del a` after the fused lines needs `a` bound.
DELETED_AFTER = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        a = torch.relu(h) * 2.0
        c = a + 1.0
        del a
        return self.fc(c)
"""


def test_a_name_deleted_after_the_range_keeps_its_assignment(tmp_path: Path):
    # The edit was `c = cluster0(h)` with `a = ...` gone: `del a` raised UnboundLocalError,
    # and --apply rolled the file back as "failed its check against the original".
    output = refused_untouched(tmp_path / "deleted.py", DELETED_AFTER, "4,8")
    assert "failed its check" not in output
    assert "`a`, assigned inside the range, is read again at line 14" in output


# `a += 1.0` in a branch the trace did not take: it reads `a` first.
AUGMENTED_IN_A_BRANCH = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, flag: bool = True):
        super().__init__()
        self.flag = flag
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        a = torch.relu(h) * 2.0
        c = a + 1.0
        if not self.flag:
            a += 1.0
            c = c * 2.0
        return self.fc(c)
"""


def test_a_name_augmented_after_the_range_keeps_its_assignment(tmp_path: Path):
    # The edit was `c = cluster0(h)` with `a = ...` gone: right at flag=True, an
    # UnboundLocalError for Net(flag=False). The check ran at flag=True, so it was written.
    output = refused_untouched(tmp_path / "augmented.py", AUGMENTED_IN_A_BRANCH, "4,8")
    assert "`a`, assigned inside the range, is read again at line 16" in output


# A cluster's result is the values of a max, read inside the line (fuzz seed 4227).
MAX_VALUES_INSIDE = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(32)

    def forward(self, x):
        b = self.bn(x) - torch.max(self.bn(x), -1, keepdim=True)[0]
        y = (b - b.max(-1, keepdim=True).values).add(b, alpha=0.5)
        b.sigmoid_()
        t = y.reshape(y.shape[0], 4, -1)
        t = t.softmax(-1) * 3.0
        return t.flatten(1) * y
"""


def test_the_values_of_a_max_are_replaced_with_their_attribute(tmp_path: Path):
    # The edit replaced the call `b.max(-1, keepdim=True)` alone, keeping `.values`:
    # `fused.values` read a tensor's method, a TypeError --apply rolled back.
    path = tmp_path / "max_values.py"
    path.write_text(MAX_VALUES_INSIDE)
    result = apply_net(path, "4,32")
    assert result.exit_code == 0, result.output
    assert "failed its check" not in result.output
    forward = path.read_text().split("def forward")[1]
    assert ("        if not self.bn.training:\n"
            "            b, fused = cluster0(x, self.bn.running_mean, self.bn.running_var, "
            "self.bn.weight, self.bn.bias)\n"
            "            y = (b - fused).add(b, alpha=0.5)\n"
            "        else:\n"
            "            b = self.bn(x) - torch.max(self.bn(x), -1, keepdim=True)[0]\n"
            "            y = (b - b.max(-1, keepdim=True).values).add(b, alpha=0.5)\n"
            "        b.sigmoid_()\n") in forward, forward
    assert forward.count(".values") == 1  # only in the lines as written, under `else:`
    assert "Applied 1 edit" in result.output
    before, after = original_and_rewritten(tmp_path, path, MAX_VALUES_INSIDE)
    x = torch.randn(3, 32, device=DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(after.to(DEVICE)(x), before.to(DEVICE)(x))


# A helper taking a number; the trace saw only `self.mix(x, 2.0)` (flag=True).
NUMBER_PARAMETER = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, flag: bool = True):
        super().__init__()
        self.flag = flag

    def mix(self, t, s):
        return torch.sigmoid(t * s) + 1.0

    def forward(self, x):
        y = self.mix(x, 2.0)
        if not self.flag:
            y = self.mix(y, 3.0)
        return y
"""


def test_a_helpers_number_parameter_is_not_built_into_the_kernel(tmp_path: Path):
    # The edit was `return cluster0(t)` holding `s = 2.0`: Net(flag=False)'s second call,
    # passing 3.0, silently computed with 2.0.
    path = tmp_path / "number.py"
    output = refused_untouched(path, NUMBER_PARAMETER, "4,8")
    assert ("`s` is a parameter of `mix` (line 10): its callers may pass other values than "
            "the 2.0 built into the kernel; where all pass that value, write it into `mix` to "
            "fuse these lines") in output
    # An attribute set in `__init__` is one value for every call on the instance: written.
    attribute = NUMBER_PARAMETER.replace("self.flag = flag", "self.flag, self.s = flag, 2.0"
                                         ).replace("t * s", "t * self.s")
    path.write_text(attribute)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    assert "return cluster0(t)" in path.read_text()


# `k` is computed from the parameter above the fused line.
FROM_A_PARAMETER = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def mix(self, t, s):
        k = s * 2.0
        return torch.sigmoid(t * k) + 1.0

    def forward(self, x):
        return self.mix(x, 2.0)
"""


def test_a_number_computed_from_a_parameter_is_not_built_into_the_kernel(tmp_path: Path):
    output = refused_untouched(tmp_path / "from_parameter.py", FROM_A_PARAMETER, "4,8")
    assert ("`k` (line 7: `k = s * 2.0`) reads `s`, a parameter of `mix` (line 6): its "
            "callers may pass other values than the 4.0 built into the kernel") in output
