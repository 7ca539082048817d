"""Triton code generation: one standalone kernel file per cluster (see ``kernel.py``)."""

from .. import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
from .choices import Tuning
from .kernel import Kernel, generate, generate_all, load_kernel, write_kernels
from .layout import LoweringError
from .lower import KernelPlan, plan

__all__ = ["Kernel", "KernelPlan", "LoweringError", "Tuning", "generate", "generate_all",
           "load_kernel", "plan", "write_kernels"]
