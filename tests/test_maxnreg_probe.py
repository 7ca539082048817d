"""benchmarks/maxnreg_probe.py at tiny sizes on any machine: each capped variant's file asks
every launch for the cap, and every variant matches eager (compiled where there is a GPU,
interpreted elsewhere). The timed run needs CUDA."""

import sys
from pathlib import Path

import pytest
from codegen_harness import DEVICE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import maxnreg_probe as probe  # noqa: E402
from gpu_clusters import as_tuple, close  # noqa: E402
from panel_cases import CASES  # noqa: E402

from fusion_core.codegen import load_kernel  # noqa: E402


@pytest.mark.parametrize("number", [37, 35])
def test_capped_variants_ask_for_the_cap_and_match_eager(number, tmp_path):
    case = CASES[number]
    found, inputs, eager, _ = probe.files(case, DEVICE, tmp_path, tiny=True)
    assert [label for label, _, _ in found] == ["now", *(f"maxnreg {c}" for c in probe.CAPS)]
    want = as_tuple(eager(*inputs))
    for label, path, name in found:
        text = Path(path).read_text()
        launches = text.count(probe.LAUNCH_OPTION)
        assert launches >= 1
        cap = label.removeprefix("maxnreg ")
        assert text.count(f"maxnreg={cap}") == (0 if label == "now" else launches)
        got = as_tuple(getattr(load_kernel(path), name)(*inputs))
        ok, err = close(got, want, case.dtype)
        assert ok, (label, err)


def test_a_file_without_the_launch_option_is_refused():
    with pytest.raises(ValueError, match="probe needs updating"):
        probe.capped("def f():\n    pass\n", 32)
