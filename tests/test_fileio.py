"""write_atomic: modes of new and rewritten files, no temp file left, stray temp cleanup."""

import os
import stat
import subprocess
import sys

import pytest

from fusion_core.fileio import (
    TEMP_SUFFIX,
    default_mode,
    remove_stray_temp_files,
    stray_temp_files,
    write_atomic,
)


def mode_of(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_gets_the_mode_open_would_give(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.yaml", "x: 1\n")
        with open(tmp_path / "b.yaml", "w") as f:
            f.write("x: 1\n")
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "a.yaml") == mode_of(tmp_path / "b.yaml") == 0o644


def test_a_rewritten_file_keeps_its_own_mode(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("old\n")
    path.chmod(0o640)
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n"
    assert mode_of(path) == 0o640


def test_a_forced_mode_wins(tmp_path):
    write_atomic(tmp_path / "m.py.bak", "x\n", mode=0o444)
    assert mode_of(tmp_path / "m.py.bak") == 0o444


def test_line_endings_are_written_as_given(tmp_path):
    write_atomic(tmp_path / "crlf.py", "a = 1\r\nb = 2\r\n")
    assert (tmp_path / "crlf.py").read_bytes() == b"a = 1\r\nb = 2\r\n"


def test_no_temp_file_is_left_and_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "keep.yaml"
    path.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate cannot be written as UTF-8
        write_atomic(path, "new \udcff\n")
    assert path.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [path]


def test_temp_files_of_dead_writers_are_found_and_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stray = tmp_path / f".x.yaml.{dead}.abc123{TEMP_SUFFIX}"
    stray.write_text("half")
    live = tmp_path / f".y.yaml.{os.getpid()}.def456{TEMP_SUFFIX}"
    live.write_text("in progress")
    assert stray_temp_files(tmp_path) == [stray]
    assert remove_stray_temp_files(tmp_path) == [stray]
    assert not stray.exists() and live.exists()


def test_new_file_mode_matches_umask_default(tmp_path):
    write_atomic(tmp_path / "r.md", "# r\n")
    assert mode_of(tmp_path / "r.md") == default_mode()
