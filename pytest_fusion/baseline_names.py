"""Baseline file names: the YAML file each test's baseline is stored in.

Reads a test's node id; writes its file name (and the name earlier versions used, which is
still read). Touches no file.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 120


def baseline_name(nodeid: str) -> str:
    """A safe, readable file name for a test's node id.

    Only letters, digits, `_`, `.` and `-`: no glob character (`[`, `]`, `*`, `?`), so a
    parametrized test's file can be named unquoted in any shell (zsh stops at `[`). The hash
    of the exact node id keeps names unique however the readable part was shortened or had
    characters replaced.
    """
    readable = _readable(nodeid).replace("[", "_").replace("]", "")  # t[a-b] -> t_a-b
    safe = re.sub(r"[^A-Za-z0-9_.\-]", "_", readable)[:MAX_NAME]
    return f"{safe}-{_digest(nodeid)}.yaml"


def legacy_baseline_name(nodeid: str) -> str:
    """The name earlier versions gave the file (brackets kept); still read, moved on rewrite."""
    safe = re.sub(r"[^A-Za-z0-9_.\-\[\]]", "_", _readable(nodeid))[:MAX_NAME]
    return f"{safe}-{_digest(nodeid)}.yaml"


def _readable(nodeid: str) -> str:
    return nodeid.replace(".py::", "__").replace("::", "__").replace("/", "_")


def _digest(nodeid: str) -> str:
    return hashlib.sha1(nodeid.encode()).hexdigest()[:8]
