"""`--apply` on lines holding BatchNorm or dropout (sourcemap/train_mode.py): the kernel
computes them as eval mode does, so the edit runs it only while the deciding modules are in
eval mode and keeps the lines as written under `else:`. Before, a model put back in train mode
under `torch.no_grad()` silently got eval-mode values and its BatchNorm statistics stopped
moving. Kernels run under the Triton interpreter (natively with CUDA)."""

from __future__ import annotations

import torch
from apply_checks import DEVICE, apply_net, bn_args, original_and_rewritten, same_outputs

CONV_BN_DROP = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        y = self.conv(x)
        y = torch.relu(self.bn(y))
        return self.drop(y) * 2
"""


def _applied(tmp_path, source: str):
    path = tmp_path / "net.py"
    path.write_text(source)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit to" in result.output, result.output
    return path


def test_an_edit_of_batchnorm_and_dropout_runs_the_kernel_in_eval_mode_only(tmp_path):
    path = _applied(tmp_path, CONV_BN_DROP)
    assert ("        if not self.bn.training and not self.drop.training:\n"
            f"            return cluster0(y, {bn_args('self.bn')})\n"
            "        else:\n"
            "            y = torch.relu(self.bn(y))\n"
            "            return self.drop(y) * 2\n") in path.read_text(), path.read_text()
    same_outputs(tmp_path, path, CONV_BN_DROP)


def test_a_model_back_in_train_mode_computes_and_updates_as_before(tmp_path):
    """Under torch.no_grad() (BatchNorm statistics refreshed): the same outputs with the same
    dropout draws, the same running statistics after; with gradients, a backward pass."""
    path = _applied(tmp_path, CONV_BN_DROP)
    before, after = original_and_rewritten(tmp_path, path, CONV_BN_DROP)
    before, after = before.to(DEVICE).train(), after.to(DEVICE).train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE) * 3 + 1
    with torch.no_grad():
        torch.manual_seed(0)
        want = before(x)
        torch.manual_seed(0)
        got = after(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(after.bn.running_mean, before.bn.running_mean)
    torch.testing.assert_close(after.bn.running_var, before.bn.running_var)
    after(x).sum().backward()  # the lines as written: autograd as before
    assert after.conv.weight.grad is not None


def test_dropout_switched_on_in_an_eval_model_runs_the_lines_as_written(tmp_path):
    """Monte Carlo dropout: the model in eval mode, its dropout layers in train mode. The
    edit reads the dropout's own flag, not only the model's."""
    path = _applied(tmp_path, CONV_BN_DROP)
    before, after = original_and_rewritten(tmp_path, path, CONV_BN_DROP)
    before, after = before.to(DEVICE), after.to(DEVICE)
    before.drop.train()
    after.drop.train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    with torch.no_grad():
        torch.manual_seed(1)
        want = before(x)
        torch.manual_seed(1)
        got = after(x)
    torch.testing.assert_close(got, want)
    assert (want == 0).any()  # dropout did draw: the comparison is not the eval path's


FUNCTIONAL = """\
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.p = 0.25

    def forward(self, x):
        y = self.conv(x)
        return F.dropout(torch.sigmoid(y), self.p, self.training) * 3.0
"""


def test_a_dropout_the_function_calls_itself_reads_the_receivers_flag(tmp_path):
    path = _applied(tmp_path, FUNCTIONAL)
    assert ("        if not self.training:\n"
            "            return cluster0(y)\n"
            "        else:\n"
            "            return F.dropout(torch.sigmoid(y), self.p, self.training) * 3.0\n"
            ) in path.read_text(), path.read_text()
    before, after = original_and_rewritten(tmp_path, path, FUNCTIONAL)
    before, after = before.to(DEVICE).train(), after.to(DEVICE).train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    with torch.no_grad():
        torch.manual_seed(2)
        want = before(x)
        torch.manual_seed(2)
        got = after(x)
    torch.testing.assert_close(got, want)


PLAIN = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return torch.tanh(y) * 2.0 + 1.0
"""


def test_an_edit_without_batchnorm_or_dropout_is_written_as_before(tmp_path):
    path = _applied(tmp_path, PLAIN)
    text = path.read_text()
    assert "        return cluster0(y)\n" in text and "training" not in text, text
