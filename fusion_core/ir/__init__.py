"""Capture and IR: load → trace → shapes → normalized FusionGraph."""

from .. import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
