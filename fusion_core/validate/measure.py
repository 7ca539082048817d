"""`measure(analysis)`: the GPU timings the pytest plugin gates on (None without CUDA).

Reads an ``Analysis``; runs the four gates (``validate``) and returns the plugin's dict:
``{"device": {...}, "clusters": [{"index", "kernel_us": [...], "eager_us": [...], "gbps",
"regime", "usable"}], "model": {"fused_us": [...], "eager_us": [...]}}``, every timing a list
of repeated do_bench medians in microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..pipeline import Analysis
from .kernels import kernel_set
from .report import measure_dict
from .run import KernelProvider, validate

if TYPE_CHECKING:
    from ..codegen import Kernel


def measure(analysis: Analysis, provider: KernelProvider | None = None,
            peak_gbps: float | None = None, kernels: Mapping[int, Kernel] | None = None,
            failed: Mapping[int, str] | None = None) -> dict[str, Any] | None:
    """`kernels`/`failed`: the analysis' kernels (and why the others have none) the caller
    already generated, so none is generated again; None generates them here."""
    if not torch.cuda.is_available():
        return None
    given = None if kernels is None else kernel_set(kernels, failed or {})
    report = validate(analysis, provider, kernels=given, peak_gbps=peak_gbps)
    return measure_dict(report, tuple(torch.cuda.get_device_capability()))
