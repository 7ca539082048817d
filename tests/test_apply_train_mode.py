"""`--apply` on lines holding BatchNorm or dropout (sourcemap/train_mode.py): the kernel
computes them as eval mode does, so the edit runs it only while the deciding modules are in
eval mode and keeps the lines as written under `else:`. Before, a model put back in train mode
under `torch.no_grad()` silently got eval-mode values and its BatchNorm statistics stopped
moving. Kernels run under the Triton interpreter (natively with CUDA)."""

from __future__ import annotations

import torch
from apply_checks import (
    DEVICE,
    applied_file,
    bn_args,
    original_and_rewritten,
    same_in_train_mode,
    same_outputs,
    seeded_outputs,
)
from click.testing import CliRunner
from test_apply_from_end import RESIDUAL

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters

CONV_BN_DROP = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        y = self.conv(x)
        y = torch.relu(self.bn(y))
        return self.drop(y) * 2
"""


def test_an_edit_of_batchnorm_and_dropout_runs_the_kernel_in_eval_mode_only(tmp_path):
    path = applied_file(tmp_path, CONV_BN_DROP)
    assert ("        if not self.bn.training and not self.drop.training:\n"
            f"            return cluster0(y, {bn_args('self.bn')})\n"
            "        else:\n"
            "            y = torch.relu(self.bn(y))\n"
            "            return self.drop(y) * 2\n") in path.read_text(), path.read_text()
    same_outputs(tmp_path, path, CONV_BN_DROP)


def test_a_model_back_in_train_mode_computes_and_updates_as_before(tmp_path):
    """Under torch.no_grad() (BatchNorm statistics refreshed): the same outputs with the same
    dropout draws, the same running statistics after; with gradients, a backward pass."""
    path = applied_file(tmp_path, CONV_BN_DROP)
    before, after = original_and_rewritten(tmp_path, path, CONV_BN_DROP)
    before, after = before.to(DEVICE).train(), after.to(DEVICE).train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE) * 3 + 1
    want, got = seeded_outputs(before, after, x, 0)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(after.bn.running_mean, before.bn.running_mean)
    torch.testing.assert_close(after.bn.running_var, before.bn.running_var)
    after(x).sum().backward()  # the lines as written: autograd as before
    assert after.conv.weight.grad is not None


def test_dropout_switched_on_in_an_eval_model_runs_the_lines_as_written(tmp_path):
    """Monte Carlo dropout: the model in eval mode, its dropout layers in train mode. The
    edit reads the dropout's own flag, not only the model's."""
    path = applied_file(tmp_path, CONV_BN_DROP)
    before, after = original_and_rewritten(tmp_path, path, CONV_BN_DROP)
    before, after = before.to(DEVICE), after.to(DEVICE)
    before.drop.train()
    after.drop.train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    want, got = seeded_outputs(before, after, x, 1)
    torch.testing.assert_close(got, want)
    assert (want == 0).any()  # dropout did draw: the comparison is not the eval path's


FUNCTIONAL = """\
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.p = 0.25

    def forward(self, x):
        y = self.conv(x)
        return F.dropout(torch.sigmoid(y), self.p, self.training) * 3.0
"""


def test_a_dropout_the_function_calls_itself_reads_the_receivers_flag(tmp_path):
    path = applied_file(tmp_path, FUNCTIONAL)
    assert ("        if not self.training:\n"
            "            return cluster0(y)\n"
            "        else:\n"
            "            return F.dropout(torch.sigmoid(y), self.p, self.training) * 3.0\n"
            ) in path.read_text(), path.read_text()
    before, after = original_and_rewritten(tmp_path, path, FUNCTIONAL)
    before, after = before.to(DEVICE).train(), after.to(DEVICE).train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    want, got = seeded_outputs(before, after, x, 2)
    torch.testing.assert_close(got, want)


PLAIN = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.conv(x)
        return torch.tanh(y) * 2.0 + 1.0
"""


def test_an_edit_without_batchnorm_or_dropout_is_written_as_before(tmp_path):
    path = applied_file(tmp_path, PLAIN)
    text = path.read_text()
    assert "        return cluster0(y)\n" in text and "training" not in text, text


NESTED_FUNCTION = """\
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)

    def forward(self, x):
        def act(h):
            return F.dropout(torch.relu(h) * 2, 0.5, self.training) + 1
        y = self.conv(x)
        return act(y)
"""


def test_a_function_nested_in_a_method_reads_the_methods_receiver(tmp_path):
    """`self` of the enclosing `forward` decides the nested helper's dropout (it had no
    guard: in train mode the rewritten model dropped nothing)."""
    path = applied_file(tmp_path, NESTED_FUNCTION)
    assert ("            if not self.training:\n"
            "                return cluster0(h)\n"
            "            else:\n"
            "                return F.dropout(torch.relu(h) * 2, 0.5, self.training) + 1\n"
            ) in path.read_text(), path.read_text()
    same_in_train_mode(tmp_path, path, NESTED_FUNCTION)


OPTIONAL_NORM = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(8) if norm else None
        self.out = nn.Conv2d(8, 8, 1, bias=False)

    def forward(self, x):
        shortcut = x
        x = self.conv(x)
        if self.norm is not None:
            x = self.norm(x)
        x = x + shortcut
        return self.out(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.b1 = Block(True)
        self.b2 = Block(False)

    def forward(self, x):
        return self.b2(self.b1(self.stem(x)))
"""


def test_a_layer_that_is_none_in_another_block_is_not_read_there(tmp_path):
    """`self.b2` runs the edited lines too (its `if` fails, its `else` runs them as written),
    with `self.norm` None: its flag cannot be read there, every module of the block's
    decides (the rewritten model failed its check with an AttributeError)."""
    path = applied_file(tmp_path, OPTIONAL_NORM)
    assert ("        if not any(m.training for m in self.modules()):\n"
            "            if self.norm is not None:\n") in path.read_text(), path.read_text()
    same_outputs(tmp_path, path, OPTIONAL_NORM)
    same_in_train_mode(tmp_path, path, OPTIONAL_NORM)


def test_a_batchnorm_switched_to_train_alone_where_no_spelling_reaches_it(tmp_path):
    """BatchNorm recalibration in an eval model (`for m in model.modules(): if isinstance(m,
    nn.BatchNorm2d): m.train()`): the block's own flag stays False, so the edit read as eval
    mode and the statistics stopped moving, silently."""
    path = applied_file(tmp_path, OPTIONAL_NORM)
    before, after = original_and_rewritten(tmp_path, path, OPTIONAL_NORM)
    before, after = before.to(DEVICE), after.to(DEVICE)
    for model in (before, after):
        model.b1.norm.train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE) * 2 + 1
    with torch.no_grad():
        torch.testing.assert_close(after(x), before(x))
    torch.testing.assert_close(after.b1.norm.running_mean, before.b1.norm.running_mean)


# MobileNetV3's blocks in miniature (tests/test_apply_from_end.py), each projection ending in
# a dropout: the BatchNorm and the dropout are `self.block[1][1]`, `[1][2]` in a block
# without an expand layer and `self.block[2][1]`, `[2][2]` in the others.
FROM_END = RESIDUAL.replace("nn.BatchNorm2d(cout))", "nn.BatchNorm2d(cout),\n"
                            "                         nn.Dropout(0.5))")
assert "nn.Dropout(0.5)" in FROM_END


def test_layers_at_other_places_in_other_blocks_are_read_counted_from_the_end(tmp_path):
    """Monte Carlo dropout in blocks built otherwise: each block reads its own dropout's
    flag (the edit read only the block's flag, which eval() had cleared)."""
    path = applied_file(tmp_path, FROM_END)
    assert ("        if not self.block[-1][-1].training and not self.block[-1][-2].training:\n"
            in path.read_text()), path.read_text()
    before, after = original_and_rewritten(tmp_path, path, FROM_END)
    before, after = before.to(DEVICE), after.to(DEVICE)
    for model in (before, after):
        for layer in model.modules():
            if isinstance(layer, torch.nn.Dropout):
                layer.train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    want, got = seeded_outputs(before, after, x, 4)
    torch.testing.assert_close(got, want)


def test_a_file_indented_with_tabs_keeps_its_tabs_inside_the_guard(tmp_path):
    source = CONV_BN_DROP.replace("    def ", "\tdef ").replace("        ", "\t    ")
    path = applied_file(tmp_path, source)
    assert ("\t    if not self.bn.training and not self.drop.training:\n"
            "\t        return cluster0(" in path.read_text()), path.read_text()
    same_in_train_mode(tmp_path, path, source)


INHERITED = """\
import torch
from torch import nn


class Base(nn.Module):
    def __init__(self, inner=None):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.inner = inner

    def forward(self, x):
        if self.inner is not None:
            x = self.inner(x)
        y = self.conv(x)
        return torch.relu(self.bn(y)) * 2


class Derived(Base):
    pass


class Net(Base):
    def __init__(self):
        super().__init__(Derived())
"""


def test_an_inherited_forward_under_export_finds_each_instance(tmp_path):
    """torch.export records the block's class by name (`Derived`), not its base whose
    forward runs: the instance is found by the module itself (the edit read
    `self.inner.bn` on `self.inner`, which has no `inner`, and was rolled back)."""
    path = tmp_path / "net.py"
    path.write_text(INHERITED)
    result = CliRunner().invoke(cli, ["--model", f"{path}:Net", "--input-shape", "2,8,8,8",
                                      "--capture", "export", "--no-timing", "--apply", "--yes"])
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit to" in result.output, result.output
    assert ("        if not self.bn.training:\n            return cluster0(" in
            path.read_text()), path.read_text()
    same_in_train_mode(tmp_path, path, INHERITED, shape=(2, 8, 8, 8))


MODULE_LIST = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, expand):
        super().__init__()
        layers = [nn.Conv2d(4, 4, 1, bias=False)] if expand else []
        layers += [nn.Conv2d(4, 4, 1, bias=False), nn.BatchNorm2d(4)]
        self.stages = nn.ModuleList([nn.Sequential(*layers)])

    def forward(self, x):
        y = self.stages[0](x)
        return torch.relu(y) * 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1, bias=False)
        self.b1 = Block(False)
        self.b2 = Block(True)

    def forward(self, x):
        return self.b2(self.b1(self.stem(x)))
"""


def test_a_layer_inside_a_module_list_is_counted_from_the_end_too(tmp_path):
    """The BatchNorm is `self.stages[0][1]` in one block and `[0][2]` in the other: the guard
    reads the second block's as `self.stages[-1][-1]` (it read only `self.stages[0][1]`, a
    conv there, and `self.training`: a BatchNorm switched to train mode alone was ignored).
    `self.stages[0][1]` names a layer in both blocks, so the first block's is read so."""
    path = applied_file(tmp_path, MODULE_LIST)
    assert ("        if not self.stages[-1][-1].training and not self.stages[0][1].training:\n"
            in path.read_text()), path.read_text()
    before, after = original_and_rewritten(tmp_path, path, MODULE_LIST)
    before, after = before.to(DEVICE), after.to(DEVICE)
    before.b2.stages[0][2].train()
    after.b2.stages[0][2].train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE) * 2 + 1
    with torch.no_grad():
        want, got = before(x), after(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(after.b2.stages[0][2].running_mean,
                               before.b2.stages[0][2].running_mean)


PASSED_FLAG = """\
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.conv(x)
        bn = self.bn
        y = F.batch_norm(y, bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.training)
        return torch.relu(y) * 2
"""


def test_a_training_flag_the_call_passes_is_held_as_false_and_guards_the_edit(tmp_path):
    """The capture's eval-mode batch_norm keeps no `training`: the source's sixth argument
    was paired with `momentum` by order (the note read `bn.training = 0.1`). Paired by name
    it is False, and the flag it reads decides the edit with the receiver's."""
    path = tmp_path / "net.py"
    path.write_text(PASSED_FLAG)
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))])
    (m,) = [m for m in map_clusters(analysis) if m.exact]
    assert "bn.training = False" in m.baked, m.baked
    assert m.replacement.startswith("        if not bn.training and not self.training:\n"), (
        m.replacement)


def test_statistics_passed_to_f_batch_norm_are_laid_out_as_the_kernel_reads_them(tmp_path):
    """`bn.running_mean` passed to F.batch_norm: the capture lays it out over the channels,
    and so does the edit (`.reshape(-1, 1, 1)`; the check after --apply failed and rolled the
    edit back). The guarded model then computes as the original in eval and in train mode,
    and with its BatchNorm alone switched to train."""
    path = applied_file(tmp_path, PASSED_FLAG)
    assert (f"            return cluster0(y, {bn_args('bn')})\n" in path.read_text()), (
        path.read_text())
    same_outputs(tmp_path, path, PASSED_FLAG)
    same_in_train_mode(tmp_path, path, PASSED_FLAG)
    before, after = original_and_rewritten(tmp_path, path, PASSED_FLAG)
    before, after = before.to(DEVICE), after.to(DEVICE)
    before.bn.train()
    after.bn.train()
    x = torch.randn(2, 3, 8, 8, device=DEVICE) * 2 + 1
    with torch.no_grad():
        torch.testing.assert_close(after(x), before(x))
