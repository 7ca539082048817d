"""The user's Python file as the source mapper sees it: text, hash, AST, statement lookups.

Reads a file from disk once; answers which function and which simple statement
hold a line, where statements start and end (multi-line ones included), and
which names an expression reads. Writes nothing.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..ir.graph import METADATA_ATTRS, SHAPE_ATTRS, SHAPE_METHODS
from ..source_trees import parse_source

_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Uses of a name that need it bound: a read, and `del name` (UnboundLocalError too).
BOUND_USES = (ast.Load, ast.Del)


def bound_uses(tree: ast.AST) -> list[ast.Name]:
    """The names in `tree` that need a binding: reads, `del name`, and `name += ...`'s
    target (its context says Store, but it reads the name first)."""
    aug = {id(n.target) for n in ast.walk(tree) if isinstance(n, ast.AugAssign)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Name)
            and (isinstance(n.ctx, BOUND_USES) or id(n) in aug)]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Python ends a line at \n, \r\n or \r only; str.splitlines also splits at form feeds,
# vertical tabs and other separators the tokenizer reads as whitespace, which would shift
# every later line number.
_LINE_END = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")


def physical_lines(text: str) -> list[str]:
    """The file's lines as Python numbers them, each with its ending."""
    return [line for line in _LINE_END.split(text) if line]


@dataclass(frozen=True)
class Scope:
    """A function definition and its dotted name (`CausalSelfAttention.forward`)."""

    node: ast.FunctionDef | ast.AsyncFunctionDef = field(compare=False)
    qualname: str
    class_name: str | None
    start: int

    def __str__(self) -> str:
        return self.qualname

    def owned_by(self, module: object) -> bool:
        """`module`'s class is the scope's or inherits it (`class Net(ShuffleNetV2): pass`)."""
        return any(k.__name__ == self.class_name for k in type(module).__mro__)

    @property
    def receiver(self) -> str | None:
        """The name the module itself has here (a method's first parameter, `self`); None in
        a plain function, a staticmethod or a classmethod, which have no module instance (a
        staticmethod's first parameter is an argument: roberta's `input_ids`)."""
        kinds = {d.id for d in self.node.decorator_list if isinstance(d, ast.Name)}
        params = self.node.args.posonlyargs + self.node.args.args
        if not self.class_name or not params or kinds & {"staticmethod", "classmethod"}:
            return None
        return params[0].arg


@dataclass(frozen=True)
class Statement:
    """A simple statement with the body list that holds it (for adjacency checks)."""

    node: ast.stmt = field(compare=False)
    body: list[ast.stmt] = field(compare=False, repr=False)
    index: int  # position in `body`
    start: int
    end: int


@dataclass(frozen=True)
class SourceFile:
    path: str
    data: bytes = field(repr=False)

    @classmethod
    def read(cls, path: str | Path) -> SourceFile:
        return cls(str(path), Path(path).read_bytes())

    @cached_property
    def text(self) -> str:
        return self.data.decode("utf-8")

    @cached_property
    def digest(self) -> str:
        return sha256(self.data)

    @cached_property
    def lines(self) -> list[str]:
        """Lines with their endings, 0-based (line n is lines[n - 1])."""
        return physical_lines(self.text)

    @cached_property
    def tree(self) -> ast.Module:
        return parse_source(self.text, self.path)

    @cached_property
    def scopes(self) -> tuple[Scope, ...]:
        found: list[Scope] = []

        def walk(body: list[ast.stmt], prefix: str, cls: str | None) -> None:
            for st in body:
                if isinstance(st, ast.ClassDef):
                    walk(st.body, f"{prefix}{st.name}.", st.name)
                elif isinstance(st, _FUNCS):
                    found.append(Scope(st, f"{prefix}{st.name}", cls, st.lineno))
                    walk(st.body, f"{prefix}{st.name}.<locals>.", None)
                else:
                    for child in _bodies(st):
                        walk(child, prefix, cls)

        walk(self.tree.body, "", None)
        return tuple(found)

    def scope_at(self, line: int) -> Scope | None:
        """The innermost function whose body holds `line`."""
        best = None
        for s in self.scopes:
            if s.node.body[0].lineno <= line <= (s.node.end_lineno or 0):
                if best is None or s.start >= best.start:
                    best = s
        return best

    def statement_at(self, scope: Scope, line: int) -> Statement | None:
        """The innermost simple statement of `scope` (not of nested defs) holding `line`."""

        def search(body: list[ast.stmt]) -> Statement | None:
            for i, st in enumerate(body):
                if not st.lineno <= line <= (st.end_lineno or st.lineno):
                    continue
                if isinstance(st, _SIMPLE):
                    return Statement(st, body, i, st.lineno, st.end_lineno or st.lineno)
                if isinstance(st, (*_FUNCS, ast.ClassDef)):
                    return None
                for child in _bodies(st):
                    hit = search(child)
                    if hit is not None:
                        return hit
                return None
            return None

        return search(scope.node.body)

    def segment(self, node: ast.AST) -> str:
        """`ast.get_source_segment` on the lines split once: it splits the whole file per
        call, most of the matcher's time on a model with many layers (MobileNet's)."""
        end, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end is None or end_col is None:
            return ast.unparse(node)
        first, last, col = node.lineno - 1, end - 1, node.col_offset  # columns: UTF-8 bytes
        if first == last:
            text = self.lines[first].encode()[col:end_col].decode()
        else:
            text = (self.lines[first].encode()[col:].decode() + "".join(self.lines[first + 1:last])
                    + self.lines[last].encode()[:end_col].decode())
        return text or ast.unparse(node)

    def line_text(self, line: int) -> str:
        return self.lines[line - 1].rstrip("\r\n") if 0 < line <= len(self.lines) else ""


def _bodies(st: ast.stmt) -> list[list[ast.stmt]]:
    out = [getattr(st, k) for k in ("body", "orelse", "finalbody") if getattr(st, k, None)]
    out += [h.body for h in getattr(st, "handlers", [])]
    out += [c.body for c in getattr(st, "cases", [])]
    return out


def local_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Parameters and every name the function body assigns (loop targets included)."""
    a = func.args
    params = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    params += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    stored = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
    return frozenset(params) | stored


def loaded_names(expr: ast.AST, skip: Sequence[ast.AST] = ()) -> set[str]:
    """Names `expr` reads (or deletes), those inside the sub-expressions `skip` aside."""
    out, todo = set(), [expr]
    while todo:
        n = todo.pop()
        if any(n is s for s in skip):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, BOUND_USES):
            out.add(n.id)
        todo.extend(ast.iter_child_nodes(n))
    return out


def spliced(src: SourceFile, expr: ast.expr, texts: Sequence[tuple[ast.expr, str]]) -> str:
    """`expr`'s source with each (disjoint) sub-expression of `texts` replaced by its text."""
    def at(lineno: int, col: int) -> int:  # ast columns count UTF-8 bytes
        before = sum(len(t) for t in src.lines[: lineno - 1])
        return before + len(src.lines[lineno - 1].encode()[:col].decode())

    out, pos = [], at(expr.lineno, expr.col_offset)
    for part, text in sorted(texts, key=lambda t: (t[0].lineno, t[0].col_offset)):
        out += [src.text[pos:at(part.lineno, part.col_offset)], text]
        pos = at(part.end_lineno or part.lineno, part.end_col_offset or 0)
    out.append(src.text[pos:at(expr.end_lineno or expr.lineno, expr.end_col_offset or 0)])
    return "".join(out)


def reads_shape_only(expr: ast.AST, name: str) -> bool:
    """Every load of `name` in `expr` is a read of its shape: `h.shape`, `h.ndim`,
    `h.size(-1)`, `h.dim()`, `h.numel()` (``ir.graph.SHAPE_METHODS``: what ``ir/normalize.py``
    marks as shape reads)."""
    return metadata_read_only(expr, name) == ("shape",)


def metadata_read_only(expr: ast.AST, name: str) -> tuple[str, ...]:
    """What of `name` `expr` reads when every load of it reads only its shape, dtype or
    device (`("shape", "device")` for `torch.arange(h.shape[-1], device=h.device)`: what
    ``ir/normalize.py`` marks as shape and metadata reads); () when one reads its data."""
    kinds: dict[int, str] = {}
    for n in ast.walk(expr):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) \
                and n.value.id == name:
            if n.attr in SHAPE_ATTRS:
                kinds[id(n.value)] = "shape"
            elif n.attr in METADATA_ATTRS:
                kinds[id(n.value)] = n.attr
            elif n.attr in SHAPE_METHODS:
                kinds.update((id(n.value), "shape") for c in ast.walk(expr)
                             if isinstance(c, ast.Call) and c.func is n)
    loads = [n for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id == name
             and isinstance(n.ctx, ast.Load)]
    if not loads or any(id(n) not in kinds for n in loads):
        return ()
    read = set(kinds.values())
    return tuple(k for k in ("shape", *METADATA_ATTRS) if k in read)


# Verified on a mask sliced to `h.shape[-1]` (tests/test_shape_reads.py): read from `x`,
# the lines map exactly and --apply rewrites them.
READ_SHAPE_BEFORE = (" (only its shape: read that size from a value assigned before these "
                     "lines, such as an input's `.shape`, and they can be replaced)")


def read_before(kinds: tuple[str, ...]) -> str:
    """The refusal's hint when `kinds` (``metadata_read_only``) is all an input expression
    reads of a name the range reassigns; verified for `arange(h.shape[-1], device=h.device)`
    read from `x` (tests/test_device_reads.py)."""
    if kinds == ("shape",) or not kinds:
        return READ_SHAPE_BEFORE if kinds else ""
    said = " and ".join((", ".join(kinds[:-1]), kinds[-1])) if len(kinds) > 1 else kinds[0]
    attrs = " and ".join(f"`.{k}`" for k in kinds)
    return (f" (only its {said}: read {'them' if len(kinds) > 1 else 'it'} from a value "
            f"assigned before these lines, such as an input's {attrs}, and they can be "
            "replaced)")


def stored_names(st: ast.stmt) -> set[str]:
    targets: list[ast.AST] = []
    if isinstance(st, ast.Assign):
        targets = list(st.targets)
    elif isinstance(st, (ast.AnnAssign, ast.AugAssign)):
        targets = [st.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def last_store(func: ast.AST, name: str, line: int) -> ast.stmt | None:
    """The statement of `func` (not of a nested def or class) that last assigns `name`
    before `line`, or None."""
    stores = [st for st in ast.walk(func) if isinstance(st, ast.stmt)
              and not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
              and st.lineno < line and name in stored_names(st)]
    return max(stores, key=lambda st: st.lineno) if stores else None


_PURE = (ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Constant, ast.Tuple,
         ast.UnaryOp, ast.BinOp, ast.Load, ast.unaryop, ast.operator, ast.expr_context)


def is_plain_access(expr: ast.AST) -> bool:
    """Names, attributes, subscripts and slices of them: re-evaluating it computes nothing."""
    return all(isinstance(n, _PURE) for n in ast.walk(expr))


def enclosing_loop(scope: Scope, stmt: Statement) -> ast.stmt | None:
    """The innermost `for`/`while` of `scope` around `stmt`, if any."""
    best = None
    for n in ast.walk(scope.node):
        if isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and n is not stmt.node:
            if n.lineno < stmt.start and stmt.end <= (n.end_lineno or 0):
                if best is None or n.lineno > best.lineno:
                    best = n
    return best


def read_later(scope: Scope, stmts: Sequence[Statement], names: set[str]
               ) -> tuple[str, int] | None:
    """A read of `names` after the run `stmts` that may see the run's value.

    Straight-line reassignments end a name's life; in a loop or a nested block any
    other read counts.
    """
    loop = enclosing_loop(scope, stmts[0])
    if loop is None:
        live = set(names)
        last = stmts[-1]
        for st in last.body[last.index + 1:]:
            uses = [n for n in bound_uses(st) if n.id in live]
            if uses:  # the use's own line, inside a compound statement too
                first = min(uses, key=lambda n: (n.id, n.lineno))
                return first.id, first.lineno
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                live -= stored_names(st)
            if not live:
                return None
        if last.body is scope.node.body:
            return None
        names = live
    for n in bound_uses(scope.node):
        if (n.id in names and not stmts[0].start <= n.lineno <= stmts[-1].end
                and (loop is not None and n.lineno >= loop.lineno or n.lineno > stmts[-1].end)):
            return n.id, n.lineno
    return None
