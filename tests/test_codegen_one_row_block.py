"""A softmax holds one value per element in its one block (the registry's `holds_one_row`):
rows that would loop past 16384 columns stay whole up to 32768 (one_block.py), at no more
than 32 elements a thread (32 warps at 32768). log_softmax, a layer norm and a softmax that
reads a second row-sized tensor still loop there; files for narrower rows are unchanged."""

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import Lambda, check_model, load_tool

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.codegen.reference import capture_values, cluster_inputs
from fusion_core.pipeline import analyze

FNS = {
    "softmax": lambda m, x: F.softmax(x * 0.125, dim=-1),
    "log_softmax": lambda m, x: F.log_softmax(x * 0.125, dim=-1),
    "layer_norm": lambda m, x: F.layer_norm(x * 2.0, (x.shape[-1],)),
    "softmax*w": lambda m, x: F.softmax(x * 0.125, dim=-1) * m.w,  # w: one per column
    "softmax*x": lambda m, x: F.softmax(x * 0.125, dim=-1) * x,  # x kept beside the exps
    "softmax+x/8": lambda m, x: F.softmax(x * 0.125, dim=-1) + x * 0.125,
    "exp(softmax)": lambda m, x: torch.exp(F.softmax(x * 0.125, dim=-1)),
}
F32, BF16, F64 = torch.float32, torch.bfloat16, torch.float64


def _kernel(name: str, width: int, dtype: torch.dtype):
    model = Lambda(FNS[name], w=torch.randn(width).to(dtype))
    analysis = analyze(model, torch.empty(2, width, dtype=dtype))
    (cluster,) = analysis.clusters
    return generate(analysis, cluster)


@pytest.mark.parametrize("name,dtype,width,looped,max_block", [
    ("softmax", F32, 16388, False, 32768),  # rows of 65552 bytes: 16-byte aligned
    ("softmax", F32, 16389, True, 16384),  # unaligned rows: the loop loads them 16 bytes at once
    ("softmax", BF16, 16392, False, 32768),
    ("softmax", BF16, 16390, True, 16384),
    ("softmax", F32, 32768, False, 32768),
    ("softmax", BF16, 20000, False, 32768),  # computed in fp32: the same registers
    ("softmax", F32, 32772, True, 32768),  # past the wider block: the loop
    ("softmax", F32, 16384, False, 16384),  # narrower rows: the file's MAX_BLOCK as before
    ("softmax", F64, 16384, False, 16384),  # the bytes doubled: 16384 of fp64
    ("softmax", F64, 16386, True, 16384),
    ("log_softmax", F32, 20000, True, 16384),  # keeps x beside the exps: ptxas spills
    ("layer_norm", F32, 20000, True, 16384),  # the row and its deviations
    ("softmax*w", F32, 20000, True, 16384),  # a second row-sized tensor: ptxas spills
    ("softmax*x", F32, 20000, True, 16384),  # x read after the reduction: ptxas spills
    ("softmax+x/8", F32, 20000, True, 16384),
    ("exp(softmax)", F32, 20000, False, 32768),  # after it, only the softmax's own values
])
def test_a_softmax_keeps_rows_up_to_32768_columns_in_one_block_and_others_loop(
        name, dtype, width, looped, max_block):
    kernel = _kernel(name, width, dtype)
    assert kernel.looped == looped
    assert kernel.tuning.max_block == max_block


def _heuristic(name: str, width: int, tmp_path):
    (path,) = write_kernels([_kernel(name, width, F32)], tmp_path / f"{name}{width}")
    return load_kernel(path).HEURISTIC


def test_a_one_block_softmax_32768_wide_launches_32_warps(tmp_path):
    """(BLOCK_SIZE, rows a program, warps) for 1024 rows: 32 elements a thread at 32768 in the
    wide file, as at 16384 in any one-block file (16 warps, the shared heuristic's most)."""
    wide, narrow = _heuristic("softmax", 20000, tmp_path), _heuristic("softmax", 4096, tmp_path)
    assert wide((32768, 1024)) == (32768, 1, 32)
    for width in (1024, 4096, 16384):  # as wide as a narrower file's rows: the same choice
        assert wide((width, 1024)) == narrow((width, 1024))
    assert narrow((16384, 1024)) == (16384, 1, 16)


@pytest.mark.parametrize("width", [20000, 32768])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_a_one_block_softmax_wider_than_16384_matches_eager(dtype, width, tmp_path):
    """Two rows (one program each), a masked tail at 20000 columns, in the interpreter."""
    torch.manual_seed(3)
    x = (torch.randn(2, width) * 8.0).to(dtype)
    checked = check_model(Lambda(FNS["softmax"], arity=1), (x,), tmp_path, n_clusters=1)
    assert not checked.kernels[0].looped
    assert checked.kernels[0].tuning.max_block == 32768


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_the_one_block_softmax_32768_wide_does_not_spill_on_sm90(dtype, tmp_path):
    """Compiled for sm_90 on the CPU (ptxas -v, tools/kernel_registers.py) at the launch its
    file's heuristic picks for 1024 rows: within 64 registers a thread, none spilled."""
    tool = load_tool("kernel_registers")
    x = torch.randn(2, 32768).to(dtype)
    analysis = analyze(Lambda(FNS["softmax"], arity=1), x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster)
    assert not kernel.looped
    (path,) = write_kernels([kernel], tmp_path / "file")
    block, rows, warps = load_kernel(path).HEURISTIC((32768, 1024))
    assert (block, rows) == (32768, 1)
    args = cluster_inputs(analysis, cluster, capture_values(analysis, x))
    ((regs, spilled),) = tool.usage([tool.kernel_job(kernel, args, tmp_path / "ptx", "kernel",
                                                     block, warps)])
    assert spilled == 0 and 0 < regs <= 64, (regs, spilled, warps)
