"""The baselines folder: one YAML file per test, read, written and migrated here only.

Reads and writes files under the folder (``fusion_baselines`` by default); turns them into
``Snapshot``s and back through ``schema``. Reading migrates: a file of an older schema is
read as the current data model (``schema.from_data``), and a file under the name earlier
versions gave it is found while no file has the new name (``locate``); the next write puts
the current schema under the new name and removes the old file. Every write is atomic
(temp file and rename, ``fusion_core.write_atomic``) and keeps the file's mode; nothing
here deletes a file the user made except a stale baseline the user asked to remove.
A file that cannot be used raises ``BaselineError`` with one line naming it and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .baseline_names import baseline_name, legacy_baseline_name
from .records import BaselineWrite
from .snapshot import BaselineError

if TYPE_CHECKING:  # the schema module is loaded when a baseline is read or written
    from .snapshot import Snapshot


def dump_yaml(data: dict[str, Any]) -> str:
    """Stable, review-friendly YAML: our key order, short lists of scalars inline."""
    import yaml  # only when a fusion test runs: a run with none does not pay for it

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, allow_unicode=True,
                          width=100)


@dataclass(frozen=True)
class BaselineFile:
    """Where a test's baseline lives: `path`, or `legacy` (its old name) until rewritten."""

    path: Path
    legacy: Path | None = None

    @property
    def current(self) -> Path:
        """The file to read now."""
        return self.legacy or self.path


class BaselineStorage:
    """The YAML baselines of one folder; paths are shown relative to `rootdir`."""

    def __init__(self, folder: Path, rootdir: Path) -> None:
        self.folder, self.rootdir = folder, rootdir

    def shown(self, path: Path) -> str:
        try:
            return path.relative_to(self.rootdir).as_posix()
        except ValueError:
            return str(path)

    # ------------------------------------------------------------ reading
    def locate(self, nodeid: str) -> BaselineFile:
        """The test's file; an old-named file is read while no file has the new name."""
        path = self.folder / baseline_name(nodeid)
        old = self.folder / legacy_baseline_name(nodeid)
        legacy = old if old != path and old.is_file() and not path.exists() else None
        return BaselineFile(path, legacy)

    def read(self, path: Path) -> Snapshot | None:
        """The parsed baseline at the current schema; None when there is no file."""
        import yaml

        from .schema import from_data

        if not path.exists():
            return None
        shown = self.shown(path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise BaselineError(f"corrupt fusion baseline {shown}: not valid YAML ({first}); "
                                "fix it, or delete it and rerun with "
                                "--fusion-update-baselines=new") from e
        try:
            return from_data(data, shown)
        except BaselineError:
            raise
        except (AttributeError, TypeError, ValueError, KeyError) as e:  # a wrong-typed field
            raise BaselineError(f"corrupt fusion baseline {shown}: a field has the wrong type "
                                f"({type(e).__name__}: {e}); regenerate it with "
                                "--fusion-update-baselines=failing") from e

    def read_test(self, nodeid: str) -> Snapshot | None:
        return self.read(self.locate(nodeid).current)

    def discover(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        """Every readable baseline of the folder with its raw data (unreadable ones are
        skipped: this feeds the stale check, which must never judge a file it cannot read)."""
        if not self.folder.is_dir():
            return
        import yaml

        for path in sorted(self.folder.glob("*.yaml")):
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (yaml.YAMLError, OSError, UnicodeDecodeError):
                continue
            if isinstance(data, dict):
                yield path, data

    def owns(self, data: dict[str, Any]) -> bool:
        """Whether a baseline belongs to this project (a folder outside the rootdir may be
        shared: only baselines that name this project in their provenance are ours)."""
        if self.folder.resolve().is_relative_to(self.rootdir.resolve()):
            return True
        prov = data.get("provenance")
        return isinstance(prov, dict) and prov.get("project") == self.rootdir.name

    # ------------------------------------------------------------ writing
    def text(self, snap: Snapshot) -> str:
        """The YAML a baseline of `snap` holds (current schema)."""
        from .schema import to_data

        return dump_yaml(to_data(snap))

    def queue(self, nodeid: str, action: str, snap: Snapshot | None, where: BaselineFile,
              changes: Iterable[str] = ()) -> BaselineWrite:
        """The write that puts `snap` (None: the legacy file as it is) at the test's path."""
        return BaselineWrite(
            path=str(where.path), shown=self.shown(where.path), test=nodeid, action=action,
            changes=tuple(changes), text=None if snap is None else self.text(snap),
            move_from=None if where.legacy is None else str(where.legacy))

    def write(self, w: BaselineWrite) -> None:
        """Apply one write: atomic, keeping the replaced file's mode; an old-named file is
        removed only once the new one is in place. OSError when it cannot."""
        import fusion_core  # fileio only: loads no torch

        path = Path(w.path)
        old = Path(w.move_from) if w.move_from else None
        path.parent.mkdir(parents=True, exist_ok=True)
        if w.text is not None:
            mode = None
            if old is not None and not path.exists():  # the renamed file keeps its mode
                mode = os.stat(old).st_mode & 0o7777
            fusion_core.write_atomic(path, w.text, mode=mode)
        elif old is not None:
            os.replace(old, path)  # a rename keeps the user's bytes and mode
        if old is not None:
            old.unlink(missing_ok=True)

    def apply(self, writes: Iterable[BaselineWrite]) -> tuple[list[BaselineWrite], list[str]]:
        """Apply every write (controller only): (what was written, one error line each)."""
        done, errors = [], []
        for w in sorted(writes, key=lambda w: w.path):
            try:
                self.write(w)
            except OSError as e:
                errors.append(f"could not write fusion baseline {w.shown} for {w.test}: "
                              f"{e.strerror or e}")
                continue
            done.append(w)
        return done, errors

    def remove_stray_temp_files(self) -> list[Path]:
        """Temp files of writers killed mid-write (never a live writer's)."""
        import fusion_core

        return fusion_core.remove_stray_temp_files(self.folder) if self.folder.is_dir() else []
