"""How wide a reduction's row may be for one block to keep it whole, by its element size.

Reads the element size of a reduction's widest input or accumulator; returns the widest row
(a power of two) one block holds in registers, twice as wide for a reduction that holds one
value per element (softmax), and the narrower width above which a centered norm of 16-bit
inputs loops over column blocks instead. Chosen once, when a kernel file is
generated (``kernel.with_max_block``), not per shape: unlike ``tuning.py``, nothing here is
copied into the generated files.
"""

from __future__ import annotations

# A whole-row block holds its row in registers: at most ONE_BLOCK_BYTES of values as the
# kernel computes them, at least 4 bytes each (16-bit inputs compute in fp32): 16384 columns,
# 8192 of fp64 or int64. Wider rows loop.
# Liger-Kernel keeps rows up to 65536 in one block; ptxas for sm_90, with the pointers aligned
# as Triton's launcher specializes them (tools/kernel_registers.py), gives layer_norm -> gelu
# no spills at 16384 columns in fp32 and bf16 (124 registers a thread at 16 warps, 64 at 32)
# and spills at 32768 (336 bytes in fp32 at 32 warps, the most warps a block has).
ONE_BLOCK_BYTES = 65536
# A layer norm keeps the row and its deviations from the mean: at 16384 columns of 16-bit
# inputs ptxas gives 113 registers a thread at 16 warps, one block an SM (16 of 64 warps),
# and on the H200 the column loop (32 registers, 64 of 64 warps, two passes) was faster:
# layer_norm*2 2048x16384 bf16 47.4 vs 57.7 us, layer_norm->gelu 1024x16384 bf16 43.5 vs
# 49.3 (benchmarks/panel_reasons.md). In fp32 the one block won (1024x16384: 42.0 us, the
# loop 45.5) and rms_norm's one block reached 94% of a copy at 16384 columns in 16 bits.
# Measured on layer_norm; group_norm and batch_norm_train hold the same row and deviations
# (the registry's `centered`) and follow it, unmeasured. Measured again after the cheaper
# 16-bit GELU (H100, 2026-12-06, benchmarks/one_block_probe.py): one block at 16 or 32 warps
# still 12-18% slower than the loop at 16384 columns (layer_norm->gelu 43.3 vs 37.7 us).
CENTERED_16BIT_ONE_BLOCK = 8192
# A reduction whose one block holds one value per element at a time (the registry's
# `holds_one_row`: softmax, whose exps take the row's place), that reads no other row-sized
# tensor, nor after the reduction a row value from before it, and whose rows are a multiple
# of 16 bytes (``kernel.with_max_block``) keeps rows up to twice as wide whole (32768 fp32
# columns), where they would otherwise loop; Liger-Kernel's softmax runs 32768 columns in
# one block of 32 warps.
# - Measured on an H100 (2026-12-06, benchmarks/RESULTS.md): softmax(x/8) 1024x32000 and
#   1024x32768 fp32 at 88% and 91% of a copy in this block, 84% in the column loop; Liger's
#   one block at ~94-95%.
# - Static (ptxas for sm_90, tools/kernel_registers.py, Triton 3.6 and 3.9): softmax(x/8) at
#   32768 columns spills nothing, 64 registers a thread at 32 warps in fp32, 49-51 in bf16
#   (110-115 and 95-98 at 16 warps); fp64 at 16384, 128 at 16 warps. log_softmax spills
#   there (76-84 bytes in fp32 at 32 warps, 48-56 in bf16), and so do softmax(x/8) times a
#   per-column weight in fp32 (112-168 bytes) and softmax(x/8) * x (84): none takes it.
# - Unmeasured: few such rows (one program each now, not a split row), 16-bit inputs.
ONE_ROW_BLOCK_BYTES = 2 * ONE_BLOCK_BYTES


def widest_one_block(element_bytes: int, holds_one_row: bool = False) -> int:
    """MAX_BLOCK for a reduction whose widest input or accumulator element has this many
    bytes: the widest row kept whole in one block (`holds_one_row`: by ONE_ROW_BLOCK_BYTES)."""
    budget = ONE_ROW_BLOCK_BYTES if holds_one_row else ONE_BLOCK_BYTES
    widest = max(1, budget // max(4, element_bytes))
    return 1 << (widest - 1).bit_length()  # the power of two at or above it
