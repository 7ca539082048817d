"""`--apply` on one line that applies the same layer twice, one pass inside the other.

Each pass forms its own cluster with the same ops. Matching by the outermost operation
alone once took the whole line for the inner pass's cluster (`self.fc(<inner call>)` read as
the inner layer's result), or the inner call for the outer pass's (`x` read as the inner
pass's result): the edit called one kernel and the CLI said both clusters were applied
(sourcemap/evaluated.py). Each pass now gets its own call, the inner one inside the outer.
Loops and a block called on its own result still share one call (served by one kernel).
"""

from __future__ import annotations

import pytest
from apply_checks import apply_net, conv_apart, same_outputs

NESTED_LINEAR = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.sigmoid(self.fc(torch.sigmoid(self.fc(x) * 2.0)) * 2.0)
"""

NESTED_CONV = """\
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        return F.relu(self.conv1(F.relu(self.conv1(x))))
"""

LOOP = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        for _ in range(2):
            x = torch.sigmoid(self.fc(x) * 2.0)
        return x
"""


def _forward(text: str) -> str:
    return text.rsplit("def forward(self, x):\n", 1)[1]


def test_a_layer_nested_in_itself_calls_both_kernels(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(NESTED_LINEAR)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert _forward(path.read_text()) == (
        "        return cluster1(self.fc(cluster0(self.fc(x))))\n"), path.read_text()
    same_outputs(tmp_path, path, NESTED_LINEAR, shape=(4, 8))


@pytest.mark.parametrize("apply_target", ["cuda"], indirect=True)
def test_a_split_bias_conv_nested_in_itself_calls_both_kernels(tmp_path, apply_target):
    # For a GPU target both passes are `bias add → relu`, one kernel's twin: the outer
    # pass's cluster matched the inner call with `x` read as the inner pass's result.
    path = tmp_path / "net.py"
    path.write_text(NESTED_CONV)
    result = apply_net(path, "1,3,4,4")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    inner = f"cluster0({conv_apart('self.conv1', functional='F')})"
    outer = f"cluster1({conv_apart('self.conv1', arg=inner, functional='F')})"
    assert _forward(path.read_text()) == f"        return {outer}\n", path.read_text()
    same_outputs(tmp_path, path, NESTED_CONV, shape=(1, 3, 4, 4))


def test_a_loop_over_one_line_still_shares_its_call(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(LOOP)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert "            x = cluster0(self.fc(x))\n" in path.read_text(), path.read_text()
    same_outputs(tmp_path, path, LOOP, shape=(4, 8))
