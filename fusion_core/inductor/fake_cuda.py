"""Inductor's CUDA kernels for a model, taken on a machine without a GPU (experimental).

Reads an ``nn.Module``, example input tensors and the properties of the GPU to pretend to be
(``GpuProps``, an H200 by default); writes an ``InductorCapture`` of the kernels Inductor's
CUDA scheduling and Triton code generation make, stopped before any kernel is compiled or
run. How: the model's parameters, buffers and inputs become fake tensors on "cuda"; the graph
is captured with ``torch.export`` (non-strict: Dynamo cannot run a frame on fake tensors) and
handed to ``compile_fx``; the few places Inductor asks the CUDA runtime or Triton's driver
(device properties, the RNG state, the current device, the Triton target) get the fake GPU's
answers; code generation ends the compile (``GraphLowering.compile_to_module`` raises once
the code exists, after the capture hooks saw every kernel).

What it cannot take, so a GPU run stays the reference (see docs/plugin.md):
- decisions Inductor makes by timing on the device: shape padding of matrix products
  (``shape_padding``, turned off here), max-autotune's template choices, benchmarked fusion;
- graph breaks and recompiles: there is no Dynamo frame (``torch.export`` fails on a break);
- Inductor's pattern tables are traced on CPU example tensors (their tracing makes real
  tensors of the device); the patterns are device-independent, their checks still see cuda.
Every step leans on private API: a torch upgrade can break it (the error says so).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
import torch.nn as nn

from ..ir.trace import _one_line, _where
from .capture import (
    InductorCapture,
    InductorError,
    LibraryCall,
    Record,
    _pick,
    _post_fusion_patch,
    _record_define_kernel,
)
from .fake_indexing import GuardFreeIndexing
from .op_names import names_from_code
from .rewrites import Rewrites, record_rewrites


@dataclass(frozen=True)
class GpuProps:
    """What Inductor reads of a GPU (``torch.cuda.get_device_properties`` fields)."""

    name: str = "NVIDIA H200"
    major: int = 9
    minor: int = 0
    multi_processor_count: int = 132
    total_memory: int = 140 * 2**30
    regs_per_multiprocessor: int = 65536
    max_threads_per_multi_processor: int = 2048
    max_threads_per_block: int = 1024
    warp_size: int = 32
    L2_cache_size: int = 60 * 2**20  # noqa: N815 - torch's field name


class _CodeDone(Exception):
    """Raised once the generated code exists: nothing is compiled or run after it."""


def _everywhere(qualname: str, fn: Any) -> list[Any]:
    """Patches of `qualname` and of every loaded torch module's copy of it (Inductor's
    modules import `has_triton` and the like by name, when they load)."""
    module_name, attr = qualname.rsplit(".", 1)
    original = getattr(importlib.import_module(module_name), attr)
    out = [mock.patch(qualname, fn)]
    for name, module in list(sys.modules.items()):
        if (name.startswith("torch") and name != module_name
                and getattr(module, attr, None) is original):
            out.append(mock.patch.object(module, attr, fn))
    return out


def _fake_gpu(props: GpuProps) -> list[Any]:
    """Patches answering the CUDA runtime's and Triton's questions as `props`' GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    info = types.SimpleNamespace(**props.__dict__, gcnArchName="")
    target = GPUTarget("cuda", props.major * 10 + props.minor, props.warp_size)
    answers = {
        "torch.cuda.is_available": lambda: True,
        "torch.cuda.device_count": lambda: 1,
        "torch.cuda.current_device": lambda: 0,
        "torch.cuda.set_device": lambda i: None,
        "torch.cuda._exchange_device": lambda i: 0,
        "torch.cuda._maybe_exchange_device": lambda i: 0,
        "torch.cuda.get_device_properties": lambda *a, **k: info,
        "torch.cuda.get_device_capability": lambda *a, **k: (props.major, props.minor),
        "torch.cuda._lazy_init": lambda: None,
        "torch.cuda.random._lazy_init": lambda: None,
        "torch.cuda.synchronize": lambda *a, **k: None,
        "torch.cuda.get_rng_state": lambda *a, **k: torch.zeros(16, dtype=torch.uint8),
        "torch.cuda.set_rng_state": lambda *a, **k: None,
        "torch.utils._triton.has_triton": lambda *a, **k: True,
        "torch.utils._triton.triton_backend": lambda: make_backend(target),
    }
    out = [patch for name, fn in answers.items() for patch in _everywhere(name, fn)]
    # A CPU build of torch has no such function; code that reads it by name needs one.
    out.append(mock.patch("torch.cuda._get_device_properties", lambda *a, **k: info,
                          create=True))
    return out


def _on_fake_cuda(model: nn.Module, inputs: Sequence[torch.Tensor], mode: Any
                  ) -> tuple[nn.Module, list[torch.Tensor]]:
    """A copy of the model whose parameters and buffers, and the inputs, are fake cuda
    tensors (their metadata only)."""
    from torch._subclasses.fake_tensor import FakeTensor

    def fake(t: torch.Tensor) -> torch.Tensor:
        return FakeTensor(mode, t.detach().to("meta"), torch.device("cuda", 0))

    model = copy.deepcopy(model).eval()
    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            setattr(module, name, nn.Parameter(fake(p), requires_grad=False))
        for name, b in list(module.named_buffers(recurse=False)):
            if b is not None:
                module.register_buffer(name, fake(b))
    return model, [fake(x) for x in inputs]


@contextlib.contextmanager
def _device_free_compile() -> Iterator[list[str]]:
    """Pattern tables traced on CPU tensors, no timed shape padding, stop at the code.

    One compile thread: once Inductor's compile pool is warm (a process that compiled a
    while), each kernel is also loaded in this process, and under the interpreter that
    asks Triton for the GPU's driver ("libcuda.so cannot found")."""
    import torch._inductor.config as cfg
    from torch._inductor.fx_passes import joint_graph, post_grad
    from torch._inductor.graph import GraphLowering

    code: list[str] = []

    def codegen_only(self: Any) -> Any:
        wrapper, _ = self.codegen()
        code.append(str(getattr(wrapper, "value", wrapper)))
        raise _CodeDone

    joint_init, post_init = joint_graph.lazy_init, post_grad.lazy_init
    cpu = torch.device("cpu")
    with mock.patch.object(joint_graph, "lazy_init", lambda *a, **k: joint_init(cpu)), \
            mock.patch.object(post_grad, "lazy_init", lambda *a, **k: post_init()), \
            mock.patch.object(GraphLowering, "compile_to_module", codegen_only), \
            cfg.patch(shape_padding=False, compile_threads=1):
        yield code


def _export(model: nn.Module, inputs: Sequence[torch.Tensor], mode: Any
            ) -> tuple[torch.export.ExportedProgram, list[torch.Tensor]]:
    """`model` exported on fake cuda tensors, and its fake inputs (the fake GPU is on)."""
    fake_model, fake_inputs = _on_fake_cuda(model, inputs, mode)
    try:
        with GuardFreeIndexing():
            return torch.export.export(fake_model, tuple(fake_inputs), strict=False), fake_inputs
    except Exception as e:  # noqa: BLE001 - any capture failure is one line
        raise InductorError(f"torch.export failed on fake cuda tensors{_where(e)}: "
                            f"{_one_line(e)}{_no_cuda_hint(e)}") from e


# How a CPU build of torch refuses CUDA work no fake answers: a C++ device guard (the line
# asks for the current GPU) or a real tensor made on the GPU from Python data.
_NO_CUDA = ("not linked with support for cuda", "from the 'CUDA' backend")


def _no_cuda_hint(exc: BaseException) -> str:
    if not any(s in str(exc) for s in _NO_CUDA):
        return ""
    return ("; this torch has no CUDA and that line needs it (a tensor made there from "
            "Python data can be a buffer, made with register_buffer), or take the record "
            "on a GPU")


def fake_cuda_export(model: nn.Module, inputs: Sequence[torch.Tensor],
                     props: GpuProps = GpuProps()) -> torch.export.ExportedProgram:
    """The graph `fake_cuda_capture` compiles: `model` exported on fake cuda tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with contextlib.ExitStack() as stack:
        for patch in _fake_gpu(props):
            stack.enter_context(patch)
        return _export(model, inputs, FakeTensorMode())[0]


def fake_cuda_capture(model: nn.Module, inputs: Sequence[torch.Tensor],
                      props: GpuProps = GpuProps()) -> InductorCapture:
    """Inductor's kernels for `model` on `props`' GPU, without one (see the module
    docstring for what this leaves out)."""
    # Loaded before the fakes: their imports probe CUDA, and a module loaded under a fake
    # would keep it after (the fakes also replace the copies loaded modules hold).
    import torch._dynamo  # noqa: F401
    import torch._inductor.codegen.triton  # noqa: F401
    import torch._inductor.compile_fx as compile_fx_module
    import torch._inductor.scheduler  # noqa: F401
    from torch._inductor.utils import fresh_inductor_cache
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    by_define: list[Record] = []
    by_pass: list[Record] = []
    calls: list[LibraryCall] = []
    rewrites = Rewrites()
    moved: list[int] = []
    with contextlib.ExitStack() as stack:
        for patch in _fake_gpu(props):
            stack.enter_context(patch)
        exported, fake_inputs = _export(model, inputs, mode)
        code = stack.enter_context(_device_free_compile())
        for context in (fresh_inductor_cache(), _record_define_kernel(by_define, rewrites),
                        record_rewrites(rewrites),
                        _post_fusion_patch(by_pass, calls, rewrites, moved)):
            stack.enter_context(context)
        try:
            compile_fx_module.compile_fx(exported.module(), list(fake_inputs))
        except Exception as e:  # noqa: BLE001 - _CodeDone arrives wrapped in InductorError
            if not code:
                raise InductorError(
                    f"Inductor's CUDA compile without a GPU failed ({type(e).__name__}: "
                    f"{(str(e).strip().splitlines() or [''])[0]}): this torch "
                    f"({torch.__version__}) needs other fakes; take the record on a GPU") from e
    kernels, method = _pick(by_define, by_pass, names_from_code(code))
    return InductorCapture(kernels=kernels, method=method, code=tuple(code),
                           torch_version=str(torch.__version__), calls=tuple(calls),
                           bytes_moved=sum(moved) if moved else None)
