"""`--apply` over an `if` the fused calls skip: a ResNet block's `if self.downsample is not
None:` between its last norm and the residual add, in the blocks built without one, and an
augmented add (`out += identity`) above the range's last line."""

from __future__ import annotations

import ast

import torch
from apply_checks import (
    DEVICE,
    apply_net,
    bn_args,
    original_and_rewritten,
    refused_untouched,
    same_in_train_mode,
    same_outputs,
)

from fusion_core.sourcemap.pysource import SourceFile
from fusion_core.sourcemap.skipped import negated

BLOCK = '''import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.b1 = Block(3, 8, STRIDE)
        self.b2 = Block(8, 8, 1)

    def forward(self, x):
        return self.b2(self.b1(x))
'''
WITH_DOWNSAMPLE = BLOCK.replace("STRIDE", "2")
WITHOUT = BLOCK.replace("Block(3, 8, STRIDE)", "Block(8, 8, 1)")


def test_the_residual_of_a_block_without_downsample_runs_the_kernel_where_it_is_none(tmp_path):
    """The first block's `downsample` runs (its norm joins the kernel of its own), the second
    skips it: the second's `bn2 → add → relu` edit keeps the `if` as its condition, and the
    first block, whose `identity` the downsample replaces, runs the lines as written."""
    path = tmp_path / "net.py"
    path.write_text(WITH_DOWNSAMPLE)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 2 edits to" in result.output, result.output
    text = path.read_text()
    assert ("        if self.downsample is None and not self.bn2.training:\n"
            f"            out = cluster3(out, {bn_args('self.bn2')}, identity)\n"
            "        else:\n"
            "            out = self.bn2(out)\n"
            "            if self.downsample is not None:\n"
            "                identity = self.downsample(x)\n"
            "            out += identity\n"
            "            out = self.relu(out)\n") in text, text
    same_outputs(tmp_path, path, WITH_DOWNSAMPLE, shape=(2, 3, 8, 8))
    same_in_train_mode(tmp_path, path, WITH_DOWNSAMPLE)


def test_an_if_no_instance_runs_stays_the_edits_condition(tmp_path):
    """With no block built with a downsample the `if` never runs, yet the edit is the lines'
    code for every block a user builds: its kernel runs only where the condition is False."""
    path = tmp_path / "net.py"
    path.write_text(WITHOUT)
    result = apply_net(path, "2,8,8,8")
    assert result.exit_code == 0, result.output
    text = path.read_text()
    assert "        if self.downsample is None and not self.bn2.training:\n" in text, text
    assert "            if self.downsample is not None:\n" in text, text  # under `else`
    same_outputs(tmp_path, path, WITHOUT, shape=(2, 8, 8, 8))


AUGMENTED_INPUT = '''import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1, bias=False)

    def forward(self, x):
        h = self.conv(x)
        x += h
        return torch.relu(x * 2.0)
'''


def test_an_augmented_add_into_the_callers_tensor_above_the_last_line_is_refused(tmp_path):
    """`x += h` writes into the caller's tensor: an edit rebinding `x` to the kernel's result
    would leave the caller's tensor as it was, so the lines stay as written, with a reason."""
    output = refused_untouched(tmp_path / "net.py", AUGMENTED_INPUT, "2,3,8,8")
    assert ("`x += h` (line 12) writes in place into `x`, a tensor from before these lines"
            in output), output


SETTING_OR_DEFAULT = '''import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.k = k

    def forward(self, x):
        out = self.conv(x)
        out = self.bn(out)
        if (self.k or 0) == 1:
            out = out * 3.0
        out = out + x
        out = torch.relu(out)
        return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.b1 = Block(None)

    def forward(self, x):
        return self.b1(x)
'''


def test_a_negated_comparison_keeps_its_operands_parentheses(tmp_path):
    """`(self.k or 0) == 1` negated is `(self.k or 0) != 1`; without the parentheses Python
    reads `self.k or (0 != 1 and ...)` and any set `k` ran the kernel (found by review)."""
    path = tmp_path / "net.py"
    path.write_text(SETTING_OR_DEFAULT)
    result = apply_net(path, "2,4,8,8")
    assert result.exit_code == 0, result.output
    assert "        if (self.k or 0) != 1 and not self.bn.training:\n" in path.read_text()
    before, after = original_and_rewritten(tmp_path, path, SETTING_OR_DEFAULT)
    x = torch.randn(2, 4, 8, 8)
    for k in (None, 1, 5):  # the setting changed after the rewrite: the condition decides
        before.b1.k = after.b1.k = k
        with torch.no_grad():
            torch.testing.assert_close(after.to(DEVICE)(x.to(DEVICE)), before.to(DEVICE)(
                x.to(DEVICE)), atol=1e-5, rtol=1e-4)


def test_an_if_the_traced_call_ran_by_an_or_value_stays_between_the_lines(tmp_path):
    """`(self.k or 0) == 2` with `k = 2` is True (the `or`'s value is 2, not a bool): the
    traced call ran the body, so the lines stay as written (found by review: read as
    `True == 2`, the `if` counted as skipped and the edit failed its check)."""
    source = SETTING_OR_DEFAULT.replace("Block(None)", "Block(2)").replace(
        "        self.k = k\n", "        self.k = k\n        self.skip = nn.Conv2d(4, 4, 1)\n")
    source = source.replace("        out = self.conv(x)\n",
                            "        identity = x\n        out = self.conv(x)\n")
    source = source.replace("if (self.k or 0) == 1:\n            out = out * 3.0",
                            "if (self.k or 0) == 2:\n            identity = self.skip(x)")
    source = source.replace("out = out + x", "out = out + identity")
    output = refused_untouched(tmp_path / "net.py", source, "2,4,8,8")
    assert ("(`if (self.k or 0) == 2:`) lies between the fused lines and may change "
            "`identity`") in output, output


def test_an_augmented_add_that_the_trace_promoted_is_refused(tmp_path):
    """`out += identity` keeps `out` float32; FX traced it as `out + identity`, float64, so
    a kernel computing the sum would return float64 (found by review)."""
    source = SETTING_OR_DEFAULT.replace(
        "        out = out + x\n", "        identity = x.double()\n        out += identity\n")
    output = refused_untouched(tmp_path / "net.py", source, "2,4,8,8")
    assert ("keeps `out` float32 (an in-place op does not change a tensor's dtype), where "
            "the trace computed float64") in output, output


def _test(text: str) -> tuple[SourceFile, ast.expr]:
    src = SourceFile("f.py", f"if {text}:\n    pass\n".encode())
    node = src.tree.body[0]
    assert isinstance(node, ast.If)
    return src, node.test


def test_the_negated_condition_is_written_as_a_user_would():
    cases = {"self.downsample is not None": "self.downsample is None",
             "self.se is None": "self.se is not None",
             "self.mode == 'a'": "self.mode != 'a'",
             "(self.k or 0) == 1": "(self.k or 0) != 1",
             "not self.has_skip": "self.has_skip",
             "not (self.a or self.b)": "(self.a or self.b)",
             "self.has_skip": "not (self.has_skip)"}
    for text, want in cases.items():
        src, test = _test(text)
        assert negated(src, test) == want, text
