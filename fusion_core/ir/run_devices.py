"""Where each value lives when a model analysed on the CPU runs on another device.

Shape propagation (``ir/shapes.py``) runs where the model's parameters are, and the CLI loads
a model on the CPU to analyse it for the GPU its kernels run on: every propagated value reads
"cpu" then, also the ones that stay there on every device (`pos = torch.arange(T)` names no
device, and the ops on `pos` run on the CPU until `.to(x.device)` moves their result). This
pass runs an FX graph once more on fake tensors with its inputs, parameters and buffers on a
stand-in device ("meta": there on every machine, and devices propagate alike there), and
writes ``meta[RUN_DEVICE]`` on every tensor value: the target where the value followed them,
"cpu" where it did not; ``normalize`` takes it for ``TensorMeta.device``. Only the ops that
may leave the model's device run (a factory, a conversion, an op with a `device=`), and those
reading a value off it: any other op computes where its operands are, the model's device,
and its value stands in as an empty tensor of its propagated shape there.

torch.export records each factory's device as a constant of the capture's
(`arange(…, device=cpu)` also for `device=x.device`): its graphs cannot tell, and stay as they
are. So does a graph the stand-in run fails on (nothing is known, so nothing changes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call

from .device_moves import MOVING_METHODS, RUN_DEVICE
from .shapes import InputSpec, fake_inputs

_STAND_IN = torch.device("meta")


class _Devices(fx.Interpreter):
    """Runs the `seeds`, the inputs and the ops reading a value off the stand-in, records
    each result's device; every other value is an empty stand-in of its propagated shape
    (``meta["val"]`` stays)."""

    def __init__(self, gm: fx.GraphModule, seeds: set[fx.Node]) -> None:
        super().__init__(gm)
        self.seeds = seeds
        self.devices: dict[fx.Node, torch.device] = {}

    def run_node(self, n: fx.Node) -> Any:
        runs = (n in self.seeds or n.op in ("placeholder", "output") or "val" not in n.meta
                or any(_off(self.env[a]) for a in n.all_input_nodes))
        result = super().run_node(n) if runs else fx.node.map_aggregate(n.meta["val"],
                                                                           _stand_in)
        if isinstance(result, torch.Tensor):
            self.devices[n] = result.device
        return result


def _stand_in(value: Any) -> Any:
    """`value` as the stand-in run has it where it follows the model: on the stand-in."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                   device=_STAND_IN)
    return _STAND_IN if isinstance(value, torch.device) else value


def _off(value: Any) -> bool:
    """`value` holds a tensor (or names a device) other than the stand-in."""
    if isinstance(value, (tuple, list)):
        return any(_off(v) for v in value)
    return (isinstance(value, torch.Tensor) and value.device != _STAND_IN
            or isinstance(value, torch.device) and value != _STAND_IN)


class _Run(nn.Module):
    """`gm` run by ``_Devices``, as a module ``functional_call`` can lend stand-in weights."""

    def __init__(self, gm: fx.GraphModule, seeds: set[fx.Node]) -> None:
        super().__init__()
        self.gm = gm
        self.seeds = seeds

    def forward(self, *args: torch.Tensor) -> dict[fx.Node, torch.device]:
        interpreter = _Devices(self.gm, self.seeds)
        interpreter.run(*args)
        return interpreter.devices


def mark_run_devices(gm: fx.GraphModule, specs: Sequence[InputSpec], frontend: str,
                     target: torch.device | None) -> None:
    """Write ``meta[RUN_DEVICE]`` on `gm`'s tensor values where it is an FX capture of a
    model whose parameters are on the CPU, analysed for another `target`."""
    on_cpu = all(t.device.type == "cpu" for t in (*gm.parameters(), *gm.buffers()))
    if frontend != "fx" or target is None or target.type == "cpu" or not on_cpu:
        return  # propagated where the model runs, or (export) nothing to tell
    seeds = {n for n in gm.graph.nodes if _may_leave(n)}
    if not seeds:
        return  # every value follows the inputs and weights
    stand_in = {f"gm.{k}": v.to(_STAND_IN) for k, v in
                (*gm.named_parameters(), *gm.named_buffers())}
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    inputs = tuple(fake_inputs(mode, specs, _STAND_IN))
    try:
        with mode:
            devices = functional_call(_Run(gm, seeds), stand_in, inputs)
    except Exception:  # noqa: BLE001 - any op may refuse the stand-in: then nothing is known
        return
    # `.cuda()` names the device with its index: so does the target, or they would differ.
    run = torch.device(target.type, 0) if target.type == "cuda" and target.index is None \
        else target
    for node, device in devices.items():
        node.meta[RUN_DEVICE] = str(run) if device == _STAND_IN else str(device)


def _may_leave(n: fx.Node) -> bool:
    """`n` may hold a tensor off the model's device: one made from no tensor (a factory:
    `torch.arange(T)`), a conversion (`.to(…)`, `.cpu()`), or a call naming a device
    (`torch.zeros_like(x, device="cpu")`)."""
    if n.op == "call_method" and n.target in MOVING_METHODS or "device" in n.kwargs:
        return True
    return (n.op in ("call_function", "call_method")
            and isinstance(n.meta.get("val"), torch.Tensor)
            and not any(isinstance(a.meta.get("val"), torch.Tensor) for a in n.all_input_nodes))

