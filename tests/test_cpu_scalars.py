"""A CPU 0-dim tensor read by a kernel that runs on another device, and the device a model
computes on (fusion_core/codegen/runtime.py's `_run_device`, `_device_copies`;
fusion_core/ir/graph.py's `FusionGraph.device`, fusion_core/ir/shapes.py's `model_device`).

Torch takes a CPU 0-dim tensor as an operand of an op on any device (`x.cuda() *
torch.tensor(2.0)`); a Triton kernel reads only its own device's memory, so the launcher copies
such an input there, decided once per launch plan. No GPU here: a model held on the meta
device stands in for a CUDA one (as tests/test_cpu_values.py does), and its launches are
caught before any kernel runs.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn as nn
from codegen_harness import DEVICE
from torch._subclasses.fake_tensor import FakeTensorMode

from fusion_core.analysis.devices import check_device
from fusion_core.codegen import generate, load_kernel, runtime, write_kernels
from fusion_core.ir.graph import FusionGraph, Node, OpKind, Ref, TensorMeta
from fusion_core.pipeline import analyze


class _Scaled(nn.Module):
    """A model whose `scale` is a plain tensor attribute: `.to(device)` leaves it on the CPU
    (a buffer would move), and so does `torch.tensor(4.0)` made in its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 2.0, 8), requires_grad=False)
        self.scale = torch.tensor(2.0)

    def forward(self, x):
        return (self.scale * x * self.w / torch.tensor(4.0)).relu()


class _Caught(Exception):
    pass


def _loaded(tmp_path, model: nn.Module, x: torch.Tensor):
    """The kernel module of `model`'s one cluster, its launcher, and the launcher's arguments
    as the model holds them (`x`, its parameters, its CPU scalars)."""
    a = analyze(model, x, capture="fx")
    (cluster,) = a.clusters
    kernel = generate(a, cluster)
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    held = dict(a.graph_module.named_buffers()) | dict(a.graph_module.named_parameters())
    args = [x if name == "x" else getattr(model, name, held.get(name)) for name in cluster.inputs]
    return module, getattr(module, kernel.name), args


def _launcher(tmp_path, model: nn.Module, x: torch.Tensor):
    """``_loaded``, and the kernel arguments the launcher launches with, caught before the
    kernel runs (none can run on the meta device)."""
    module, launch, args = _loaded(tmp_path, model, x)
    caught: list = []

    class Catch:
        def __getitem__(self, grid):
            def launch(*kernel_args, **_):
                caught.append(kernel_args)
                raise _Caught
            return launch

    setattr(module, f"{launch.__name__}_kernel", Catch())
    return module, launch, args, caught


def _launched(launch, args, caught) -> list[torch.Tensor]:
    with contextlib.suppress(_Caught):
        launch(*args)
    return [t for t in caught.pop() if isinstance(t, torch.Tensor)]


def test_a_cpu_scalar_read_by_a_kernel_on_another_device_is_moved_there(tmp_path):
    # The GPU's case: the kernel was handed the CPU pointer (an illegal address there), and
    # its result made on the CPU, where its first input is.
    model = _Scaled().to("meta")
    module, launch, args, caught = _launcher(tmp_path, model, torch.randn(4, 8, device="meta"))
    devices = [t.device.type for t in args]
    assert devices[0] == "cpu" and devices.count("cpu") == 2, devices  # `scale` comes first
    assert {t.device.type for t in _launched(launch, args, caught)} == {"meta"}


def test_the_launch_plan_decides_the_copies_once_and_the_common_case_copies_nothing(tmp_path):
    model = _Scaled().to("meta")
    module, launch, args, caught = _launcher(tmp_path, model, torch.randn(4, 8, device="meta"))
    _launched(launch, args, caught)
    (plan,) = module.LAUNCH_CACHE.values()
    copies, device = plan[:2]
    assert device == torch.device("meta")
    assert copies == tuple(t.device.type == "cpu" for t in args)
    # Every input where the kernel runs (all on the meta device here): nothing to copy, so a
    # warm call does no more than before.
    on_meta = [t.to("meta") for t in args]
    _launched(launch, on_meta, caught)
    assert len(module.LAUNCH_CACHE) == 2
    assert list(module.LAUNCH_CACHE.values())[1][:2] == ((), torch.device("meta"))


def test_the_traced_launcher_copies_a_cpu_scalar_without_reading_its_value(tmp_path):
    # torch.compile traces `traceable` on fake tensors, which hold no value to read.
    model = _Scaled().to("meta")
    module, _, args = _loaded(tmp_path, model, torch.randn(4, 8, device="meta"))
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(t) for t in args]
    launched: list = []

    def wrap(kernel):
        class Launch:
            def __getitem__(self, grid):
                return lambda *kernel_args, **_: launched.append(kernel_args)
        return Launch()

    with mode:
        out = module.traceable(*fakes, wrap=wrap)
    assert "cpu" in {t.device.type for t in fakes}
    assert out.device.type == "meta"
    assert {t.device.type for t in launched[0] if isinstance(t, torch.Tensor)} == {"meta"}


def test_the_run_device_is_where_torch_computes():
    scalar, meta = torch.tensor(2.0), torch.ones(4, device="meta")
    assert runtime._run_device(scalar, meta) == torch.device("meta")
    assert runtime._run_device(scalar, torch.tensor(3.0)) == torch.device("cpu")
    assert runtime._run_device(torch.ones(4), scalar) == torch.device("cpu")


def test_an_input_on_another_device_that_is_no_cpu_scalar_is_refused(monkeypatch):
    monkeypatch.setattr(runtime, "NAME", "cluster0")
    table, meta = torch.arange(4), torch.ones(4, device="meta")
    assert runtime._device_copies((False, False), (meta, meta), meta.device, ("a", "b")) == ()
    with pytest.raises(ValueError, match=r"^cluster0: `pos` is on cpu, the kernel runs on meta "
                                         r"\(where its other inputs are\); move it there first$"):
        runtime._device_copies((False, False), (meta, table), meta.device, ("`x`", "`pos`"))


def _node(name: str, kind: OpKind, device: str, shape=(4, 8), dtype=torch.float32, op="",
          refs: tuple[str, ...] = ()) -> Node:
    stride = tuple(8 if k == 0 and len(shape) == 2 else 1 for k in range(len(shape)))
    return Node(name, op or kind.value, kind, inputs=tuple(Ref(r) for r in refs),
                meta=TensorMeta(shape, dtype, stride, device))


def _graph_with_a_cpu_first_input(device: str) -> FusionGraph:
    """`forward(pos, x)` of a model on `device` whose first input is a CPU position table:
    `(pos * 2)` computes on the CPU, `x * self.w` where the model is."""
    return FusionGraph("M", (
        _node("pos", OpKind.INPUT, "cpu", (8,), torch.int64),
        _node("x", OpKind.INPUT, device),
        _node("w", OpKind.CONSTANT, device, (8,)),
        _node("mul", OpKind.POINTWISE_BINARY, "cpu", (8,), torch.int64, "mul", ("pos",)),
        _node("mul_1", OpKind.POINTWISE_BINARY, device, op="mul", refs=("x", "w")),
    ))


def test_the_graph_device_is_where_the_model_computes_not_its_first_input():
    assert _graph_with_a_cpu_first_input("cuda:0").device == "cuda:0"
    assert _graph_with_a_cpu_first_input("cpu").device == "cpu"
    assert FusionGraph("M", (Node("x", "input", OpKind.INPUT),)).device == ""


def test_a_cpu_op_of_a_model_whose_first_input_is_on_the_cpu_is_still_rejected():
    g = _graph_with_a_cpu_first_input("cuda:0")
    failure = check_device(g, ["mul"])
    assert failure is not None and failure.culprits == ("mul",)
    assert "while the model runs on cuda:0" in failure.reason
    assert check_device(g, ["mul_1"]) is None


class _Buffered(nn.Module):
    """No parameters; its first tensor as FX holds them (a buffer there) is a CPU scalar."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.tensor(2.0)
        self.register_buffer("b", torch.ones(8))

    def forward(self, x):
        return (x * self.scale + self.b).relu()


def test_a_model_whose_first_held_tensor_is_a_cpu_scalar_is_analysed_where_it_computes():
    # The example input was made on the CPU beside the model's meta buffer: FX capture failed
    # ("Expected all tensors to be on the same device").
    a = analyze(_Buffered().to("meta"), torch.randn(4, 8), capture="fx")
    assert a.graph.device == "meta"
    assert [c.ops for c in a.clusters] == [("mul", "add", "relu")]


@pytest.mark.gpu
def test_a_cuda_model_reading_a_cpu_scalar_runs_its_kernel_as_eager_does(tmp_path):
    torch.manual_seed(0)
    model = _Scaled().to(DEVICE)
    x = torch.randn(64, 8, device=DEVICE)
    assert model.scale.device.type == "cpu"
    _, launch, args = _loaded(tmp_path, model, x)
    assert any(t.device.type == "cpu" for t in args)
    want = model(x)
    for _ in range(3):  # the first call, the chosen configuration's, then direct launches
        torch.testing.assert_close(launch(*args), want)
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_a_captured_cuda_graph_keeps_the_cpu_scalar_value(tmp_path):
    torch.manual_seed(0)
    model = _Scaled().to(DEVICE)
    x = torch.randn(64, 8, device=DEVICE)
    _, launch, args = _loaded(tmp_path, model, x)
    launch(*args)  # warm: the configuration chosen outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = launch(*args)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, model(x))
