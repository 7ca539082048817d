"""Defects random models found in `--apply` (tools/apply_fuzz.py), each reduced to a model.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import torch
from apply_checks import DEVICE, apply_net, original_and_rewritten, refused_untouched

# The forward doubles its input in place, then a cluster runs after a Linear.
WRITES_ITS_INPUT = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        x.mul_(2.0)
        h = self.fc(x)
        h = torch.relu(h) + 1.0
        return h
"""


def test_a_forward_writing_into_its_input_is_verified_and_applied(tmp_path: Path):
    # The traced graph, the model and the rewritten model each ran on the same input
    # tensors, so each saw the last one's doubling: the graph "differed from the model" and
    # the edit, once verified, was rolled back.
    path = tmp_path / "writes.py"
    path.write_text(WRITES_ITS_INPUT)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    assert "capture problem" not in result.output
    assert "Applied 1 edit" in result.output and "h = cluster0(h)" in path.read_text()
    before, after = original_and_rewritten(tmp_path, path, WRITES_ITS_INPUT)
    x = torch.randn(3, 8, device=DEVICE)
    mine, theirs = x.clone(), x.clone()
    with torch.no_grad():
        torch.testing.assert_close(after.to(DEVICE)(mine), before.to(DEVICE)(theirs))
    torch.testing.assert_close(mine, theirs)  # the caller's tensor is written as before


# Comments between the fused statements and after one of their lines.
COMMENTED = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        # scale first
        h = (
            h  # the Linear's output
            * 2.0
        )

        h = F.relu(h)  # then clip
        return self.fc(h)
"""


def test_comments_inside_an_edited_range_are_kept_above_the_call(tmp_path: Path):
    path = tmp_path / "commented.py"
    path.write_text(COMMENTED)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output
    # The diff shown before writing says so too.
    assert "+        # then clip" in result.output
    body = path.read_text().split("def forward(self, x):\n")[1]
    assert body == ("        h = self.fc(x)\n"
                    "        # scale first\n"
                    "        # the Linear's output\n"
                    "        # then clip\n"
                    "        h = cluster0(h)\n"
                    "        return self.fc(h)\n")
    before, after = original_and_rewritten(tmp_path, path, COMMENTED)
    x = torch.randn(3, 8, device=DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(after.to(DEVICE)(x), before.to(DEVICE)(x))


# A helper's two parameters, one tensor in the traced call.
ONE_TENSOR_TWICE = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.mix(x, x)
        return self.fc(h)

    def mix(self, a, b):
        s = a + b
        return torch.relu(s) * 2.0
"""


def test_a_helper_called_with_one_tensor_twice_is_not_rewritten_to_ignore_one(
        tmp_path: Path):
    # The helper's lines became `return cluster0(a)`: right for `self.mix(x, x)`, wrong for
    # any caller passing two tensors.
    output = refused_untouched(tmp_path / "twice.py", ONE_TENSOR_TWICE, "4,8")
    assert ("`a` and `b` held one tensor in the traced call (both are parameters of mix "
            "(line 14)): the kernel reads it once, as `a`, so the edit would ignore `b` where "
            "they differ") in output


# `h` is `x` only where the branch runs, as it did when traced (skip=True).
ONE_TENSOR_IN_A_BRANCH = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, skip: bool = True):
        super().__init__()
        self.skip = skip
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        if self.skip:
            h = x
        y = x
        return torch.relu(x) * 2.0 + h * y
"""


def test_names_one_tensor_only_in_a_branch_are_not_merged(tmp_path: Path):
    # The edit was `return cluster0(x)`: right at skip=True, wrong for Net(skip=False).
    path = tmp_path / "branch.py"
    output = refused_untouched(path, ONE_TENSOR_IN_A_BRANCH, "4,8")
    assert ("`x` and `h` held one tensor in the traced call (`h` is assigned at line 14, "
            "which does not make it `x`)") in output
    # `y = x` in the edited lines' own block is `x` for sure: that edit is written.
    plain = ONE_TENSOR_IN_A_BRANCH.replace("h * y", "y")
    path.write_text(plain)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    assert "return cluster0(x)" in path.read_text()


# A fusable group whose result only `h.shape` reads.
SHAPE_ONLY = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        t = x.view(-1, 4, 8)
        t = t.softmax(-1) * 3.0
        h = t.flatten(1) * x
        n = h.shape[-1]
        return torch.relu(x) * n
"""


def test_a_group_read_only_for_its_shape_is_no_cluster(tmp_path: Path):
    # It was a cluster without results, whose kernel source did not parse
    # (`zip(out_shapes, (,))`): a traceback before any report.
    path = tmp_path / "shape_only.py"
    path.write_text(SHAPE_ONLY)
    result = apply_net(path, "4,32")
    assert result.exit_code == 0, result.output
    assert "dead code: only its shape is read" not in result.output  # without the flag
    assert "Applied 1 edit" in result.output
    assert "return cluster0(x, n)" in path.read_text()
    assert "t = t.softmax(-1) * 3.0" in path.read_text()


# FX cannot trace the `if`, so torch.export captures the model: the size `n` the helper
# gets from `x.shape[0]` becomes a number in its views.
EXPORTED_SHAPE = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        if x.dim() >= 2:
            x = self.fc(x)
        return self.mix(x, x.shape[0])

    def mix(self, x, n):
        t = x.view(n, 4, 8)
        t = t.softmax(-1) * 3.0
        return t.reshape(n, 32) * x
"""


def test_sizes_export_read_from_a_shape_keep_the_edit_out(tmp_path: Path):
    # The kernel pins the batch at 4 (`view` gives the numbers export recorded), so the
    # rewritten model refused every other batch the original runs at.
    output = refused_untouched(tmp_path / "exported.py", EXPORTED_SHAPE, "4,32")
    assert ("cluster 0: not applied, its result's shape does not follow from its inputs' "
            "shapes: `view` (line 16) gives 4 in dim 0 at any input size (its sizes were "
            "captured as the numbers (4, 4, 8)") in output


# torch.export (FX cannot trace the `if`) records `1.0 / x.shape[0]` as 0.25.
SIZE_SCALE = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        if x.dim() >= 2:
            x = self.fc(x)
        s = 1.0 / x.shape[0]
        return torch.relu(x) * s + 1.0
"""


def test_a_number_computed_from_a_size_is_not_built_into_the_kernel(tmp_path: Path):
    # The edit held `s = 0.25` whatever the batch: a silent wrong result at any other.
    output = refused_untouched(tmp_path / "size_scale.py", SIZE_SCALE, "4,8")
    assert ("`s` (line 13: `s = 1.0 / x.shape[0]`) depends on a tensor's size, but the "
            "capture recorded it as 0.25: the kernel would hold that at every input size"
            ) in output


# `h` is returned beside the cluster's part of the same `return`.
READ_AROUND = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        a = torch.relu(x) * 2.0
        h = self.fc(x)
        return h, (a + h).sum(-1)
"""


def test_a_name_the_kept_code_reads_is_not_dropped_with_its_assignment(tmp_path: Path):
    # The edit was `return h, cluster0(x, self.fc(x))`, with `h = self.fc(x)` gone: a
    # NameError, which --apply rolled back as "failed its check against the original".
    output = refused_untouched(tmp_path / "around.py", READ_AROUND, "4,8")
    assert ("`h` in line 13 (`return h, (a + h).sum(-1)`), kept around the fused call, is "
            "assigned at line 12, which the edit would drop") in output
