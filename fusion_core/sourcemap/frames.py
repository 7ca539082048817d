"""Chains of user frames as the source map reads them (``SourceLoc.chain``, outermost
first), with the frames of wrappers that only hand a call on left out (``wrappers.py``:
a ``functools.wraps`` decorator, a forwarding ``__call__``), unless some graph op ran in the
wrapper's own code. Reads the files those frames lie in, once each, through the caller's
cache; ``callsite.py`` lifts a cluster's ops to the caller's line with them.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..ir.graph import Node, SourceLoc
from ..pipeline import Analysis
from .pysource import Scope, SourceFile
from .wrappers import forwards_at, is_wrapper


def pos(loc: SourceLoc) -> tuple[str, int]:
    return (loc.file, loc.line)


class Frames:
    """Scopes of frames, reading each file once (through the caller's cache), and the chains
    of frames with those of pass-through wrappers left out."""

    def __init__(self, files: dict[str, SourceFile], graph_nodes: Iterable[Node]) -> None:
        self.files = files
        self.scopes: dict[tuple[str, int], Scope | None] = {}
        self.graph_nodes = graph_nodes
        self.wrappers: dict[tuple[str, int], bool] = {}  # frame position -> in a wrapper
        self.passes: dict[tuple[str, int], bool] = {}  # frame position -> hands its call on
        self.chains: dict[int, tuple[SourceLoc, ...]] = {}  # by id of the node's SourceLoc
        self._opaque: set[tuple[str, str]] | None = None

    def scope(self, loc: SourceLoc) -> Scope | None:
        key = pos(loc)
        if key not in self.scopes:
            src = self.files.get(loc.file)
            if src is None:
                src = self.files.setdefault(loc.file, SourceFile.read(loc.file))
            self.scopes[key] = src.scope_at(loc.line)
        return self.scopes[key]

    def function(self, loc: SourceLoc) -> tuple[str, str] | None:
        scope = self.scope(loc)
        return None if scope is None else (loc.file, scope.qualname)

    def chain(self, loc: SourceLoc | None) -> tuple[SourceLoc, ...]:
        """`loc`'s frames, outermost first, without the wrapper frames that only hand the
        call on (`wrappers.py`): the caller's line then calls the wrapped function itself."""
        if loc is None:
            return ()
        hit = self.chains.get(id(loc))
        if hit is None:
            full = loc.chain
            hit = tuple(f for i, f in enumerate(full)
                        if i == len(full) - 1 or not self._passes_on(f))
            self.chains[id(loc)] = hit
        return hit

    def _passes_on(self, loc: SourceLoc) -> bool:
        key = pos(loc)
        if key not in self.passes:
            scope = self._wrapper_scope(loc)
            self.passes[key] = scope is not None and (
                forwards_at(self.files[loc.file], scope, loc.line)
                and (loc.file, scope.qualname) not in self._opaque_wrappers())
        return self.passes[key]

    def _wrapper_scope(self, loc: SourceLoc) -> Scope | None:
        """The wrapper function `loc` lies in; None for any other frame, or one whose file
        cannot be read (kept in the chain, as it always was)."""
        try:
            scope = self.scope(loc)
        except (OSError, SyntaxError, UnicodeDecodeError):
            return None
        key = pos(loc)
        if key not in self.wrappers:
            self.wrappers[key] = scope is not None and is_wrapper(self.files[loc.file], scope)
        return scope if self.wrappers[key] else None

    def _opaque_wrappers(self) -> set[tuple[str, str]]:
        """Wrappers that run graph ops of their own: some node ran in the wrapper's body
        (its innermost frame) or under a line of it other than the one call it hands on.
        Looking through them would leave those ops out of the call the caller's line makes."""
        if self._opaque is None:
            self._opaque = set()
            for node in self.graph_nodes:
                full = node.source.chain if node.source is not None else ()
                for i, f in enumerate(full):
                    scope = self._wrapper_scope(f)
                    if scope is not None and (i == len(full) - 1 or not forwards_at(
                            self.files[f.file], scope, f.line)):
                        self._opaque.add((f.file, scope.qualname))
        return self._opaque


def frames_of(analysis: Analysis, files: dict[str, SourceFile]) -> Frames:
    """The frames of `analysis`' graph, reading files through `files`: one map_clusters run
    lifts every cluster with them, so scopes, chains and wrapper verdicts are worked out once."""
    return Frames(files, analysis.graph.nodes)
