"""Column loops run under an interpreter whose scalars cannot be a `range` bound, as under
Triton 3.6's with NumPy >= 2.4: its scalar's `__index__` is `int()` of a one-element 1-D array,
which NumPy 2.4 refuses, so `range(0, n_cols, BLOCK_SIZE)` failed there ("only 0-dimensional
arrays can be converted to Python scalars"). CI installs one Triton; the fixture gives this
one's interpreter that `__index__` (TypeError on any 1-D array, whatever NumPy says), and the
generated loops, which pass their bound through `_range_bound`, still match eager."""

import operator

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from codegen_harness import DEVICE, Lambda, check_model, compare, to_device

from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels
from fusion_core.codegen.reference import capture_values, eager_cluster
from fusion_core.pipeline import analyze

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the interpreter's range(): CPU only")

LOOP = Tuning(max_block=16, loop_block=16)  # rows wider than 16 columns loop
SPLIT = Tuning(max_block=256, loop_block=256, split_min_cols=1024)  # 4096 columns: 4 chunks


@pytest.fixture
def scalar_refuses_index(monkeypatch):
    """The interpreter's scalar `__index__` as Triton 3.6 defines it under NumPy >= 2.4."""
    from triton.runtime import interpreter

    patch = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: operator.index(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patched)


@triton.jit
def _count_kernel(out_ptr, n):
    total = 0
    for _ in range(0, n, 1):
        total += 1
    tl.store(out_ptr, total)


def test_the_fixture_refuses_a_scalar_range_bound(scalar_refuses_index):
    """What failed under Triton 3.6: `range` over a runtime scalar."""
    out = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(Exception, match="scalar index"):
        _count_kernel[(1,)](out, 5)


@pytest.mark.parametrize("width", [64, 70], ids=["aligned", "odd"])  # 70: row bodies and edges
def test_looped_softmax_runs(scalar_refuses_index, width, tmp_path):
    torch.manual_seed(1)
    x = torch.randn(3, width)
    checked = check_model(Lambda(lambda m, x: F.softmax(x * 3.0, dim=-1)), (x,), tmp_path,
                          n_clusters=1, tuning=LOOP)
    assert checked.kernels[0].looped


def test_split_layer_norm_runs(scalar_refuses_index, tmp_path):
    """2 x 4096: four programs per row, each looping over its chunk of 1024 columns."""
    torch.manual_seed(2)
    x = torch.randn(2, 4096)
    analysis = analyze(Lambda(lambda m, x: F.layer_norm(x + 1.0, (4096,))), x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, SPLIT)
    assert f"def {kernel.name}_partials(" in kernel.source
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    module._timing_on = lambda device: False
    values = capture_values(analysis, x)
    args = tuple(values[n] for n in cluster.inputs)
    (want,) = eager_cluster(analysis, cluster)(*args)
    got = getattr(module, kernel.name)(*map(to_device, args)).cpu()
    assert list(module.CHOSEN.values())[0][3] == 4  # split: the partials and finish kernels
    compare(got, want, "layer_norm")


@pytest.mark.parametrize("setting", ["1", "true", "On", "TRUE"])
def test_the_interpreted_flag_reads_the_variable_as_triton_does(setting, monkeypatch, tmp_path):
    """Triton interprets for "1", "true" or "on" in any case; the generated flag that picks
    `_range_bound`'s interpreted branch must agree, or the loop meets the raw scalar again."""
    x = torch.randn(2, 64)
    analysis = analyze(Lambda(lambda m, x: F.softmax(x * 3.0, dim=-1)), x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, LOOP)
    path = write_kernels([kernel], tmp_path)[0]
    monkeypatch.setenv("TRITON_INTERPRET", setting)
    assert load_kernel(path)._INTERPRETED
