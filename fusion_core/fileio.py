"""Safe file writes shared by the CLI, `--apply` and the pytest plugin.

Reads nothing but the target's current mode; writes one file atomically. Imports
no torch, so the pytest plugin can use it without paying for the analyzer.

A write goes to a temp file in the target's folder, is flushed to disk, gets its
final mode, and is renamed over the target: a reader sees the old file or the new
one, never half of either. The mode is the target's own when it exists (a rewritten
file keeps its mode), else what a plain ``open(path, "w")`` would give (0o666 minus
the umask); ``tempfile.mkstemp`` alone would leave 0o600. Temp files carry a fixed
marker so a later run can remove the ones a killed process left behind.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".fusion-tmp"


def _umask() -> int:
    # os.umask can only be read by setting it; restore at once.
    mask = os.umask(0)
    os.umask(mask)
    return mask


def default_mode() -> int:
    """The mode a new file gets from ``open(path, "w")`` under the current umask."""
    return 0o666 & ~_umask()


def write_atomic(path: str | Path, text: str, *, mode: int | None = None) -> None:
    """Write `text` to `path` atomically, keeping the file's mode (or the umask default).

    `mode` forces a mode (used for a backup that must keep its original's mode).
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if mode is None:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            mode = default_mode()
    # The writer's pid in the name lets a later run tell a dead writer's leftovers
    # from a live writer's file in progress.
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.{os.getpid()}.",
                               suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:  # a full disk: name the file meant
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def _writer_alive(temp: Path) -> bool:
    parts = temp.name[: -len(TEMP_SUFFIX)].split(".")
    try:
        pid = int(parts[-2])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def stray_temp_files(folder: str | Path) -> list[Path]:
    """Temp files of ours whose writer is no longer running, in `folder` (not recursive)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir()
                  if p.name.startswith(".") and p.name.endswith(TEMP_SUFFIX) and p.is_file()
                  and not _writer_alive(p))


def remove_stray_temp_files(folder: str | Path) -> list[Path]:
    """Delete what `stray_temp_files` finds; returns what was removed."""
    removed = []
    for p in stray_temp_files(folder):
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass  # another process may be finishing its own write
    return removed
