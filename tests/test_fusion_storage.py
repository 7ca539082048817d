"""BaselineStorage: the one place baselines are read, written and migrated."""

import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pytest_fusion.baseline_names import baseline_name, legacy_baseline_name
from pytest_fusion.schema import SCHEMA_VERSION
from pytest_fusion.snapshot import (
    BaselineError,
    ClusterRec,
    ClusterTiming,
    Measured,
    RejectionRec,
    Snapshot,
)
from pytest_fusion.storage import BaselineFile, BaselineStorage

SCHEMA_1 = Path(__file__).resolve().parent / "data"
TEST = "tests/test_m.py::test_net[4-8]"  # brackets: the old file name kept them


def snapshot(test: str = TEST) -> Snapshot:
    cluster = ClusterRec(("mul", "relu", "add"), "model.py:10-12", "elementwise-chain",
                         ("mul", "relu", "add"), 384, 128, kernel="elementwise",
                         module="", function="forward", sites=("mul#0", "relu#0", "add#0"))
    rejection = RejectionRec("shape", ("mm", "add"), "model.py:14", ("mm", "add"), ("mm",),
                             "matmul is not elementwise", module="", function="forward")
    timing = ClusterTiming(cluster.ident, (40.0, 40.5, 39.9), (100.0, 101.0, 99.0), 1000.0,
                           "dram-bound")
    return Snapshot(test, "Net", ("4×8 float32",), (cluster,), (rejection,),
                    provenance={"torch": "2.13", "device": "cpu", "date": "2026-12-04"},
                    measured={"NVIDIA H200 sm_90": Measured((timing,), date="2026-12-04",
                                                           clock="device")},
                    frontend="fx")


def storage(tmp_path: Path) -> BaselineStorage:
    return BaselineStorage(tmp_path / "fusion_baselines", tmp_path)


def write(store: BaselineStorage, snap: Snapshot, action: str = "created") -> Path:
    where = store.locate(snap.test)
    store.write(store.queue(snap.test, action, snap, where))
    return where.path


def test_a_written_baseline_reads_back_equal(tmp_path):
    store, snap = storage(tmp_path), snapshot()
    path = write(store, snap)
    assert path == tmp_path / "fusion_baselines" / baseline_name(TEST)
    again = store.read_test(TEST)
    assert again == snap and again.provenance == snap.provenance
    assert yaml.safe_load(path.read_text())["schema_version"] == SCHEMA_VERSION
    assert store.shown(path) == f"fusion_baselines/{baseline_name(TEST)}"


def test_a_missing_baseline_reads_as_none(tmp_path):
    store = storage(tmp_path)
    assert store.read_test(TEST) is None
    assert store.locate(TEST) == BaselineFile(store.folder / baseline_name(TEST))


def test_an_old_schema_is_read_as_the_current_model_and_written_at_the_current_schema(tmp_path):
    (old_file,) = SCHEMA_1.glob("*microgpt*.yaml")
    test = yaml.safe_load(old_file.read_text())["test"]
    assert yaml.safe_load(old_file.read_text())["schema_version"] == 1
    store = storage(tmp_path)
    store.folder.mkdir()
    shutil.copy(old_file, store.folder / baseline_name(test))
    old = store.read_test(test)
    assert len(old.measured["NVIDIA H200 sm_90"].clusters) == 7  # the timings came along
    path = write(store, old, "updated")
    data = yaml.safe_load(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert store.read_test(test) == old


def test_an_old_named_file_is_read_then_moved_to_its_new_name_keeping_its_mode(tmp_path):
    store = storage(tmp_path)
    write(store, snapshot())
    new = store.folder / baseline_name(TEST)
    legacy = store.folder / legacy_baseline_name(TEST)
    assert legacy != new
    new.rename(legacy)
    legacy.chmod(0o640)
    where = store.locate(TEST)
    assert where == BaselineFile(new, legacy) and where.current == legacy
    assert store.read(where.current) == snapshot()
    w = store.queue(TEST, "updated", snapshot(), where)
    assert w.move_from == str(legacy) and w.shown == store.shown(new)
    store.write(w)
    assert new.is_file() and not legacy.exists()
    assert stat.S_IMODE(new.stat().st_mode) == 0o640


def test_a_rename_only_write_moves_the_users_bytes(tmp_path):
    store = storage(tmp_path)
    path = write(store, snapshot())
    legacy = store.folder / legacy_baseline_name(TEST)
    path.rename(legacy)
    text = legacy.read_text() + "# the user's comment\n"
    legacy.write_text(text)
    store.write(store.queue(TEST, "renamed", None, store.locate(TEST)))
    assert path.read_text() == text and not legacy.exists()


def test_a_rewrite_keeps_the_files_mode_and_leaves_no_temp_file(tmp_path):
    store = storage(tmp_path)
    path = write(store, snapshot())
    path.chmod(0o600)
    write(store, replace(snapshot(), model="Net2"), "updated")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.read_test(TEST).model == "Net2"
    assert sorted(p.name for p in store.folder.iterdir()) == [path.name]


@pytest.mark.parametrize("text, says", [
    ("test: [unclosed\n", "not valid YAML"),
    ("schema_version: 4\ntest: 3\nclusters: {}\n", "corrupt fusion baseline"),
])
def test_a_corrupt_file_is_one_line_naming_it_and_the_fix(tmp_path, text, says):
    store = storage(tmp_path)
    store.folder.mkdir()
    path = store.folder / baseline_name(TEST)
    path.write_text(text)
    with pytest.raises(BaselineError) as info:
        store.read_test(TEST)
    message = str(info.value)
    assert "\n" not in message and says in message
    assert f"fusion_baselines/{baseline_name(TEST)}" in message
    assert "--fusion-update-baselines=" in message  # the fix
    assert path.read_text() == text  # reading never touches the user's file


def test_apply_writes_what_it_can_and_says_what_it_cannot_in_one_line(tmp_path):
    store = storage(tmp_path)
    good = store.queue(TEST, "created", snapshot(), store.locate(TEST))
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    bad = store.queue("t.py::t", "created", snapshot("t.py::t"),
                      BaselineFile(blocked / "t.yaml"))
    done, errors = store.apply([bad, good])
    assert done == [good] and Path(good.path).is_file()
    (line,) = errors
    assert line.startswith("could not write fusion baseline a-file/t.yaml for t.py::t: ")
    assert "\n" not in line


def test_discover_skips_what_it_cannot_read_and_owns_only_this_projects_files(tmp_path):
    store = storage(tmp_path)
    path = write(store, snapshot())
    (store.folder / "broken.yaml").write_text("test: [unclosed\n")
    (store.folder / "list.yaml").write_text("- 1\n")
    assert [p for p, _ in store.discover()] == [path]
    assert store.owns({})  # a folder inside the rootdir is the project's
    shared = BaselineStorage(tmp_path / "shared", tmp_path / "project")
    assert not shared.owns({}) and not shared.owns({"provenance": {"project": "other"}})
    assert shared.owns({"provenance": {"project": "project"}})


@pytest.mark.skipif(not hasattr(os, "fork"), reason="temp-file liveness is POSIX-only")
def test_leftover_temp_files_of_dead_writers_are_removed(tmp_path):
    store = storage(tmp_path)
    path = write(store, snapshot())
    # A writer's temp file carries its pid; pid 2**22 + 1 is above the largest pid Linux allows.
    stray = store.folder / f".{path.name}.{2**22 + 1}.abc.fusion-tmp"
    stray.write_text("half")
    removed = store.remove_stray_temp_files()
    assert removed == [stray] and not stray.exists() and path.is_file()
