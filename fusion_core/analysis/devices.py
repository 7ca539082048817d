"""Values a model computes on the CPU while its kernels run on another device.

A factory call that names no device (`pos = torch.arange(T)`) makes a CPU tensor even in a
CUDA model, and the ops on it run on the CPU until `.to(x.device)` moves their result (that
move is a call of its own: ``ir/device_moves.py``). A Triton kernel reads and writes the
memory of the device it runs on, so such ops are no kernel's: fused, it would be handed CPU
pointers ("Pointer argument cannot be accessed from Triton (cpu tensor?)").

Each node's device is where the model's run puts its value (``TensorMeta.device``: the
propagated value's, or ``ir/run_devices.py``'s for a model on the CPU analysed for a GPU); the
kernels' is where the model computes (``FusionGraph.device``: its inputs' and parameters'
device other than the CPU, whatever its first input is). A model run on the CPU has CPU values
of its own: nothing is rejected there. A CPU 0-dim value a kernel reads is no op of the group:
torch reads it on any device, and the launcher copies it to the kernel's
(``codegen/runtime.py``'s ``_device_copies``).
"""

from __future__ import annotations

from collections.abc import Collection

from ..ir.graph import FusionGraph, OpKind
from ..ir.spelling import said
from .group import ordered
from .types import Failure

CPU = "cpu"
# Why the first CPU op of a group is there, and the fix, by whether it is a generator (made
# there) or reads CPU values.
_WHY = {True: ("makes a CPU tensor (it names no device)", "give it `device=x.device`"),
        False: ("computes on the CPU (its inputs are CPU tensors)",
                "make its inputs there (`device=x.device`), or move them there first,")}


def check_device(g: FusionGraph, group: Collection[str]) -> Failure | None:
    """Every op of the group computes on the device the model's kernels run on; the ops
    on CPU values are the culprits, so the rest of the group may still fuse."""
    if g.device in ("", CPU):
        return None  # a CPU model: its CPU values are where its kernels run
    on_cpu = tuple(ordered(g, [n for n in group if (m := g[n].meta) is not None
                               and m.device == CPU]))
    if not on_cpu:
        return None
    first = on_cpu[0]
    why, fix = _WHY[g[first].kind is OpKind.GENERATOR]
    return Failure("device", on_cpu, f"{said(g, first)} {why} while the model runs on "
                                     f"{g.device}, where a Triton kernel runs: {fix} to fuse it")
