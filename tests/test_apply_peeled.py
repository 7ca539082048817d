"""A cluster that holds only a callee's last op, an eval-mode dropout (`return self.drop(h)` at
the end of an MLP), and the caller's ops on its result: the edit reads the call's result.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import pytest
import torch
from rich.console import Console
from test_apply import assert_same_outputs, backup_as_py
from test_apply_callsite import CAPTURES, line_of, plan

from fusion_core.sourcemap import EXACT
from fusion_core.sourcemap.apply import apply

# timm's Mlp, GPT-2's MLP and nanoGPT end in a dropout: in eval mode it is the identity, so
# the kernel's dropout → add → tanh reads the same value as `self.mlp(x)` returns.
MLP_DROPOUT = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.fc2(F.relu(self.fc1(x))))


class Block(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.mlp = Mlp(d)

    def forward(self, x):
        return torch.tanh(x + self.mlp(x))
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_callees_trailing_eval_dropout_reads_as_the_calls_result(tmp_path, capture):
    path = tmp_path / "mlp_dropout.py"
    path.write_text(MLP_DROPOUT)
    analysis, mappings, p = plan(path, capture, "Block")
    (c,) = [c for c in analysis.clusters if "tanh" in c.ops]
    (m,) = [m for m in mappings if m.cluster_index == c.index]
    assert m.quality == EXACT, m.reason
    line = line_of(path, "return torch.tanh(x + self.mlp(x))")
    assert (m.start, m.end) == (line, line)
    # The kernel's dropout input is the call's result: equal in eval mode, and in training
    # the callee still runs its own dropout (the kernel's is the identity either way).
    args = dict(zip(c.inputs, m.args, strict=True))
    assert sorted(args.values()) == ["self.mlp(x)", "x"]
    assert c.index in p.clusters
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    text = path.read_text()
    assert "return torch.tanh(" not in text
    assert "return self.drop(self.fc2(F.relu(self.fc1(x))))" in text  # the callee stays
    assert_same_outputs(backup_as_py(result.backup), path, "Block", torch.randn(3, 8))
