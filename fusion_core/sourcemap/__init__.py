"""Source mapping: which lines each cluster replaces, the diff, and a guarded `--apply`."""

from .. import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
from .diff import print_diffs, render
from .mapping import map_clusters
from .source_mapping import EXACT, POINTER, MapQuality, SourceMapping

__all__ = ["EXACT", "POINTER", "MapQuality", "SourceMapping", "map_clusters", "print_diffs",
           "render"]
