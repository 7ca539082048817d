"""`--apply` over an `if` the fused calls skip: a ResNet block's `if self.downsample is not
None:` between its last norm and the residual add, in the blocks built without one, and an
augmented add (`out += identity`) above the range's last line."""

from __future__ import annotations

import ast

from apply_checks import apply_net, bn_args, refused_untouched, same_in_train_mode, same_outputs

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


def _test(text: str) -> tuple[SourceFile, ast.expr]:
    src = SourceFile("f.py", f"if {text}:\n    pass\n".encode())
    node = src.tree.body[0]
    assert isinstance(node, ast.If)
    return src, node.test


def test_the_negated_condition_is_written_as_a_user_would():
    cases = {"self.downsample is not None": "self.downsample is None",
             "self.se is None": "self.se is not None",
             "self.mode == 'a'": "self.mode != 'a'",
             "not self.has_skip": "self.has_skip",
             "not (self.a or self.b)": "(self.a or self.b)",
             "self.has_skip": "not (self.has_skip)"}
    for text, want in cases.items():
        src, test = _test(text)
        assert negated(src, test) == want, text
