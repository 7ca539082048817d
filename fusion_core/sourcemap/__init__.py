"""Source mapping: which lines each cluster replaces, the diff, and a guarded `--apply`."""

from .diff import print_diffs, render
from .mapping import EXACT, POINTER, SourceMapping, map_clusters

__all__ = ["EXACT", "POINTER", "SourceMapping", "map_clusters", "print_diffs", "render"]
