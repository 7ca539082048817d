"""Match one cluster to the statements of a span: the source expression of each input.

Reads an ``Analysis`` (the cluster's nodes, the FX graph, the model) and a ``Span`` (the
statements ``span.py`` found, in the user's file); writes a ``Found`` per cluster (argument
expressions, baked constants, result names), or raises ``PointerOnly`` with the reason the
lines do not compute exactly the cluster. ``group_edit.py`` turns the matches into mappings.
"""

from __future__ import annotations

import ast
import contextlib
from dataclasses import dataclass, replace

from ..analysis.types import Cluster
from ..ir.spelling import said
from ..pipeline import Analysis
from .aliased import aliased_names
from .baked_names import rebound_baked
from .baked_params import param_baked
from .baked_sizes import size_baked
from .eval_settled import flag_reads
from .evaluated import runs_no_op, taken_by_enclosing
from .mismatch import ContainerMismatch, Mismatch, Reentered, whole_value
from .parts import fold_order, nesting, parts
from .pysource import Scope, local_names
from .recomputed import original_value
from .results import assigned_to, results, returned_tuple
from .span import PointerOnly, Span, count_words
from .unify_calls import CallUnifier


def self_path_of(analysis: Analysis, c: Cluster, scope: Scope) -> str | None:
    """The module path `self` stands for in `scope` (`blocks.0.attn`; "" for the root)."""
    if scope.class_name == type(analysis.module).__name__:
        return ""
    gm_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    for name in c.nodes:
        stack = gm_nodes[name].meta.get("nn_module_stack") or {}
        for path, cls in reversed(list(stack.values())):
            if getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1]) == scope.class_name:
                return path
    # A class that keeps the scope's method as its parent wrote it (`class Net(ShuffleNetV2):
    # pass`, or with an `__init__` of its own): the innermost module of such a class.
    for name in c.nodes:
        stack = gm_nodes[name].meta.get("nn_module_stack") or {}
        for path, _ in reversed(list(stack.values())):
            try:
                module = analysis.module.get_submodule(path)
            except AttributeError:
                continue
            if scope.owned_by(module):
                return path
    return "" if scope.owned_by(analysis.module) else None


def self_name_of(scope: Scope) -> str:
    return scope.receiver or "self"


@dataclass(frozen=True)
class Found:
    args: tuple[str, ...]  # source expression per cluster input, in `Cluster.inputs` order
    baked: tuple[str, ...]  # `self.scale = 0.17...`: values the kernel holds as constants
    targets: tuple[str, ...]  # names that receive the results before the last one
    inlined: frozenset[str] = frozenset()  # inputs computed by their argument expression
    within: ast.expr | None = None  # the part of the last statement the fused call replaces
    imports: tuple[str, ...] = ()  # lines the file must import for `args` (unbiased.py)
    # Conditions of `if`s among the lines this call skipped (skipped.py): the edit's kernel
    # runs where all are False.
    skipped: tuple[ast.expr, ...] = ()


def unify(analysis: Analysis, c: Cluster, span: Span, within: ast.expr | None = None,
          hidden: dict[int, tuple[str, ast.expr, str]] | None = None,
          at: tuple[tuple[ast.expr, str], ...] = ()) -> Found:
    """`c` matched to the span's value, to the part `within` of it, or, with `at`, each
    result to its own part (joint.py); `hidden`: parts read as another kernel's results."""
    if not c.outputs:  # detection keeps dead code out of clusters; never index past this
        raise PointerOnly("the cluster writes no result the model uses")
    # A part of the last statement leaves that statement in place: the earlier results go
    # to a line of their own (`parts.replace_part_results`), whatever the statement is.
    returned = at or (returned_tuple(c, span) if within is None else ())
    if (len(c.outputs) > 1 and within is None and not returned
            and not isinstance(span.stmts[-1].node, ast.Assign)):
        last = span.stmts[-1]
        raise PointerOnly(f"the cluster writes {count_words(len(c.outputs))} values "
                          f"({results(analysis, c)}) and line {last.start} "
                          f"(`{span.src.segment(last.node)}`) does not take them all: only "
                          "an assignment, or a `return` of exactly those values in that "
                          "order, can")
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    path = self_path_of(analysis, c, span.scope)
    try:
        unifier = CallUnifier(span.src, list(span.stmts), set(c.nodes), fx_nodes,
                              self_name_of(span.scope), path if path is not None else "\0",
                              local_names(span.scope.node), graph=analysis.graph,
                              calls=span.calls,
                              model=analysis.module, hidden=hidden,
                              from_end=span.from_end, receiver=span.scope.receiver)
        match = unifier.run(c.outputs[-1], within, returned)
        result = fx_nodes[c.outputs[-1]]
        if within is not None and not at and not taken_by_enclosing(
                span.stmts[-1].node, within, result, unifier.computes,
                lambda e: runs_no_op(e, unifier.self_name, unifier.child_path,
                                     fx_nodes.values())):
            # `F.relu(self.conv1(x))` inside `self.conv1(...)` matches the outer pass's
            # cluster too when `x` is read as the inner pass's result (evaluated.py).
            raise Mismatch(f"`{span.src.segment(within)}` at line {within.lineno} is not "
                           f"{said(analysis.graph, c.outputs[-1])}: the code around it "
                           "does not read that value")
    except Reentered as e:
        if span.nested is not None:  # the function's lines ran in nested calls of it
            raise PointerOnly(span.nested.reason, span.nested.file,
                              span.nested.line, span.nested.line) from e
        raise PointerOnly(str(e)) from e
    except ContainerMismatch as e:
        raise InContainer(str(e)) from e
    except Mismatch as e:
        if returned:
            raise PointerOnly(f"line {span.stmts[-1].start} returns "
                              f"`{span.src.segment(span.stmts[-1].node.value)}`, which is not "
                              f"the kernel's {count_words(len(c.outputs))} results in its "
                              f"order ({results(analysis, c)}): {e}") from e
        raise PointerOnly(str(e)) from e
    aliased = aliased_names(span.scope.node, span.stmts[0].node, unifier.bound)
    if aliased is not None:
        raise PointerOnly(aliased)
    # A slice's copy of its producer, a cat's repeated operand: the source's one value,
    # matched once for both.
    g = analysis.graph
    found = {original_value(g, n) for n in match.matched if n in g}
    missing = [n for n in c.nodes if n not in match.matched and original_value(g, n) not in found]
    if missing:
        raise PointerOnly(f"{said(analysis.graph, missing[0])} is not computed on these lines")
    texts = dict(match.inputs)
    # Sizes a view reads (`B` of `reshape(B, T, C)`): run_sizes proved the kernel's view
    # gives them from its inputs, so the call needs none of them.
    fed = {r for n in c.nodes for r in analysis.graph[n].refs}
    extra = sorted(n for n in set(texts) - set(c.inputs)
                   if n not in analysis.graph or analysis.graph[n].op != "meta" or n in fed)
    if extra:
        raise PointerOnly(f"the lines read `{texts[extra[0]]}`, which the cluster does not take")
    absent = [n for n in c.inputs if n not in texts]
    if absent:
        raise PointerOnly(f"input {said(analysis.graph, absent[0])} has no expression in the "
                          f"source at line {span.start}")
    sized = size_baked(span.scope.node, span.start, match.baked, span.src.segment)
    passed = param_baked(span.scope.node, span.scope.receiver, span.start, match.baked,
                         span.src.segment)
    assumes = set(match.assumes)  # flags eval mode reads False: the edit's guard tests them
    rebound = rebound_baked(span.scope.node, span.src.tree, span.start, match.baked,
                            span.src.segment, span.scope.receiver, assumes)
    for text, _ in match.baked:  # a value the kernel holds, computed from a flag
        with contextlib.suppress(SyntaxError):
            assumes |= flag_reads(ast.parse(text, mode="eval").body, span.scope.receiver)
    if sized is not None or passed is not None or rebound is not None:
        raise PointerOnly(sized or passed or rebound)
    held = dict(match.baked)
    # `self.training = False` among the values held: train_mode.py guards the edit with it
    baked = tuple(f"{text} = {value!r}" for text, value in (
        *match.baked, *((f, False) for f in sorted(assumes) if f not in held)))
    names = () if returned else assigned_to(analysis, c, span, match.values,  # all returned
                                            within)
    return Found(tuple(texts[n] for n in c.inputs), baked, names, match.inlined, within,
                 match.imports, match.skipped)


class InContainer(PointerOnly):
    """The lines call a container (`self.stem(x)`) that runs the cluster's layers and others."""


def unify_part(analysis: Analysis, span: Span, group: list[Cluster],
               why: list[PointerOnly] | None = None) -> list[Found] | None:
    """The group's match to a part of the last statement (`self.proj(<cluster>)`), if one
    part computes exactly the cluster's last result (earlier ones are assigned above it).
    `why` collects the refusals that name a container call, the likelier cause."""
    for part in parts(span):
        try:
            return [unify(analysis, c, span, part) for c in group]
        except InContainer as e:
            if why is not None:
                why.append(e)
        except PointerOnly:
            continue
    return None


Piece = tuple[list[Cluster], list[Found]]  # clusters one call serves, their matches


def unify_parts(analysis: Analysis, span: Span, group: list[Cluster]) -> list[Piece] | None:
    """Clusters that each compute their own part of the last statement (`F.gelu(a * 2.0)`
    and `torch.tanh(b + 1.0)` in `self.p(F.gelu(a * 2.0)) @ torch.tanh(b + 1.0)`), grouped
    by that part, in source order; None when some cluster computes none of its parts. A
    part inside another's argument, or on a line above whose value another's argument
    inlines (layers of a Sequential spelled one by one), is written in that call
    (``parts.nest_parts``). Raises ``PointerOnly`` when one cluster's part holds another's
    otherwise."""
    try:
        candidates = [(p, span) for p in (whole_value(span.stmts[-1].node),
                                           *parts(span))]
    except Mismatch:
        return None
    for k in range(len(span.stmts) - 1):  # earlier lines: only inside a later call's argument
        sub = replace(span, stmts=span.stmts[:k + 1])
        try:
            candidates += [(p, sub) for p in (whole_value(sub.stmts[-1].node), *parts(sub))]
        except Mismatch:
            continue
    by_part: dict[int, tuple[ast.expr, list[Cluster], list[Found], Span]] = {}
    for c in group:
        # Clusters of the same lines in other calls most likely match a part found already.
        order = [*((p, at) for p, _, _, at in by_part.values()), *candidates]
        for part, at in order:
            try:
                f = unify(analysis, c, at, part)
            except PointerOnly:
                continue
            _, cs, found, _ = by_part.setdefault(id(part), (part, [], [], at))
            cs.append(c)
            found.append(f)
            break
        else:
            return None
    if len(by_part) < 2:
        return None
    held = sorted(by_part.values(), key=lambda e: (e[0].lineno, e[0].col_offset))
    src = span.src
    segments = [src.segment(part) for part, _, _, _ in held]
    inner = [all(not f.targets for f in found) for _, _, found, _ in held]  # one result
    nest = nesting(segments, [found[0].args if inner[k] else [] for k, (_, _, found, _)
                              in enumerate(held)])
    nest = {k: h for k, h in nest.items() if inner[k] and all(
        sum(a.count(segments[k]) for a in f.args) == 1 for f in held[h][2])}
    if fold_order(nest) is None or any(
            k not in nest for k, (_, _, _, at) in enumerate(held) if at is not span):
        return None
    for o, (outer, o_cs, _, _) in enumerate(held):
        for k, (part, i_cs, _, _) in enumerate(held):
            if k != o and k not in nest and any(n is part for n in ast.walk(outer)):
                raise PointerOnly(
                    f"cluster {i_cs[0].index} computes `{segments[k]}`, inside "
                    f"`{segments[o]}`, which cluster {o_cs[0].index} computes (line "
                    f"{part.lineno}): the outer call would take the inner one's result as an "
                    "argument, which one edit of the line does not write yet")
    return [(cs, found) for _, cs, found, _ in held]
