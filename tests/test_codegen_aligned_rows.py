"""Looped rows of odd widths read with aligned vector loads (loads.py, ``aligned_vec``): each
row's body starts at its first 16-byte-aligned element, and the few columns before and after
it go through one more masked block. Checked against eager under the interpreter with rows
starting at every alignment; the vector loads themselves need the sm_90 compile (slow test)."""

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import Lambda, check_model, ttgir_load_layouts

from fusion_core.codegen import Tuning, generate
from fusion_core.codegen.loads import aligned_vec
from fusion_core.codegen.lower import plan
from fusion_core.pipeline import analyze

LOOP = Tuning(max_block=16, loop_block=16)  # every row wider than 16 columns loops
FNS = {
    "softmax": lambda m, x: F.softmax(x * 3.0, dim=-1),
    "log_softmax(x.float())": lambda m, x: F.log_softmax(x.float() * 2.0, dim=-1),
    "rms_norm": lambda m, x: F.rms_norm(x * 2.0, (x.shape[-1],), m.w) + 1.0,
    "sum": lambda m, x: (x * m.w).sum(-1),
    "amax": lambda m, x: x - torch.amax(x * 2.0, dim=-1, keepdim=True),
    "layer_norm": lambda m, x: F.gelu(F.layer_norm(x + 1.0, (x.shape[-1],), m.w, m.b)),
    "var": lambda m, x: torch.var(x * 2.0, dim=-1),
    "cumsum": lambda m, x: torch.cumsum(x * 2.0, dim=-1),
}


def _model(name: str, width: int, dtype: torch.dtype):
    return Lambda(FNS[name], w=torch.randn(width).to(dtype), b=torch.randn(width).to(dtype))


def _plan(name: str, width: int, dtype: torch.dtype):
    analysis = analyze(_model(name, width, dtype), torch.randn(9, width).to(dtype))
    (cluster,) = analysis.clusters
    return analysis, cluster


@pytest.mark.parametrize("name,dtype,vec", [
    ("softmax", torch.float32, 4), ("softmax", torch.bfloat16, 8),
    ("log_softmax(x.float())", torch.bfloat16, 8),  # bf16 in, fp32 out: the narrower
    ("rms_norm", torch.float16, 8), ("sum", torch.float32, 4), ("amax", torch.float32, 4),
    # lanes that count their values (Welford) or run in column order keep the plain loop
    ("layer_norm", torch.float32, None), ("var", torch.float32, None),
    ("cumsum", torch.float32, None),
])
def test_which_rows_take_the_aligned_body(name, dtype, vec):
    analysis, cluster = _plan(name, 71, dtype)
    assert aligned_vec(plan(analysis.graph, cluster)) == vec
    source = generate(analysis, cluster, LOOP).source
    assert ("row_aligned + col0 + tl.arange(0, BLOCK_SIZE)[None, :]" in source) == bool(vec)
    assert ("# the row's edges" in source) == bool(vec)


@pytest.mark.parametrize("width", [17, 33, 71, 64])  # 64: rows start aligned, no edges
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["softmax", "log_softmax(x.float())", "rms_norm", "sum",
                                  "amax"])
def test_rows_at_every_alignment_match_eager(name, dtype, width, tmp_path):
    """9 rows: with 17, 33 or 71 columns they start at every element offset modulo the
    vector (a head of 0 to vec - 1 columns before the body, a tail after it)."""
    torch.manual_seed(width)
    checked = check_model(_model(name, width, dtype), (torch.randn(9, width).to(dtype),),
                          tmp_path, n_clusters=1, tuning=LOOP)
    assert checked.kernels[0].looped


@pytest.mark.slow
def test_an_odd_width_row_loads_and_stores_four_floats_at_once():
    """16389 fp32 columns (rows 16-byte aligned only every fourth row): compiled for sm_90,
    the body's loads and stores are 128-bit; only the edges' are scalar."""
    memory = ttgir_load_layouts("1024,16389", "row softmax")["ptx_memory"]
    assert "ld.global.L1::evict_last.L2::cache_hint.v4.b32" in memory, memory
    assert "ld.global.L1::evict_first.L2::cache_hint.v4.b32" in memory, memory
    # stores hinted as the last pass writes them (its row blocks stay for its re-reads)
    assert "st.global.L1::evict_first.L2::cache_hint.v4.b32" in memory, memory
