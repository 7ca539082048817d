"""How the plugin built a test's model: the factory it called and its keyword arguments.

Reads what the test gave the marker or ``analyze()`` (a class, a factory function, a
``functools.partial`` or a ``file.py:NAME`` string, with ``model_kwargs``); returns a
``Construction`` of plain values, which a baseline records as ``model_kwargs`` (and
``factory`` when something other than the model's own class built it), and says in one
line what differs between the baseline's and this run's. A value that is not plain data
(str, int, float, bool, None, lists and str-keyed dicts of them) is recorded by its repr,
without memory addresses (a class or function by its dotted name), so the same argument
reads the same on every run. A model passed already built has no construction (None),
nor has a baseline written before it was recorded: neither says anything.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .snapshot import Snapshot

MAX_REPR = 120  # a tensor's repr would fill the file: its head names it well enough
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # differs on every run


@dataclass(frozen=True)
class Construction:
    # What built the model when not its own class ("make_moe", "MoE(8)" for a partial with
    # positional arguments); "" for the class named in the snapshot's `model`.
    factory: str
    kwargs: tuple[tuple[str, Any], ...]  # (name, plain value), sorted by name

    def data(self) -> dict[str, Any]:
        """The YAML fields, in the baseline's key order."""
        return {**({"factory": self.factory} if self.factory else {}),
                "model_kwargs": dict(self.kwargs)}


def plain(value: Any) -> Any:
    """`value` as YAML-safe data that reads back equal; its repr when it is no plain data."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (list, tuple):
        return [plain(x) for x in value]
    if type(value) is dict and all(type(k) is str for k in value):
        return {k: plain(x) for k, x in value.items()}
    if isinstance(value, type) or (callable(value) and hasattr(value, "__name__")):
        # A function's qualname may name where it is defined, not where it is found
        # (torch.relu's is `_VariableFunctionsClass.relu`).
        name = value.__qualname__ if isinstance(value, type) else value.__name__
        return f"{getattr(value, '__module__', None) or ''}.{name}".removeprefix(
            "builtins.").lstrip(".")
    text = _ADDRESS.sub("", repr(value))
    return text if len(text) <= MAX_REPR else text[:MAX_REPR - 1] + "…"


def _name(factory: Any) -> str:
    return getattr(factory, "__name__", None) or type(factory).__name__


def describe(given: Any, model_kwargs: Mapping[str, Any] | None, model: str) -> Construction:
    """How `given` (a class, factory, partial or model reference string) was built with
    `model_kwargs` into the model whose class is `model`."""
    kwargs, args = dict(model_kwargs or {}), ()
    while isinstance(given, functools.partial):  # its keywords are constructor arguments
        kwargs, args = {**given.keywords, **kwargs}, given.args + args
        given = given.func
    if isinstance(given, (str, os.PathLike)):  # `file.py:NAME`: NAME, never the path
        tail = os.fspath(given).rpartition(":")[2]
        name = tail if tail.isidentifier() else ""
    else:
        name = _name(given)
    if args:
        factory = f"{name or model}({', '.join(repr(plain(a)) for a in args)})"
    else:
        factory = "" if name in ("", model) else name
    return Construction(factory, tuple((k, plain(v)) for k, v in sorted(kwargs.items())))


def _shown(kwargs: Mapping[str, Any], key: str) -> str:
    return f"{key}={kwargs[key]!r}"


def _call(c: Construction, model: str) -> str:
    args = ", ".join(_shown(dict(c.kwargs), k) for k, _ in c.kwargs)
    factory = c.factory or model
    if factory.endswith(")"):  # a partial's positional arguments are already written
        return f"{factory[:-1]}{', ' if args else ''}{args})"
    return f"{factory}({args})"


def _side(kwargs: Mapping[str, Any], keys: list[str]) -> str:
    given = [_shown(kwargs, k) for k in keys if k in kwargs]
    left = [k for k in keys if k not in kwargs]
    parts = [f"with {', '.join(given)}"] if given else []
    if left:
        parts.append(f"without {', '.join(left)} "
                     f"({'its default' if len(left) == 1 else 'their defaults'})")
    return " and ".join(parts)


def construction_change(base: Snapshot, cur: Snapshot) -> str:
    """`model built with n_experts=8, baseline with n_experts=4`; "" when the two were built
    alike or either does not say how (an instance, a baseline from before it was recorded)."""
    b, c = base.built, cur.built
    if b is None or c is None:
        return ""
    if (b.factory or base.model) != (c.factory or cur.model):
        return f"model built by {_call(c, cur.model)}, baseline by {_call(b, base.model)}"
    old, new = dict(b.kwargs), dict(c.kwargs)
    # Compared as written (repr): a NaN argument equals itself, as it reads.
    keys = [k for k in sorted(old.keys() | new.keys())
            if (k in old, k in new) != (True, True) or _shown(old, k) != _shown(new, k)]
    if not keys:
        return ""
    return f"model built {_side(new, keys)}, baseline {_side(old, keys)}"
