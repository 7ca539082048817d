"""Keep a model's Python state as it was across a capture.

Reads an ``nn.Module``; changes nothing it did not change back. Capturing runs
``forward`` on proxies (FX) or fake tensors (export), and a forward that memoizes in
its own attributes (timm's LeViT caches its attention biases in a dict per device) keeps
one of those stand-ins there: the user's model then holds an FX ``Proxy`` that
``copy.deepcopy`` cannot copy, and a later run could read it back. ``kept_as_it_was``
records every submodule's attributes (and the contents of those that are dicts, lists
or sets) and puts back whatever the capture added, replaced or changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch.nn as nn


@dataclass(frozen=True)
class _Snapshot:
    module: nn.Module
    attributes: dict[str, Any]  # the module's __dict__, shallow
    contents: dict[str, dict | list | set]  # attribute name -> its container's entries


def _entries(value: Any) -> dict | list | set | None:
    """A shallow copy of a dict's, list's or set's entries (None for anything else)."""
    for kind in (dict, list, set):
        if isinstance(value, kind):
            return kind(value)
    return None


def _snapshot(module: nn.Module) -> _Snapshot:
    attributes = dict(vars(module))
    contents = {k: e for k, v in attributes.items() if (e := _entries(v)) is not None}
    return _Snapshot(module, attributes, contents)


def _same(now: dict | list | set, before: dict | list | set) -> bool:
    """Same entries, by identity (tensors have no plain `==`)."""
    if isinstance(now, dict):
        return now.keys() == before.keys() and all(now[k] is before[k] for k in now)
    if isinstance(now, list):
        return len(now) == len(before) and all(a is b for a, b in zip(now, before, strict=True))
    return now == before  # a set holds hashable values only


def _restore(s: _Snapshot) -> None:
    state = vars(s.module)
    for key in [k for k in state if k not in s.attributes]:
        del state[key]  # added by the capture
    for key, value in s.attributes.items():
        if state.get(key) is not value:
            state[key] = value
        before = s.contents.get(key)
        if before is None or _same(value, before):
            continue
        # In place: other objects may hold the same container.
        if isinstance(value, list):
            value[:] = before
        else:
            value.clear()
            value.update(before)


@contextlib.contextmanager
def kept_as_it_was(model: nn.Module) -> Iterator[None]:
    """Run the block, then undo its changes to any submodule's attributes."""
    snapshots = [_snapshot(m) for m in model.modules()]
    try:
        yield
    finally:
        for s in snapshots:
            _restore(s)
