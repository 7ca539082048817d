"""How wide a reduction's row may be for one block to keep it whole, by its element size.

Reads the element size of a reduction's widest input or accumulator; returns the widest row
(a power of two) one block holds in registers, and the narrower width above which a centered
norm of 16-bit inputs loops over column blocks instead. Chosen once, when a kernel file is
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
# (the registry's `centered`) and follow it, unmeasured.
CENTERED_16BIT_ONE_BLOCK = 8192


def widest_one_block(element_bytes: int) -> int:
    """MAX_BLOCK for a reduction whose widest input or accumulator element has this many
    bytes: the widest row kept whole in one block."""
    widest = max(1, ONE_BLOCK_BYTES // max(4, element_bytes))
    return 1 << (widest - 1).bit_length()  # the power of two at or above it
