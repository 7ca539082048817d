"""Which graph nodes Inductor's pattern rewrites replaced, and by what.

Reads nothing up front: ``record_rewrites`` wraps the ``apply`` of Inductor's pattern entries
(replacement, lowering and graph patterns) for the duration of a compile; writes a
``Rewrites``: for each node a rewrite added, the matched nodes it erased (the user's
``matmul → mul → softmax → matmul`` for the ``_scaled_dot_product_flash_attention_for_cpu``
node that replaced them), and the pattern's name when Inductor gives one.

Inductor keeps no such record itself: the node a rewrite adds has no stack trace and, unless
provenance tracking is on, no ``from_node``; only the rewrite's output node inherits the last
matched node's metadata. The matched nodes are known only while the pattern is applied, so
they are read there: the nodes in the graph before and after ``apply`` give what it added,
``Match.nodes`` what it may have erased. Private API: each step is guarded, and a compile
whose rewrites cannot be read yields an empty record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Rewrites:
    """Filled during one compile; read by ``capture.py`` when it records a library call."""

    replaced: dict[Any, tuple[Any, ...]] = field(default_factory=dict)  # new fx node -> erased
    pattern: dict[Any, str] = field(default_factory=dict)  # new fx node -> pattern name

    def sources(self, node: Any) -> tuple[Any, ...]:
        """The user's nodes that `node` stands for, through chained rewrites; () if none."""
        return self.replaced.get(node, ())

    def add(self, new: list[Any], erased: list[Any], name: str) -> None:
        # A rewrite of a rewrite's product stands for what that product replaced.
        originals = tuple(dict.fromkeys(
            src for n in erased for src in (self.replaced.get(n) or (n,))))
        for n in new:
            self.replaced[n] = originals
            if name:
                self.pattern[n] = name


def _entry_classes() -> list[type]:
    with contextlib.suppress(Exception):
        from torch._inductor import pattern_matcher as pm

        return [cls for cls in (getattr(pm, name, None) for name in (
            "ReplacementPatternEntry", "LoweringPatternEntry", "GraphPatternEntry"))
            if isinstance(cls, type) and "apply" in cls.__dict__]
    return []


def _wrap(original: Callable, log: Rewrites) -> Callable:
    def apply(self, match, graph, node, *args, **kwargs):
        try:
            before = set(graph.nodes)
            matched = list(match.nodes)
        except Exception:  # noqa: BLE001 - an unreadable match is simply not recorded
            return original(self, match, graph, node, *args, **kwargs)
        result = original(self, match, graph, node, *args, **kwargs)
        with contextlib.suppress(Exception):
            new = [n for n in graph.nodes if n not in before]
            erased = [n for n in matched if getattr(n, "_erased", False)]
            if new and erased:
                log.add(new, erased, str(getattr(self, "pattern_name", None) or ""))
        return result

    apply._fusion_advisor = True  # type: ignore[attr-defined]
    return apply


@contextlib.contextmanager
def record_rewrites(log: Rewrites) -> Iterator[Rewrites]:
    """Record into `log` every pattern rewrite applied while the context is open."""
    patched: list[tuple[type, Callable]] = []
    try:
        for cls in _entry_classes():
            original = cls.__dict__["apply"]
            if getattr(original, "_fusion_advisor", False):
                continue  # a nested capture: the outer one records
            cls.apply = _wrap(original, log)
            patched.append((cls, original))
        yield log
    finally:
        for cls, original in patched:
            cls.apply = original
