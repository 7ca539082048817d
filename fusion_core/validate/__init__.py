"""Validation: the four gates (cluster numerics, model numerics, benchmark, bandwidth)."""

from .. import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
from .run import LoadedKernel, codegen_provider, use_interpreter_without_cuda, validate
from .types import (
    GATES,
    GateResult,
    ModelCheck,
    ModelTiming,
    Timing,
    ValidationReport,
    ValidationResult,
)

__all__ = [
    "GATES", "GateResult", "LoadedKernel", "ModelCheck", "ModelTiming", "Timing",
    "ValidationReport", "ValidationResult", "codegen_provider", "use_interpreter_without_cuda",
    "validate",
]
