"""`measure(analysis)`: the GPU timings the pytest plugin gates on (None without CUDA).

Reads an ``Analysis``; runs the four gates (``validate``) and returns the plugin's dict:
``{"device": {...}, "clusters": [{"index", "kernel_us": [...], "eager_us": [...], "gbps",
"regime", "usable"}], "model": {"fused_us": [...], "eager_us": [...]}}``, every timing a list
of repeated do_bench medians in microseconds.
"""

from __future__ import annotations

from typing import Any

import torch

from ..pipeline import Analysis
from .report import measure_dict
from .run import KernelProvider, validate


def measure(analysis: Analysis, provider: KernelProvider | None = None,
            peak_gbps: float | None = None) -> dict[str, Any] | None:
    if not torch.cuda.is_available():
        return None
    report = validate(analysis, provider, peak_gbps=peak_gbps)
    return measure_dict(report, tuple(torch.cuda.get_device_capability()))
