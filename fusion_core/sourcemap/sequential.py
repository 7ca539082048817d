"""Calls of an `nn.Sequential` whose layers a cluster fuses, spelled layer by layer.

Reads an ``Analysis`` and a ``Span`` whose lines call a Sequential of the model
(`x = self.stem(x)`) holding some of a cluster's ops; writes a ``Span`` over a copy of the
file's text in which each such call is unrolled: `self.stem[3:](self.stem[2](self.stem[1](
self.stem[0](x))))` computes what `self.stem(x)` does (`Sequential.forward` chains its
layers, and indexing or slicing it returns those same layers), and names each layer, so
the matcher (``unify.py``) can replace the cluster's layers by the fused call and keep the
others as its argument or around it; several clusters of one call each replace their
layers, the earlier one's call the later one's argument (``parts.nest_parts``). A Sequential
inside one unrolls in turn; blocks whose Sequentials hold other numbers of layers before
the clusters' ones spell them from the end (`self.block[-1]`, ``from_end.py``). An
`nn.Sequential` is unrolled, or a subclass of any file that
keeps its forward, indexing and length (torchvision's `Conv2dNormActivation`): a subclass
with its own forward stays a pointer (``container.py`` says why a call is no edit).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

import torch.fx as fx
from torch import nn

from ..analysis.types import Cluster
from ..ir.bias_split import hooked
from ..pipeline import Analysis
from .from_end import module_at
from .guard import holds_in
from .pyexpr import module_attr_text, module_chain, module_path
from .pysource import SourceFile, Statement
from .span import Span

_PASSES = 8  # Sequentials nested this deep unroll; deeper ones stay as written


@dataclass(frozen=True)
class Unrolled:
    span: Span  # over the unrolled text; same lines, same statements
    spelled: tuple[tuple[str, int, str], ...]  # (call as written, line, as unrolled)

    def reason(self, why: str) -> str:
        """Why the unrolled lines are still no edit, saying what was unrolled."""
        text, line, unrolled = self.spelled[0]
        return f"with `{text}` (line {line}) spelled as its layers, `{unrolled}`: {why}"


def _own(path: str, where: str | None) -> str | None:
    """The child of module `path` that module path `where` lies in (`stem.2.act` → "2")."""
    if not where or not where.startswith(path + "."):
        return None
    return where[len(path) + 1:].split(".")[0]


def _where(node: fx.Node) -> str | None:
    return str(node.target) if node.op == "call_module" else module_path(node)


def unrollable(container: nn.Module) -> bool:
    """An `nn.Sequential` that runs, indexes and counts its layers as torch's own does: a
    subclass that only builds them (torchvision's `Conv2dNormActivation`, of any file)
    computes `c(x)` as `c[1](c[0](x))`. Hooks on the container itself would not run when
    its layers are called one by one, so a container with hooks is not unrolled."""
    return (isinstance(container, nn.Sequential) and _own_method(type(container)) is None
            and hooked(container) is None)


def _own_method(cls: type) -> str | None:
    """The first of Sequential's methods that unrolling relies on which `cls` redefines."""
    return next((name for name in ("forward", "__getitem__", "__iter__", "__len__")
                 if getattr(cls, name) is not getattr(nn.Sequential, name)), None)


def _layers(path: str, nodes: list[fx.Node]) -> list[int]:
    found = {int(k) for n in nodes if (k := _own(path, _where(n))) is not None and k.isdigit()}
    return sorted(found)


def _callees(func: str, spelled: list[int], n: int | None, sliceable: bool) -> list[str]:
    """Sequential `func` (of n layers; None: of several lengths, all past `spelled`) as
    calls, outermost first: the layers in `spelled` one by one, each run of others between
    them as one slice (`[:2]`, `[3:5]`, `[4:]`). A subclass's slice would call its
    constructor with the layers (`Stem(OrderedDict)`, `Sequential.__getitem__`), so there
    every layer goes by its index. Positions counted from the end (`[-1]`, from_end.py)
    take the layers before them, however many, as one open slice (`[:-1]`)."""

    def gap(k: int, i: int, last: bool) -> list[str]:  # layers k..i-1
        if i - k == 1 or (i > k and not sliceable):
            return [f"{func}[{j}]" for j in range(k, i)]
        return [f"{func}[{k or ''}:{'' if last else i}]"] if i > k else []

    calls, k = [], 0
    if spelled[0] < 0:
        calls, k = [f"{func}[:{spelled[0]}]"], spelled[0]
    for i in spelled:
        calls += [*gap(k, i, False), f"{func}[{i}]"]
        k = i + 1
    if spelled[-1] < 0:
        return ([f"{func}[{k}:]"] if k < 0 else []) + calls[::-1]
    calls += [f"{func}[{k}:]"] if n is None else gap(k, n, True)  # None: however many
    return calls[::-1]


def _build(m: nn.Module) -> tuple:
    """How a layer is built, sizes aside (the launcher checks those at each call): each
    submodule's class and its scalar settings (`eps`, `negative_slope`, `inplace`)."""
    return tuple((type(sub), tuple(sorted(
        (k, v) for k, v in vars(sub).items()
        if not k.startswith("_") and k != "training" and isinstance(v, (bool, float, str)))))
        for sub in m.modules())


def _built_alike(container: nn.Module, other: nn.Module, spelled: tuple[int, ...]) -> bool:
    """`container`'s layers at the `spelled` positions (negative: from the end) are built
    as `other`'s are."""
    return all(-len(container) <= k < len(container) for k in spelled) and all(
        _build(container[k]) == _build(other[k]) for k in spelled)


def _arrangements(call: str, line: int, calls: int,
                  plans: dict[tuple[tuple[int, ...], int], str], note: str = "") -> str:
    """Why one spelling of `call` serves not every call of its line: where each holds the
    clusters' layers, of how many (one example module per arrangement); `note`: why
    counting them from the end does not serve either."""
    shown = "; ".join(
        f"`{module_attr_text('self', '', full)}`: " + (
            f"clusters in layer{'s' if len(spelled) > 1 else ''} "
            f"{', '.join(str(k + n if k < 0 else k) for k in spelled)} of {n}"  # from 0
            if spelled else f"no cluster in {n} layers")
        for (spelled, n), full in list(plans.items())[:3])
    return (f"line {line} runs `{call}` in {calls} calls whose Sequentials differ ({shown}"
            f"{'; …' if len(plans) > 3 else ''}): one edit of the "
            f"line, spelled layer by layer, cannot serve them all{note}. To apply, give each "
            "arrangement of layers a module class of its own")


def _not_last(ends: dict[str, tuple[int, ...]]) -> str:
    """Where the clusters' layers are the last ones of some Sequentials and not of others
    (positions counted from the end): the note naming one of each."""
    last = [full for full, spelled in ends.items() if spelled[-1] == -1]
    other = [full for full, spelled in ends.items() if spelled[-1] != -1]
    if not last or not other:
        return ""
    return (f", counted from the start or from the end (the clusters' layers are the last "
            f"ones in `{module_attr_text('self', '', last[0])}` but not in "
            f"`{module_attr_text('self', '', other[0])}`)")


class _Pass:
    """One level of unrolling over the span's statements."""

    def __init__(self, analysis: Analysis, span: Span, group: list[Cluster],
                 self_paths: list[str], self_name: str) -> None:
        self.analysis, self.span, self.group = analysis, span, group
        self.self_paths, self.self_name = self_paths, self_name
        self.fx = {n.name: n for n in analysis.graph_module.graph.nodes}
        self.why: str | None = None  # why a call holding clusters is not unrolled
        self.from_end: set[str] = set()  # containers (under `self`) spelled from the end
        # Every module the function's `self` may be: the edit runs in all of them, those
        # whose clusters lie elsewhere too (EfficientNet's first block has no expand layer).
        self.instances = sorted({p for p, m in analysis.module.named_modules() if
                                 span.scope.owned_by(m)} | set(self_paths))
        if span.guard is not None:  # the `else` branch runs where the `if` fails, unrolled
            # or not: only the modules where it holds constrain the spelling
            guard, model = span.guard, analysis.module
            kept = [k for k, p in enumerate(self_paths)
                    if holds_in(guard, span.scope, model.get_submodule(p))] or list(
                        range(len(self_paths)))  # none: the caller's refusal stands
            self.group = [group[k] for k in kept]
            self.self_paths = [self_paths[k] for k in kept]
            self.instances = [p for p in self.instances
                              if holds_in(guard, span.scope, model.get_submodule(p))]
        self.frames = []  # per graph op: the modules it ran in, the (file, line)s it passed
        for n in analysis.graph_module.graph.nodes:
            loc = analysis.graph[n.name].source if n.name in analysis.graph else None
            if loc is not None:
                stack = (n.meta.get("nn_module_stack") or {}).values()
                self.frames.append(({v[0] if isinstance(v, tuple) else str(v) for v in stack},
                                    {(f.file, f.line) for f in loc.chain}))

    def runs(self, p: str, lines: range) -> bool:
        """Whether module `p` ran `lines` of the function (one of its ops passed them):
        ShuffleNet's blocks of stride 1 never call their empty `self.branch1`."""
        here = {(self.span.src.path, line) for line in lines}
        return p in self.self_paths or any(
            (not p or p in paths) and not here.isdisjoint(passed) for paths, passed in self.frames)

    def callees(self, call: ast.expr, lines: range) -> list[str] | None:
        """What `call` becomes, when it calls an unrollable Sequential holding cluster ops."""
        if not (isinstance(call, ast.Call) and len(call.args) == 1 and not call.keywords
                and not isinstance(call.args[0], ast.Starred)
                and call.func.lineno == call.func.end_lineno):
            return None
        chain = module_chain(call.func)
        if len(chain) < 2 or chain[0] != self.self_name:
            return None
        # Per module `self` stands for: its container's length and, for each cluster of
        # the group run there, the first and last of the container's layers it fuses.
        held: dict[str, tuple[nn.Module, list[tuple[int, int]]]] = {}
        model = self.analysis.module
        for c, p in zip(self.group, self.self_paths, strict=True):
            found = module_at(model, [*p.split("."), *chain[1:]])
            if found is None:
                return None
            full, container = found
            ranges = held.setdefault(full, (container, []))[1]
            layers = _layers(full, [self.fx[n] for n in c.nodes if n in self.fx])
            if layers:  # another call of the line may hold the cluster (`self.branch1(x)`)
                ranges.append((layers[0], layers[-1]))
        spelled = self.plan(call, held)
        if spelled is None:
            return None
        shapes = {}  # (length, plain nn.Sequential) of each module's container
        running = [p for p in self.instances if self.runs(p, lines)]
        for p in running:
            found = module_at(model, [*p.split("."), *chain[1:]])
            if found is None:
                continue  # the line does not run there
            full, container = found
            if not unrollable(container):
                return None
            if full not in held and not _built_alike(container, held[next(iter(held))][0],
                                                     spelled):
                # it runs the line, its layers in none of the clusters, built otherwise (an
                # Identity where the clusters' instance has SiLU): the edit would run the
                # kernels there too. Built alike (EfficientNet's first block, whose layer 0
                # fused into the next kernel instead), the same kernels compute its layers.
                self.why = _arrangements(self.span.src.segment(call), call.lineno,
                                         len(running), {(spelled, len(held[k][0])): k
                                                        for k in list(held)[:1]}
                                         | {((), len(container)): full})
                return None
            shapes.setdefault((len(container), type(container) is nn.Sequential), full)
        ((n, sliceable), *others) = shapes
        # other lengths: the layers after the last spelled one as an open slice, or, counted
        # from the end, those before the first
        if others or spelled[0] < 0:
            if not all(plain and (size > spelled[-1] if spelled[0] >= 0 else size >= -spelled[0])
                       for size, plain in shapes):
                self.why = _arrangements(self.span.src.segment(call), call.lineno,
                                         len(running), {
                                             (spelled, size): full
                                             for (size, _), full in shapes.items()})
                return None
            n = None
        if spelled[0] < 0:
            self.from_end.add(".".join(chain[1:]))
        return _callees(self.span.src.segment(call.func), list(spelled), n, sliceable)

    def plan(self, call: ast.Call, held: dict[str, tuple[nn.Module, list[tuple[int, int]]]]
             ) -> tuple[int, ...] | None:
        """The layers to spell, one position for every module of `held` (its container, the
        clusters' layer ranges there): counted from the start, or from the end where the
        Sequentials have other numbers of layers before them (MobileNetV3's blocks with and
        without an expand layer); None, with `why` set when they differ both ways."""
        plans: dict[tuple[tuple[int, ...], int], str] = {}  # (layers, of how many): a module
        ends: dict[str, tuple[int, ...]] = {}
        for full, (container, ranges) in held.items():
            if not ranges:
                return None
            spelled = tuple(sorted({k for i, j in ranges for k in range(i, j + 1)}))
            plans.setdefault((spelled, len(container)), full)
            ends[full] = tuple(k - len(container) for k in spelled)
        if len({spelled for spelled, _ in plans}) == 1:
            return next(iter(plans))[0]
        if len(set(ends.values())) == 1:  # the line's other calls run other layers, the
            return next(iter(ends.values()))  # same ones counted from the end
        self.why = _arrangements(self.span.src.segment(call), call.lineno, len(held), plans,
                                 _not_last(ends))
        return None

    def run(self) -> tuple[Span, list[tuple[str, int, str]]] | None:
        src = self.span.src
        starts = [0]
        for line in src.lines:
            starts.append(starts[-1] + len(line.encode()))

        def at(lineno: int, col: int) -> int:  # ast columns count UTF-8 bytes
            return starts[lineno - 1] + col

        edits: list[tuple[int, int, str]] = []
        spelled = []
        for st in self.span.stmts:
            for call in ast.walk(st.node):
                callees = self.callees(call, range(st.start, st.end + 1))
                if callees is None:
                    continue
                func = call.func
                head = "".join(f"{c}(" for c in callees[:-1]) + callees[-1]
                tail = ")" * (len(callees) - 1)
                edits.append((at(func.lineno, func.col_offset),
                              at(func.end_lineno, func.end_col_offset), head))
                edits.append((at(call.end_lineno, call.end_col_offset),) * 2 + (tail,))
                args = src.segment(call)[len(src.segment(func)):]
                spelled.append((src.segment(call), call.lineno, head + args + tail))
        if not edits:
            return None
        data = src.data
        for lo, hi, text in sorted(edits, key=lambda e: e[0], reverse=True):
            data = data[:lo] + text.encode() + data[hi:]
        return _respan(self.span, SourceFile(src.path, data), self.from_end), spelled


def _respan(span: Span, src: SourceFile, from_end: set[str]) -> Span:
    """`span`'s statements in `src`, the same text but for calls spelled otherwise."""
    scope = next(s for s in src.scopes
                 if (s.qualname, s.start) == (span.scope.qualname, span.scope.start))
    stmts: list[Statement] = []
    for st in span.stmts:
        found = src.statement_at(scope, st.start)
        if found is None or (found.start, found.end, found.index) != (st.start, st.end, st.index):
            raise SyntaxError(f"line {st.start} changed its statement when unrolled")
        stmts.append(found)
    # Unrolling rewrites calls inside statements only: the `if`'s lines and columns stay.
    guard = span.guard if span.guard is None or span.guard.otherwise is not None else replace(
        span.guard, otherwise=span.guard.written(span.src, span.first_line, span.end))
    return Span(src, scope, tuple(stmts), span.calls, span.nested, guard,
                span.from_end | from_end)


def unrolled(analysis: Analysis, span: Span, group: list[Cluster], self_paths: list[str],
             self_name: str) -> Unrolled | str | None:
    """`span` with every call of a Sequential holding the group's ops spelled layer by
    layer (`self_paths`: the module each cluster's `self` is); None when none is, or why
    not when the line's calls hold the clusters in other layers."""
    spelled: list[tuple[str, int, str]] = []
    current = span
    try:
        for _ in range(_PASSES):
            unroll = _Pass(analysis, current, group, self_paths, self_name)
            done = unroll.run()
            if done is None:
                if not spelled and unroll.why is not None:
                    return unroll.why
                break
            current, more = done
            spelled = spelled or more  # the outermost calls, as the user wrote them
    except SyntaxError:
        return None
    return Unrolled(current, tuple(spelled)) if spelled else None
