"""Shared by the command line's input tests: tiny model files, a folder snapshot (bytes and
mode of every entry) and the check that a refusal is one line and touches nothing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

SHAPE = ("--input-shape", "4,8")

TINY = """\
import torch.nn as nn


class Tiny(nn.Module):
    def forward(self, x):
        y = x * 2.0
        y = y.relu()
        return y + 1.0
"""

DATA_DEPENDENT = """\
import torch.nn as nn


class M(nn.Module):
    def forward(self, x):
        if (x * 2.0).sum() > 0:
            return x
        return -x
"""

DEAD_CODE = """\
import torch.nn as nn


class M(nn.Module):
    def forward(self, x):
        unused = (x * 2.0).relu() + 1.0
        return x.tanh()
"""

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every entry under `folder`: content (a link's target for a symlink) and mode."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        st = p.lstat()
        if p.is_symlink():
            data = os.readlink(p).encode()
        elif p.is_file():
            data = p.read_bytes()
        else:
            data = b"<dir>"
        out[str(p.relative_to(folder))] = (data, stat.S_IMODE(st.st_mode))
    return out


def assert_one_line(result, *needles: str) -> str:
    """Exit 2 and one stderr line naming the problem (every needle), no traceback."""
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def assert_refused(result, before: dict, folder: Path, *needles: str) -> str:
    """`assert_one_line`, and no file in `folder` touched."""
    line = assert_one_line(result, *needles)
    assert snapshot(folder) == before
    return line


# A model class whose constructor needs an argument (the CLI and plugin bad-input tests).
NEEDS_ARGS = """\
import torch.nn as nn


class NeedsArgs(nn.Module):
    def __init__(self, dim, scale=2.0):
        super().__init__()
        self.dim, self.scale = dim, scale

    def forward(self, x):
        y = x * self.scale
        y = y.relu()
        return y + 1.0
"""
