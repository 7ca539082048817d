"""Why a run of statements does not compute a cluster, and what each statement evaluates.

``unify.py`` walks the statements against the cluster's FX nodes and raises these; the
callers (``match.py``, ``parts.py``, ``unify_calls.py``) catch them to try a smaller part or
to word a pointer's reason. ``value_of``/``whole_value`` read the one expression a plain
statement of the run evaluates (`result += input` read as its sum: ``augmented.py``).
"""

from __future__ import annotations

import ast

from .augmented import augmented_value
from .pysource import SourceFile, Statement


class Mismatch(Exception):
    """The statements do not compute exactly the cluster; `str()` says why."""


class ContainerMismatch(Mismatch):
    """A call of a container (`self.stem(x)`) runs the cluster's layers and others too."""


class Reentered(Mismatch):
    """A name the lines read holds a value the cluster computes: the lines ran more than
    once inside the cluster (a loop, or nested calls of the function they lie in)."""


def value_of(st: ast.stmt, last: bool) -> ast.expr:
    """The expression a statement of the run evaluates (only plain forms fold into one call)."""
    if not last:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(
                st.targets[0], ast.Name):
            return st.value
        raise Mismatch(f"line {st.lineno} is not a plain `name = ...` assignment")
    if isinstance(st, ast.Assign) and len(st.targets) == 1:
        return st.value
    if isinstance(st, (ast.AnnAssign, ast.Return)) and st.value is not None:
        return st.value
    raise Mismatch(f"line {st.lineno} is not an assignment or a `return` of one value")


def whole_value(st: ast.stmt) -> ast.expr:
    """The value of the run's last statement, `result += input` read as its sum."""
    return augmented_value(st) or value_of(st, last=True)


_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
             ast.Match)


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _changed(st: ast.stmt) -> list[str]:
    """Names `st` may rebind or change in place: targets (`h = ...`, `h[i] = ...`,
    `h.data = ...`) and the receivers of in-place methods (`h.mul_(2.0)`)."""
    names = set()
    for n in ast.walk(st):
        if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(
                n.ctx, ast.Store):
            names.add(_root_name(n))
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and n.func.attr.endswith("_") and not n.func.attr.startswith("_")):
            names.add(_root_name(n.func.value))
    return sorted(names - {None, "_"})


def unused_statement(src: SourceFile, st: Statement) -> str:
    """Why a statement among the fused lines, matched to nothing, keeps them apart. A compound
    one is quoted by its first line, with what it may change: its body may run otherwise in
    another call (a branch the traced call did not take), and one kernel cannot run
    around it."""
    if isinstance(st.node, _COMPOUND):
        head = src.line_text(st.start).strip()
        changed = _changed(st.node)
        if changed:
            return (f"line {st.start} (`{head}`) lies between the fused lines and may change "
                    f"{', '.join(f'`{n}`' for n in changed)}: one kernel cannot run around it")
        return (f"line {st.start} (`{head}`) lies between the fused lines and computes "
                "nothing the cluster uses")
    return f"line {st.start} (`{src.segment(st.node)}`) computes nothing the cluster uses"
