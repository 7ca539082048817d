"""Where Inductor's kernels write: the concatenation a kernel's buffer is a slice of.

Reads the scheduler nodes of one kernel (private Inductor API: the caller guards each call);
returns their IR nodes and, for a buffer whose layout is a ``NonOwningLayout`` lent by a
``ConcatKernel`` (Inductor writes each input of ``cat`` straight into its slice of the
output), that concatenation's FX origins.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any


def ir_nodes(scheduler_nodes: Sequence[Any]) -> Iterator[Any]:
    """The IR nodes of a kernel's scheduler nodes (fused ones opened)."""
    for sn in scheduler_nodes:
        if hasattr(sn, "get_nodes"):  # not a reduction marker in a Triton node schedule
            for inner in sn.get_nodes():
                if getattr(inner, "node", None) is not None:
                    yield inner.node


def _concat_of(layout: Any) -> Any:
    """The ConcatKernel a `NonOwningLayout` lends its slice of, else None."""
    if type(layout).__name__ != "NonOwningLayout":
        return None
    data = getattr(layout, "view", None)
    for _ in range(8):  # ReinterpretView -> StorageBox -> ConcatKernel
        if data is None or type(data).__name__ == "ConcatKernel":
            return data
        data = getattr(data, "data", None)
    return None


def cat_origins(scheduler_nodes: Sequence[Any]) -> list[Any]:
    """The FX origins of every concatenation the kernel's buffers are slices of (the `cat`
    node among them; the caller picks it)."""
    found: dict[str, Any] = {}
    for ir_node in ir_nodes(scheduler_nodes):
        concat = _concat_of(getattr(ir_node, "layout", None))
        for origin in sorted(getattr(concat, "origins", None) or (), key=lambda o: o.name):
            found.setdefault(origin.name, origin)
    return list(found.values())
