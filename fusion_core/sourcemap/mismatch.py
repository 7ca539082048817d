"""Why a run of statements does not compute a cluster, and what each statement evaluates.

``unify.py`` walks the statements against the cluster's FX nodes and raises these; the
callers (``match.py``, ``parts.py``, ``unify_calls.py``) catch them to try a smaller part or
to word a pointer's reason. ``value_of``/``whole_value`` read the one expression a plain
statement of the run evaluates (`result += input` read as its sum: ``augmented.py``).
"""

from __future__ import annotations

import ast

from .augmented import augmented_value


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
