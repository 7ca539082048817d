"""The tuning cache on disk (tuning.py): a timed choice survives the process, keyed by the GPU,
Triton's version and the generated file's text; written atomically, ignored when corrupt or
written for another identity. Timing only happens on CUDA, so these tests fake the identity and
the timer; the GPU test at the end times for real."""

import hashlib
import json
import os

import pytest
import torch
from codegen_harness import Lambda, to_device

from fusion_core.codegen import generate, load_kernel, tuning, tuning_cache, write_kernels
from fusion_core.pipeline import analyze

CONFIGS = ((64, 1, 4), (128, 1, 4), (256, 1, 8))
SPEED = {(64, 1, 4): 3.0, (128, 1, 4): 1.0, (256, 1, 8): 2.0}  # (128, 1, 4) is fastest
H200 = ["NVIDIA H200", "3.9.0", "ab" * 32]
KEY = ((4096, 1024), (torch.float16,), torch.device("cuda", 0))
TIMING_ON = tuning._timing_on  # the real check (the `timed` fixture replaces it)


def test_cache_dir_is_the_variable_else_xdg_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSION_ADVISOR_CACHE_DIR", str(tmp_path / "mine"))
    assert tuning._cache_dir() == str(tmp_path / "mine")
    monkeypatch.setenv("FUSION_ADVISOR_CACHE_DIR", "")  # set empty: no disk cache
    assert tuning._cache_dir() is None and tuning._cache_path(H200) is None
    monkeypatch.delenv("FUSION_ADVISOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tuning._cache_dir() == str(tmp_path / "xdg" / "fusion-advisor")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tuning._cache_dir() == str(tmp_path / "home" / ".cache" / "fusion-advisor")


def test_each_identity_has_its_own_file(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSION_ADVISOR_CACHE_DIR", str(tmp_path))
    paths = {tuning._cache_path(i) for i in (H200, ["NVIDIA H100", *H200[1:]],
                                             [H200[0], "3.6.0", H200[2]],
                                             [*H200[:2], "cd" * 32])}
    assert len(paths) == 4 and all(p.startswith(str(tmp_path)) for p in paths)
    assert tuning._cache_path(None) is None  # off CUDA: no identity, no file


def test_the_key_stored_is_the_bucket_and_dtypes_not_the_device_index():
    other_device = (KEY[0], KEY[1], torch.device("cuda", 1))
    assert tuning._cache_key(KEY) == tuning._cache_key(other_device)
    assert tuning._cache_key(KEY) != tuning._cache_key((KEY[0], (torch.bfloat16,), KEY[2]))
    assert tuning._cache_key(KEY) != tuning._cache_key(((4096, 4096), KEY[1], KEY[2]))


def test_a_choice_written_reads_back_and_keeps_other_choices(tmp_path):
    path = str(tmp_path / "tuning" / "f.json")
    tuning._cache_write(path, H200, "a", (128, 1, 4))
    tuning._cache_write(path, H200, "b", (4096, 1, 8, 2))  # another process, same file
    assert tuning._cache_read(path, H200) == {"a": (128, 1, 4), "b": (4096, 1, 8, 2)}
    assert os.listdir(tmp_path / "tuning") == ["f.json"]  # no temp file left behind


def test_a_failed_write_leaves_the_old_file_whole_and_no_temp_file(monkeypatch, tmp_path):
    path = str(tmp_path / "f.json")
    tuning._cache_write(path, H200, "a", (128, 1, 4))
    before = (tmp_path / "f.json").read_text()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    tuning._cache_write(path, H200, "b", (64, 1, 4))  # skipped quietly: no exception
    assert (tmp_path / "f.json").read_text() == before
    assert os.listdir(tmp_path) == ["f.json"]


def test_an_unwritable_cache_folder_is_skipped(tmp_path):
    (tmp_path / "tuning").write_text("a file where the folder should be")
    path = str(tmp_path / "tuning" / "f.json")
    tuning._cache_write(path, H200, "a", (128, 1, 4))
    assert tuning._cache_read(path, H200) == {}
    assert (tmp_path / "tuning").read_text() == "a file where the folder should be"


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]", '{"identity": 3}',
                                  json.dumps({"identity": H200, "choices": [1]}),
                                  json.dumps({"identity": H200,
                                              "choices": {"a": "fast", "b": [1.5, 2]}})])
def test_a_corrupt_file_reads_as_empty(tmp_path, text):
    path = tmp_path / "f.json"
    path.write_text(text)
    assert tuning._cache_read(str(path), H200) == {}


def test_a_file_written_for_another_identity_reads_as_empty(tmp_path):
    path = str(tmp_path / "f.json")
    tuning._cache_write(path, H200, "a", (128, 1, 4))
    assert tuning._cache_read(path, ["NVIDIA H100", *H200[1:]]) == {}
    assert tuning._cache_read(path, [H200[0], "3.6.0", H200[2]]) == {}


@pytest.fixture
def timed(monkeypatch, tmp_path):
    """`_choose` with timing on, a fake timer (the times SPEED gives) and a cache in
    tmp_path; returns the list of configurations timed and a setter of the identity."""
    monkeypatch.setenv("FUSION_ADVISOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "CHOSEN", {})
    monkeypatch.setattr(tuning, "_timing_on", lambda device: True)
    calls = []
    monkeypatch.setattr(tuning, "_time", lambda run, c: calls.append(c) or SPEED[c])
    identity = {"now": H200}
    monkeypatch.setattr(tuning, "_cache_identity", lambda device: identity["now"])
    return calls, identity


def test_a_second_process_reads_the_choice_instead_of_timing(timed):
    calls, _ = timed
    assert tuning._choose(KEY, CONFIGS, None, KEY[2]) == (128, 1, 4)
    assert calls == list(CONFIGS)
    tuning.CHOSEN.clear()  # what a new process starts with
    assert tuning._choose(KEY, CONFIGS, None, KEY[2]) == (128, 1, 4)
    assert len(calls) == 3 and tuning.CHOSEN == {KEY: (128, 1, 4)}


@pytest.mark.parametrize("identity", [["NVIDIA H100", *H200[1:]], [H200[0], "3.6.0", H200[2]],
                                      [*H200[:2], "cd" * 32]],
                         ids=["another GPU", "another Triton", "an edited file"])
def test_another_gpu_triton_or_file_times_again(timed, identity):
    calls, now = timed
    tuning._choose(KEY, CONFIGS, None, KEY[2])
    tuning.CHOSEN.clear()
    now["now"] = identity
    assert tuning._choose(KEY, CONFIGS, None, KEY[2]) == (128, 1, 4)
    assert calls == [*CONFIGS, *CONFIGS]


def test_a_corrupt_cache_file_times_again_and_is_replaced(timed):
    calls, _ = timed
    path = tuning._cache_path(H200)
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write('{"identity": ["NVIDIA H200", "3.9.0"')  # cut short
    assert tuning._choose(KEY, CONFIGS, None, KEY[2]) == (128, 1, 4)
    assert calls == list(CONFIGS)
    assert tuning._cache_read(path, H200) == {tuning._cache_key(KEY): (128, 1, 4)}


def test_a_stored_choice_no_longer_offered_times_again(timed):
    """A stored configuration that the file's candidates no longer give (the identity would
    normally change with the edit; a hand-written cache file need not match)."""
    calls, _ = timed
    tuning._cache_write(tuning._cache_path(H200), H200, tuning._cache_key(KEY), (512, 1, 16))
    assert tuning._choose(KEY, CONFIGS, None, KEY[2]) == (128, 1, 4)
    assert calls == list(CONFIGS)


def test_without_timing_nothing_is_read_or_written(timed, monkeypatch, tmp_path):
    calls, _ = timed
    tuning._cache_write(tuning._cache_path(H200), H200, tuning._cache_key(KEY), (256, 1, 8))
    monkeypatch.setattr(tuning, "_timing_on", lambda device: False)
    # (a CPU device: the capture check asks CUDA)
    assert tuning._choose(KEY, CONFIGS, None, torch.device("cpu")) == CONFIGS[0]
    assert calls == []  # the heuristic's pick, not the stored one


def test_the_identity_hashes_the_file_text(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H200")
    import triton

    with open(tuning_cache.__file__, "rb") as f:  # in a generated file: that file
        digest = hashlib.sha256(f.read()).hexdigest()
    assert tuning._cache_identity(torch.device("cuda")) == [
        "NVIDIA H200", triton.__version__, digest]
    assert tuning._cache_identity(torch.device("cpu")) is None


def _softmax(m, x):
    return torch.softmax(x * 2.0, dim=-1)


def test_a_generated_launcher_times_once_across_processes(monkeypatch, tmp_path):
    """The helpers as copied into a kernel file: a first module times and stores its choice,
    a second module loaded from the same file (a new process) launches it without timing,
    and a file with other text times again."""
    monkeypatch.setenv("FUSION_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    analysis = analyze(Lambda(_softmax, 1), torch.randn(4, 16))
    kernel = generate(analysis, analysis.clusters[0])
    path = write_kernels([kernel], tmp_path / "gen")[0]
    x = torch.randn(64, 16)
    timed = []

    def loaded(file):
        module = load_kernel(file)
        module._timing_on = lambda device: True
        module.TUNE_MIN_ELEMENTS = 0  # (64, 16) is small enough to go untimed
        module._time = lambda run, c: timed.append(c) or -c[1] * 100 - c[2]  # most rows, warps
        real = module._cache_identity

        def identity(device):  # this file's text hash, with a made-up GPU (no CUDA here)
            import hashlib

            found = ["Fake GPU", "3.9", hashlib.sha256(open(file, "rb").read()).hexdigest()]
            return found if real(device) is None else real(device)

        module._cache_identity = identity
        return module, getattr(module, kernel.name)

    first, launch = loaded(path)
    torch.testing.assert_close(launch(to_device(x)).cpu(), _softmax(None, x))
    configs = first._configs((16, 64))
    assert timed == list(configs)
    second, launch = loaded(path)
    torch.testing.assert_close(launch(to_device(x)).cpu(), _softmax(None, x))
    assert len(timed) == len(configs)  # read from the cache
    assert list(second.CHOSEN.values()) == list(first.CHOSEN.values())
    edited = tmp_path / "edited.py"
    edited.write_text(path.read_text().replace("TUNE_REP_MS = ", "TUNE_REP_MS = 1 + "))
    _, launch = loaded(edited)
    torch.testing.assert_close(launch(to_device(x)).cpu(), _softmax(None, x))
    assert len(timed) == 2 * len(configs)
    assert len(os.listdir(tmp_path / "cache" / "tuning")) == 2


@pytest.mark.gpu
def test_on_cuda_the_second_load_of_a_kernel_file_does_not_time(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSION_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSION_ADVISOR_AUTOTUNE", "1")
    analysis = analyze(Lambda(_softmax, 1), torch.randn(4, 1000))
    kernel = generate(analysis, analysis.clusters[0])
    path = write_kernels([kernel], tmp_path / "gen")[0]
    x = torch.randn(2048, 1000, device="cuda")
    first = load_kernel(path)
    torch.testing.assert_close(getattr(first, kernel.name)(x), _softmax(None, x))
    (stored,) = os.listdir(tmp_path / "cache" / "tuning")
    second = load_kernel(path)

    def no_timing(run, config):
        raise AssertionError("timed although the cache holds this bucket")

    second._time = no_timing
    torch.testing.assert_close(getattr(second, kernel.name)(x), _softmax(None, x))
    assert second.CHOSEN == first.CHOSEN and len(first.CHOSEN) == 1
    data = json.loads((tmp_path / "cache" / "tuning" / stored).read_text())
    assert data["identity"][0] == torch.cuda.get_device_name()


def test_a_traced_launch_takes_the_stored_choice_without_timing(timed):
    """torch.compile in a new process traces (`traceable`) before any eager call: it takes
    the choice an earlier process timed and stored, not the heuristic's, and times nothing."""
    calls, _ = timed
    tuning._choose(KEY, CONFIGS, None, KEY[2])
    tuning.CHOSEN.clear()  # a new process
    del calls[:]
    assert tuning._kept(KEY, CONFIGS, KEY[2]) == (128, 1, 4)
    assert calls == [] and tuning.CHOSEN == {}  # read, not timed; the eager call still chooses
    assert tuning._kept(KEY, CONFIGS[::2], KEY[2]) == (64, 1, 4)  # not offered: the first


def test_a_traced_launch_takes_this_process_choice_first(timed):
    tuning._choose(KEY, CONFIGS, None, KEY[2])  # stores (128, 1, 4)
    tuning.CHOSEN[KEY] = (256, 1, 8)
    assert tuning._kept(KEY, CONFIGS, KEY[2]) == (256, 1, 8)


@pytest.mark.parametrize("where", ["off CUDA", "timing off", "a small bucket"])
def test_a_traced_launch_reads_no_cache_where_the_eager_call_would_not(timed, monkeypatch,
                                                                       where):
    """Where `_choose` takes the heuristic's pick untimed (off CUDA, FUSION_ADVISOR_AUTOTUNE=0
    or the interpreter, a bucket of at most TUNE_MIN_ELEMENTS), `_kept` takes it too, whatever
    the disk holds: the compiled graph's configuration does not depend on whether it was
    traced before or after the first eager call."""
    calls, _ = timed
    small = ((64, 16), KEY[1], KEY[2])
    for key in (KEY, small):
        tuning._cache_write(tuning._cache_path(H200), H200, tuning._cache_key(key), (128, 1, 4))
    assert tuning._kept(KEY, CONFIGS, KEY[2]) == (128, 1, 4)  # read where eager would read
    key = {"off CUDA": (KEY[0], KEY[1], torch.device("cpu")), "timing off": KEY,
           "a small bucket": small}[where]
    if where != "a small bucket":  # the real check: a CPU device, or the variable, says no
        monkeypatch.setenv("FUSION_ADVISOR_AUTOTUNE", "0" if where == "timing off" else "1")
        monkeypatch.setattr(tuning, "_timing_on", TIMING_ON)
    assert tuning._kept(key, CONFIGS, key[2]) == (64, 1, 4) and calls == []
