"""More defects that random and hand-written models found in `--apply`
(tools/apply_fuzz.py; the first ones are in test_apply_fuzz_found.py), each reduced to a
model. Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from pathlib import Path

from apply_checks import apply_net

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
    path = tmp_path / "deleted.py"
    path.write_text(DELETED_AFTER)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    assert "failed its check" not in result.output
    assert "`a`, assigned inside the range, is read again at line 14" in result.output
    assert path.read_text() == DELETED_AFTER


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
    path = tmp_path / "augmented.py"
    path.write_text(AUGMENTED_IN_A_BRANCH)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    assert "`a`, assigned inside the range, is read again at line 16" in result.output
    assert path.read_text() == AUGMENTED_IN_A_BRANCH
