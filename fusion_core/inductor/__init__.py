"""What Inductor fused for a model (``capture``) and how it compares with our clusters
(``match``): used by ``--vs-inductor`` and ``python -m fusion_core.agreement``."""

from .. import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
from .capture import InductorCapture, InductorError, InductorKernel, InductorNode, capture
from .match import Agreement, ClusterVerdict, KernelMatch, match, to_dict

__all__ = ["Agreement", "ClusterVerdict", "InductorCapture", "InductorError", "InductorKernel",
           "InductorNode", "KernelMatch", "capture", "match", "to_dict"]
