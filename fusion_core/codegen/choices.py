"""The launch choices the generator writes into a kernel file: ``Tuning`` (the defaults of its
tuning constants), the candidate configurations each kernel kind times per shape bucket, and
which kind a plan is ("split": a looped reduction whose few wide rows may each be split over
several programs, ``split_rows.py``). Read by ``launcher.py`` (which writes them out) and
``kernel.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .plan import KernelPlan
from .reduce import splittable


@dataclass(frozen=True)
class Tuning:
    block: int = 1024  # elementwise: elements per program (flat, or a row-wide tile)
    num_warps: int = 4  # elementwise: warps per program
    # reduction: the fewest warps a program of rows takes (NUM_WARPS in its file); more at
    # ~512 elements a warp (tuning._row_warps). Rows of 1024 ran 7% faster on 2 than on 4.
    row_min_warps: int = 2
    # tiled elementwise reading a transposed view: square tiles of this many elements, this
    # wide. 64 x 64 measured fastest or within 1% of it on both permute cases of the H100 panel
    # of 2026-12-06 (NHWC -> NCHW, 7x7 bf16 and 56x56 fp32); 32 x 32 lost 12% at 7x7.
    tile_elements: int = 4096
    tile_cols: int = 64
    # reduction: widest row one block holds, wider rows loop; None: by the element size
    # (one_block.widest_one_block; a softmax's twice as wide where its rows need it), which
    # `kernel.generate` fills in
    max_block: int | None = None
    # reduction: rows wider than this loop where the kernel can, though one block holds up to
    # max_block (a 16-bit centered norm loops sooner, one_block.CENTERED_16BIT_ONE_BLOCK; a kernel
    # generated without the loop still runs rows up to max_block); None: max_block
    loop_above: int | None = None
    # reduction: narrowest column step when rows loop... On an H100 (2026-12-06, the panel at
    # 18:39 UTC) layer_norm->gelu 2048x8192 fp32 looped took 54.1 µs at 4096 a step, 16 warps,
    # and 64.0 at 2048 (8 warps), the step of 1024 here gave; 16384-wide rows step 4096 as well.
    loop_block: int = 4096
    # ...which is a row's width over this (fewer steps leave a pipelined loop nothing to
    # overlap)...
    loop_steps: int = 4
    # ...up to this (and max_block); None: by the plan (kernel.with_max_block: rows a norm
    # reads twice in float32 NORMALIZE_FP32_LOOP_BLOCK, else MAX_LOOP_BLOCK)...
    max_loop_block: int | None = None
    split_loop_block: int = 8192  # ...and a split row's chunk up to this
    # Few wide rows (softmax, log_softmax, layer_norm, rms_norm): each row split over several
    # programs while rows x programs stay within this (about 2 programs per SM of an H200:
    # 128 rows gained from 2 programs each, 256 rows lost 14% with 2)...
    split_programs: int = 256
    split_min_cols: int = 8192  # ...and each program keeps at least this many columns
    # Rows of a norm wider than 4 x split_min_cols (a bucket of 8 x), too many for the split
    # above (or, 8 x wide, filling 4 x split_programs programs: tuning._split_heuristic),
    # split in one launch by default up to this many rows (0: never), over this many programs
    # a row; None: by the plan (SPLIT_JOINED below)
    split_joined_rows: int | None = None
    split_joined_programs: int | None = None
    pack_width: int = 256  # rows at most this wide are packed several per program...
    pack_elements: int = 2048  # ...up to this many elements per program
    max_rows: int = 16
    # A reduction whose input is contiguous along the rows but strided along the columns
    # (softmax over the channels of NCHW) packs rows of any width that fits one block, this
    # many at most: each column's loads then read a contiguous run of rows. 32 rows (64
    # channels: 2048 elements, 4 warps) beat 64 (8 warps) by 19-32% on the NCHW softmax of the
    # H200 panels of 2026-12-03 and the H100 panel of 2026-12-06. Up to 16384 elements: on
    # softmax(x.T/8) 4096x4096 fp32 (H100, 2026-12-06) 4 rows at 16 warps took 66.7 µs, 2 rows
    # (8192 elements, the heuristic's pick then) 83.6-84.6 and 8 rows at 32 warps 70.2.
    strided_pack_elements: int = 16384
    strided_max_rows: int = 32


MAX_LOOP_BLOCK = 8192
# Where wide rows split in one launch by default (Tuning.split_joined_rows and _programs): the
# rows a bucket may have and the programs a row, by the norm and its widest row input's bytes;
# plans not listed never. On an H100
# (2026-12-06, the panel's night call 2) 2 programs a row in one launch, 8192 columns a step,
# 16 warps: layer_norm*2 256x65536 fp32 the best candidate (66.3 µs; one program a row
# 69.6), rms_norm 512x65536 bf16 the best (60.2; 69.4) and fp16 1.9% from it (60.3 against
# 59.2; 66.1), rms_norm 256x65536 fp32 5.5% (63.7 against 60.4; 68.4); 16-bit
# layer_norm*2 512x65536 lost 13% (70.3 against 62.2 one program a row). The RMSNorm rows
# measured are LLaMA's, spelled out (pow -> mean -> rsqrt -> mul: a "mean" read back per
# element); F.rms_norm's kernel keeps the same statistic a lane (a sum of squares), not
# measured itself. Not measured: other row counts, group norms, batch norms, other collapses.
# The float32 RMSNorm took 8 programs a row (4096 columns a step, then 8 warps: the chunk's 512
# elements a warp; 16 since the panel below): the best candidate on both H100 panels of that day
# (60.4 and 61.6-61.7 µs, where 2 programs took 63.7 and 64.2-64.6); the float32 LayerNorm
# kept 2 then (66.8 µs; 8 programs 69.9 on the 18:39 UTC panel).
# The H100 panel of 2026-12-07 morning (after the joined kernel's fallback moved to a block of
# its own, 72bae06: 58 registers a thread at 4096 a step instead of 94), 4096 a step, 16 warps:
# rms_norm 512x65536 16-bit 4 programs a row 58.5-58.6 µs (2: 62.8-63.0 at 8192 a step; 8:
# 64.1-65.3), layer_norm*2 256x65536 fp32 4 programs 66.3 (2: 70.5; 8: 70.7), rms_norm
# 256x65536 fp32 8 programs 54.9 (4: 62.2; 8 at 8 warps 59.1). 16-bit layer_norm*2 512x65536
# still loses in one launch (4 programs 63.6-64.5 against 61.7-62.5 one program a row).
SPLIT_JOINED = {("mean", 2): (512, 4), ("mean", 4): (256, 8), ("rms_norm", 2): (512, 4),
                ("rms_norm", 4): (256, 8), ("layer_norm", 4): (256, 4)}
# A row a norm reads twice (statistics, then each element: kernel.normalizes) whose widest row-
# varying tensor is float32 (read or written) steps 16 KiB: on the H100 panel of 2026-12-06 (call
# 8) layer_norm*2 256x65536 fp32 ran 5.4% slower at 8192 columns a step than at 4096, rms_norm*2
# 128x65536 2.0% (unsplit), rms_norm 256x65536 0.1%; on the H200 panels of 2026-12-04 the two tied
# within 1.2%. 16-bit norm rows keep 8192 (also 16 KiB: layer_norm*2 512x65536 lost 12-15% at
# 4096), and so do softmax's float32 rows (50257 columns lost 17-22% at 4096) and split rows'
# chunks (the H200's best for rms_norm*2 128x65536, 8192 a step in 2 programs a row; 4096 in 2 not
# measured).
NORMALIZE_FP32_LOOP_BLOCK = 4096


# What each kernel kind's launcher times per shape bucket (tuning.py's `_config` says what the
# numbers mean): few enough to time in well under a second on the first call in a bucket.
CANDIDATES = {
    "flat": ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16)),
    "tiled": ((2048, 32, 4), (1024, 64, 4), (4096, 64, 4), (4096, 64, 8), (2048, 64, 8)),
    "tiled-wide": ((2048, 2048, 4), (4096, 4096, 8), (2048, 2048, 8), (1024, 1024, 4)),
    "single": ((1024, 2), (2048, 4), (4096, 8), (8192, 8), (2048, 8), (4096, 16), (8192, 32)),
    # Rows strided along their columns (softmax over x.T's rows, x's columns): more rows a
    # program, so each load of a column reads more adjacent rows (8 fp32 rows: one 32-byte
    # sector). At 4096 columns the single list packs at most 2 rows (8 bytes of a sector);
    # softmax(x.T) 4096x4096 fp32 ran at 56% of a copy on the H100 on 2026-12-06. Compiled
    # for sm_90 (ptxas, on CPU) that row's kernel moves 8 bytes a load at 2 rows, 16 at 4 and
    # 8 rows (two loads: 32 contiguous bytes a column), 58-62 registers, no spills. Timed on
    # an H100 (2026-12-06): 4 rows 66.7 µs (71% of a copy), 8 rows 70.2, 2 rows 83.6-84.6.
    "single-strided": ((16384, 16), (32768, 32)),
    "looped": ((1024, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16)),
    # Split rows in one launch (a fourth number, 1): hand-written, the form took rms_norm
    # 256x65536 fp32 from 69 to 57 µs (8192 a chunk, 8 warps, 8 programs a row) and its 512-row
    # 16-bit rows from 65-68 to 60 (4096 a step, 16 warps, 4 programs); the two-kernel split
    # stayed fastest for softmax 64x262144 fp16 (wide_rows_probe.py, H100, 2026-12-06).
    "split": ((1024, 4, 1), (2048, 8, 1), (4096, 8, 1), (4096, 16, 1), (8192, 16, 1),
              (4096, 8, 4), (4096, 8, 8), (8192, 16, 8), (4096, 8, 16), (2048, 8, 32),
              (8192, 8, 8, 1), (4096, 16, 4, 1), (4096, 16, 8, 1), (8192, 16, 2, 1),
              (4096, 8, 8, 1)),
}
CANDIDATE_FIELDS = {
    "flat": "(BLOCK, NUM_WARPS)",
    "tiled": "(elements per tile, widest column block, warps)",
    "single": "(elements per program, warps); rows are packed only up to PACK_WIDTH wide",
    "looped": "(column block of the row loop, warps)",
    "split": "(column block of the row loop, warps, programs per row at most[, 1: one launch])",
}


def kind(plan: KernelPlan, looped: bool) -> str:
    """The kernel's launch kind: which configurations it takes."""
    if plan.tiled:
        return "tiled"
    if plan.skeleton == "elementwise":
        return "flat"
    if not looped:
        return "single"
    return "split" if splittable(plan) else "looped"


def candidates(plan: KernelPlan, looped: bool) -> tuple[tuple[int, ...], ...]:
    """The configurations a kernel's launcher times on its first call in a shape bucket."""
    k = kind(plan, looped)
    if k == "single" and plan.column_strided:
        return CANDIDATES["single"] + CANDIDATES["single-strided"]
    return CANDIDATES["tiled-wide" if k == "tiled" and not plan.column_strided else k]
