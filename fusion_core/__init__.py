"""fusion-advisor's public API (what the pytest plugin and other tools may import)."""

from . import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
from .analysis.types import Cluster, LineSpan, Rejection, TrafficEstimate
from .codegen import Kernel, LoweringError, generate, generate_all, load_kernel, write_kernels
from .errors import FusionAdvisorError
from .ir.shapes import InputSpec, parse_dtype
from .load import load_model
from .pipeline import Analysis, analyze
from .report.json_report import write_atomic
from .validate.measure import measure

__all__ = [
    "Analysis", "Cluster", "FusionAdvisorError", "InputSpec", "Kernel", "LineSpan",
    "LoweringError", "Rejection", "generate", "generate_all", "load_kernel", "write_kernels",
    "TrafficEstimate", "analyze", "load_model", "measure", "parse_dtype", "write_atomic",
]
