"""A conversion that moves its value to another device: no kernel can hold it.

Reads one FX node the registry binds as `to` (`x.to("cpu")`, `x.to(other.device)`,
`x.to(device, dtype)`, `x.type_as(y)`, torch.export's `aten._to_copy(…, device=…)` and
`aten.to.device`) or a `.cpu()`/`.cuda()` call, with its operand's and result's
`meta["val"]` (shape propagation sets them); returns the call as its line spells it and why
it stays a call of its own, where the two devices differ (each where the model's run puts
it: ``RUN_DEVICE``, else the propagated value's). A Triton kernel reads and writes
on the device it runs on: fused, the moved value would stay where its input was while
eager hands back a tensor on the other device. A conversion on one device (`x.to(x.device)`,
a dtype cast) is no move and fuses as a cast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from .graph import SourceLoc
from .spelling import method_written

# Tensor methods that may move a value (`type`/`type_as` take a CUDA tensor type).
MOVING_METHODS = frozenset({"to", "cpu", "cuda", "type", "type_as"})
FIX = "move the copy before or after the ops you want in one kernel"
# Where a value lives when the model runs on its target, where that is not where shape
# propagation put it (a model on the CPU analysed for CUDA: ``ir/run_devices.py`` writes it).
RUN_DEVICE = "fusion_device"


@dataclass(frozen=True)
class Move:
    call: str  # as the line writes it: `.to("cpu")`; the graph's target where it cannot tell
    why: str


def device_move(n: fx.Node, found: Any, target: str, source: SourceLoc | None) -> Move | None:
    """The move `n` makes, where it converts a tensor into one on another device: `found`,
    its registry entry (``targets.lookup``), is a `to`, or it is a `.cpu()`/`.cuda()` call
    (no registry entry). None for anything else. `target`: the graph's name of the call, for
    a line that spells no one such call."""
    binds_as_to = isinstance(found, tuple) and found[0].name == "to"
    if not (binds_as_to or n.op == "call_method" and n.target in ("cpu", "cuda")):
        return None
    src = n.args[0] if n.args else None
    before = _device(src) if isinstance(src, fx.Node) else None
    after = _device(n)
    if before is None or after is None or before == after:
        return None
    why = (f"it moves the value from {before} to {after}, and a kernel writes "
           f"on the device it reads; {FIX}")
    return Move((method_written(source.code, MOVING_METHODS) if source else None) or target, why)


def _device(n: fx.Node) -> str | None:
    """Where `n`'s tensor lives when the model runs: the run's device, else the propagated
    value's; None for no tensor."""
    val = n.meta.get("val")
    return n.meta.get(RUN_DEVICE, str(val.device)) if isinstance(val, torch.Tensor) else None
