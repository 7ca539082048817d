"""The statements covering a cluster: the range of the user's source a rewrite would replace.

Reads an ``Analysis`` (a cluster's nodes, their ``SourceLoc``s, the FX graph's in-place
spellings) and the user's files (``SourceFile``, read once each); writes a ``Span``: the
file, the function and the run of whole statements holding every node of the cluster. Raises
``PointerOnly`` with the reason in words (and the lines, where known) when no such run
exists: the nodes lack source lines, lie in several files or functions (ops of a call of
the user's own module or helper that the cluster runs whole count at the call's line, see
``callsite.py``; the calls so lifted ride along in the ``Span``), in a library's
file, in a changed file, in different blocks, in two calls of one function (``two_calls.py``),
or share their lines with other code; or the cluster writes an input in place, makes values
from the index or leaves unstored a value another kernel recomputes (``unstored.py``). A
recomputing cluster's copies stand outside its range: ``recomputed.py`` finds their original
expression above it.
Whether the run computes exactly the cluster is ``match.py``'s question.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

import torch.fx as fx

from ..analysis.types import Cluster
from ..ir.graph import Node, OpKind
from ..ir.spelling import said
from ..ir.trace import is_library_file
from ..pipeline import Analysis
from .callsite import Lifted, LiftedCall, lift
from .frames import Frames
from .guard import Guard, blocks_reason, guarded_run
from .pysource import Scope, SourceFile, Statement
from .stated_calls import NestedCalls
from .two_calls import two_calls_reason
from .unliftable import Unliftable
from .unstored import unstored_reason

_NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}


@dataclass(frozen=True)
class Span:
    """The statements covering one cluster's nodes."""

    src: SourceFile
    scope: Scope
    stmts: tuple[Statement, ...]
    # Calls of the user's own modules or helpers on these lines that the cluster runs whole.
    calls: tuple[LiftedCall, ...] = ()
    # The caller's line spelling nested calls of this function, when the cluster's ops all
    # lie in it (`stated_calls.NestedCalls`): the reason if the lines turn out to run twice.
    nested: NestedCalls | None = None
    # The `if` on a module setting the run ends in (guard.py): the range runs to its end;
    # or, a tail guard, the one it starts in: the range starts at its line.
    guard: Guard | None = None
    # Sequentials (paths under `self`: "block") whose layers the lines index from the end
    # (`self.block[-1]`, from_end.py): their parameters are spelled so too.
    from_end: frozenset[str] = frozenset()

    @property
    def start(self) -> int:
        """The run's first line: its code's indentation, the top where its inputs are read."""
        return self.stmts[0].start

    @property
    def first_line(self) -> int:
        """The first line the edit replaces: the run's, or a tail guard's `if` line."""
        if self.guard is not None and self.guard.tail:
            return self.guard.node.lineno
        return self.start

    @property
    def end(self) -> int:
        if self.guard is not None and not self.guard.tail:  # the range runs to the `if`'s end
            return self.guard.end
        return self.stmts[-1].end

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.src.path, self.first_line, self.end)


class PointerOnly(Exception):
    """The cluster maps as a pointer: why, and where when known."""

    def __init__(self, reason: str, file: str | None = None, start: int | None = None,
                 end: int | None = None) -> None:
        super().__init__(reason)
        self.reason, self.file, self.start, self.end = reason, file, start, end


def count_words(n: int) -> str:
    """Small counts in words: "spans two files"."""
    return _NUMBERS.get(n, str(n))


def locate(analysis: Analysis, c: Cluster, frames: Frames,
           changed: frozenset[str] = frozenset(), stored: bool = False,
           paired: frozenset[str] = frozenset()) -> Span:
    """The run of statements covering `c`'s nodes; `frames` (``frames_of``) reads the
    analysis' frames through the cache of files read (the model's file as imported),
    `changed` names those the disk holds differently now.
    `stored`: `c` writes every value the graph reads from it (`as_stored`),
    so another cluster recomputing one of them asks no edit of that cluster: a cluster
    that recomputes is never edited itself, its own copies refuse it here. `paired`: values
    another kernel recomputes whose edit reads their operands (mapping.py pairs the two)."""
    nodes = [analysis.graph[n] for n in c.nodes]
    missing = [n.name for n in nodes if n.source is None]
    if missing:
        raise PointerOnly(f"no source line recorded for {said(analysis.graph, missing[0])}")
    # Ops inside a call the cluster runs whole stand at the call's line (callsite.py).
    partial: Unliftable | None = None
    try:
        lifted = lift(analysis, c, frames)
    except Unliftable as e:
        partial = e if e.site is not None else None
        lifted = Lifted({n.name: n.source for n in nodes})
    # A copy of a value another kernel computes is spelled where the original stands, above
    # the range; unify.py reads it there (recomputed.py).
    placed = [n for n in nodes if not n.copy_of] or nodes
    locs = [lifted.locs[n.name] for n in placed]
    paths = sorted({s.file for s in locs})
    lines = [s.line for s in locs]
    if partial is not None:  # the nodes lie in several functions and one call is half fused
        site_file, call_line = partial.site
        if is_library_file(site_file):  # no edit there either way: say why first
            _refuse_library(site_file, [call_line, *(s.line for s in locs if s.file == site_file)])
        raise PointerOnly(partial.reason, site_file, call_line, call_line)
    if len(paths) > 1:
        raise PointerOnly(f"spans {count_words(len(paths))} files ({', '.join(paths)})")
    where = dict(file=paths[0], start=min(lines), end=max(lines))
    if is_library_file(paths[0]):
        _refuse_library(paths[0], lines)
    _check_in_place(analysis, nodes, where)
    generator = next((n for n in nodes if n.kind is OpKind.GENERATOR), None)
    if generator is not None:
        shape = tuple(generator.meta.shape) if generator.meta is not None else ()
        raise PointerOnly(f"{said(analysis.graph, generator.name)} makes its values "
                       f"from the index; the kernel fixes its shape {shape} as analysed, and a "
                       "source edit would stop following the sizes your code computes",
                       **where)
    two_calls = two_calls_reason(analysis, nodes, lifted, frames)
    if two_calls is not None:
        raise PointerOnly(two_calls, **where)
    # A value another kernel recomputes is not stored by this one, yet the source reads its
    # variable at the recomputing kernel's lines: an edit here alone would drop it.
    recomputed = set(c.recomputes) if stored else {
        v for other in analysis.clusters for v in other.recomputes} - paired
    # A value computed again per slice inside this kernel alone leaves nothing unstored.
    names = {n.name for n in nodes}
    recomputed -= {n.copy_of for n in analysis.graph.nodes if n.copy_of in names
                   and n.name in names and not any(
                       m.copy_of == n.copy_of and m.name not in names
                       for m in analysis.graph.nodes)}
    shared = next((n for n in nodes if n.name in recomputed), None)
    if shared is not None:
        raise PointerOnly(unstored_reason(analysis, shared), **where)
    if placed is nodes and any(n.copy_of for n in nodes):  # copies alone: nothing to edit
        value = analysis.graph[nodes[0].copy_of]
        raise PointerOnly(f"{said(analysis.graph, value.name)} is computed by two "
                       "kernels (recomputed instead of stored); a source edit would have to "
                       "rewrite both together", **where)
    try:
        files = frames.files
        src = files.get(paths[0]) or files.setdefault(paths[0], SourceFile.read(paths[0]))
        src.tree  # noqa: B018 - parse now so a syntax error degrades this mapping only
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        raise PointerOnly(f"cannot read {paths[0]}: {e}", **where) from e
    if src.path in changed:
        raise PointerOnly("the file changed since it was traced (it no longer holds the code "
                       "that was imported): run fusion-advisor again", **where)
    stale = next((s for s in locs if s.code and src.line_text(s.line).strip() != s.code), None)
    if stale is not None:
        raise PointerOnly(f"the file changed since it was traced (line {stale.line} no "
                       f"longer reads `{stale.code}`)", **where)
    scopes = {line: src.scope_at(line) for line in lines}
    if None in scopes.values():
        line = next(k for k, v in scopes.items() if v is None)
        raise PointerOnly(f"line {line} is not inside a function", **where)
    # In execution order: the function of the cluster's first node comes first.
    first: dict[str, int] = {}
    for line in lines:
        first.setdefault(scopes[line].qualname, line)
    if len(first) > 1:
        named = ", ".join(f"`{q}` line {line}" for q, line in first.items())
        # One edit replaces one range of one function; a kernel whose ops run in a module's
        # forward and in a child's (or a helper's) would need both rewritten together.
        raise PointerOnly(f"spans {count_words(len(first))} functions ({named}): one edit replaces "
                       "lines of one function, so it is not rewritten; to rewrite it, move the "
                       "fused ops into one function", **where)
    scope = scopes[lines[0]]
    stmts = {line: src.statement_at(scope, line) for line in set(lines)}
    bad = sorted(line for line, st in stmts.items() if st is None)
    if bad:
        raise PointerOnly(f"line {bad[0]} is not a simple statement", **where)
    bodies = {id(st.body) for st in stmts.values()}
    guard = None
    if len(bodies) > 1:
        guarded = guarded_run(src, scope, list(stmts.values()))
        if guarded is None:
            raise PointerOnly(blocks_reason(src, scope, list(stmts.values())), **where)
        run, guard, body, lo, hi = guarded
    else:
        body = next(iter(stmts.values())).body
        lo = min(st.index for st in stmts.values())
        hi = max(st.index for st in stmts.values())
        run = tuple(Statement(st, body, i, st.lineno, st.end_lineno or st.lineno)
                    for i, st in enumerate(body) if lo <= i <= hi)
    span = Span(src, scope, run, lifted.calls, lifted.nested, guard)
    where = dict(file=src.path, start=span.first_line, end=span.end)
    for i, line in ((lo - 1, span.first_line), (hi + 1, span.end)):
        if 0 <= i < len(body) and body[i].lineno <= line <= (body[i].end_lineno or 0):
            raise PointerOnly(f"line {line} also holds `{src.segment(body[i])}`", **where)
    # The range must own its lines: nothing before it (`def f(x): return ...`, `if c: ...`)
    # and nothing but a comment after it.
    first = guard.node if guard is not None and guard.tail else run[0].node
    last = guard.node if guard is not None and not guard.tail else run[-1].node
    before = src.line_text(span.first_line)[:first.col_offset]
    after = src.line_text(span.end)[last.end_col_offset or 0:].strip()
    if before.strip() or (after and not after.startswith("#")):
        extra = before.strip() or after
        raise PointerOnly(f"the range's lines also hold `{extra}`", **where)
    return span


def _refuse_library(path: str, lines: list[int]) -> NoReturn:
    raise PointerOnly(f"{path} is an installed library's file, not your project's: edit the "
                      "code that calls it instead", path, min(lines), max(lines))


def _check_in_place(analysis: Analysis, nodes: list[Node], where: dict) -> None:
    """`y.relu_()` or `y += x` the pipeline rewrote out of place (ir/functionalize.py):
    unless the written tensor was a temporary, the source keeps using `y`, which the
    kernel's new tensor cannot rebind."""
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    members = {n.name for n in nodes}
    for node in nodes:
        spelling = fx_nodes[node.name].meta.get("fusion_inplace", "") \
            if node.name in fx_nodes else ""
        if spelling.startswith((".", "aten.")) and not _writes_a_temporary(
                fx_nodes[node.name], members):
            code = f"`{node.source.code}`" if node.source.code else spelling
            raise PointerOnly(f"{code} (line {node.source.line}) writes its input in place; the "
                           "kernel returns a new tensor, so an edit would have to rebind the "
                           "name every later line reads", **where)


def _writes_a_temporary(node: fx.Node, members: set[str]) -> bool:
    """The tensor an in-place op wrote (`(x * 2).relu_()`'s product) is read by nothing
    else in the graph, so no line can tell whether it was overwritten: a kernel that returns
    a new tensor instead computes the same model. A tensor from outside the cluster (a
    parameter: the caller's) counts only while the written values are read inside it alone:
    the capture points every later read of that tensor at the op's result (export does so
    in the caller too, where `torch.relu_(x)` in a block rectifies the caller's `h`), and
    the edit rebinds no name there."""
    written = node.args[0] if node.args else None
    if not (isinstance(written, fx.Node) and set(written.users) == {node}):
        return False
    return written.name in members or all(u.name in members for u in node.users)
