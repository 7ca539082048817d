"""Without CUDA, Triton runs kernels only through its interpreter, and it reads
TRITON_INTERPRET when `triton` is first imported (its own @jit helpers are decorated then).
torch.export and torch.compile import triton, so the flag is set as fusion_core loads,
before any capture; a user's explicit setting wins."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
