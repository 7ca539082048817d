"""The fused package's runtime (``codegen/operators.py``) on a stand-in kernel module:
which calls launch directly and which go through the operator, the operator's schema, its
fake implementation and its refusals. No Triton kernel runs here (test_apply_compile.py
runs the real package)."""

from __future__ import annotations

import os
import types
import uuid

import pytest
import torch
from torch._library.infer_schema import infer_schema
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from fusion_core.codegen import operators as rt


class StubKernelFile:
    """A kernel file's surface: `NAME`, the launcher (x + 1 and its row sums: two results),
    and `traceable`, which calls `wrap(kernel)[grid](...)` like the generated one. Counts
    what ran."""

    def __init__(self) -> None:
        self.NAME = "stub"
        self.stub_kernel = object()  # not a Triton kernel: the custom_op path
        self.launches = 0
        self.traced = []

    def stub(self, x):
        self.launches += 1
        return x + 1, x.sum(-1)

    def traceable(self, x, wrap):
        one, rows = torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty(
            x.shape[:-1], dtype=x.dtype, device=x.device)
        self.traced.append(wrap(self.stub_kernel)[(1,)](x, one, rows))
        return one, rows


def _namespace() -> str:
    return f"runtime_test_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def registered():
    module = StubKernelFile()
    call = rt._register(_namespace(), "stub", module, "stub", 2, (torch.float32,))
    return module, call


def test_a_plain_eager_call_launches_without_the_operator(registered):
    module, call = registered
    x = torch.randn(3, 4)
    with torch.no_grad(), torch.profiler.profile() as prof:
        one, rows = call(x)
    torch.testing.assert_close(one, x + 1)
    torch.testing.assert_close(rows, x.sum(-1))
    assert module.launches == 1
    assert not [e for e in prof.events() if call.operator.namespace in e.name]


def test_calls_that_autograd_or_a_mode_records_go_through_the_operator(registered):
    module, call = registered
    x = torch.randn(3, 4, requires_grad=True)
    with torch.profiler.profile() as prof:
        one, _ = call(x)
    assert [e for e in prof.events() if call.operator.namespace in e.name]
    with pytest.raises(RuntimeError, match="inference only"):
        one.sum().backward()

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Seen() as seen:
        call(torch.randn(3, 4))
    assert str(call.operator) in seen.ops
    assert module.launches == 2  # the operator's implementation runs the launcher


def test_the_operator_schema_follows_the_inputs_and_results(registered):
    _, call = registered
    namespace = call.operator.namespace
    assert str(call.operator._schema) == f"{namespace}::stub(Tensor in0) -> (Tensor, Tensor)"

    def one(*tensors):
        pass

    one.__signature__ = rt._signature(3, 1)
    assert infer_schema(one, mutates_args=()) == "(Tensor in0, Tensor in1, Tensor in2) -> Tensor"


def test_the_fake_implementation_runs_traceable_and_launches_nothing(registered):
    module, call = registered
    with FakeTensorMode():
        one, rows = call(torch.empty(5, 7, dtype=torch.float32))
    assert (one.shape, rows.shape, one.dtype) == ((5, 7), (5,), torch.float32)
    assert module.launches == 0 and module.traced == [None]  # `_ShapesOnly` did nothing


def test_another_dtype_is_refused_naming_both(registered):
    module, call = registered
    with pytest.raises(TypeError, match=r"generated for inputs of dtype \['torch.float32'\], "
                                        r"got \['torch.float64'\]: re-run fusion-advisor"):
        with torch.no_grad():
            call(torch.randn(2, 2, dtype=torch.float64))
    assert module.launches == 0


def test_plain_eager_needs_plain_tensors_of_the_generated_dtypes():
    x = torch.randn(2)
    f32 = (torch.float32,)
    assert rt._plain_eager((x,), f32)
    assert not rt._plain_eager((x,), (torch.float16,))
    assert not rt._plain_eager((x, x), f32)  # a wrong arity is the operator's to refuse
    with FakeTensorMode() as mode:
        assert not rt._plain_eager((mode.from_tensor(x),), f32)
    grad = torch.randn(2, requires_grad=True)
    assert not rt._plain_eager((grad,), f32)
    with torch.no_grad():
        assert rt._plain_eager((grad,), f32)
        # a module's weight (cluster inputs often are): launched directly too
        assert rt._plain_eager((x, torch.nn.Parameter(torch.randn(2))), f32 * 2)


def test_only_a_triton_compiled_kernel_takes_the_triton_op_path():
    from triton.runtime.jit import JITFunction

    def kernel(x):
        pass

    compiled = types.SimpleNamespace(NAME="k", k_kernel=JITFunction(kernel))
    other = types.SimpleNamespace(NAME="k", k_kernel=kernel)
    has_triton_op = hasattr(torch.library, "triton_op") and hasattr(torch.library, "wrap_triton")
    assert rt._compiled_kernel(compiled) == has_triton_op
    assert not rt._compiled_kernel(other)


def test_the_package_holds_the_helpers_verbatim():
    text = rt.source()
    namespace = {"torch": torch, "inspect": __import__("inspect")}
    exec(compile(text, "<fused runtime>", "exec"), namespace)  # noqa: S102 - our own source
    for helper in rt.HELPERS:
        assert helper.__name__ in namespace
        assert rt.inspect.getsource(helper).rstrip() in text


@pytest.mark.skipif(not hasattr(torch.library, "triton_op"), reason="torch < 2.6")
def test_the_triton_op_registration_runs_the_launcher_eagerly(monkeypatch):
    """The path taken where Triton compiles the kernel (CUDA), registered here around the
    stand-in: the operator's eager implementation is the launcher; tracing it needs a
    compiled kernel (test_apply_compile_gpu.py)."""
    monkeypatch.setattr(rt, "_compiled_kernel", lambda module: True)
    monkeypatch.setattr(rt, "_static_launch", lambda: None)  # not this process's Inductor
    module = StubKernelFile()
    call = rt._register(_namespace(), "stub", module, "stub", 2, (torch.float32,))
    assert str(call.operator._schema).endswith("(Tensor in0) -> (Tensor, Tensor)")
    x = torch.randn(3, 4)
    with torch.no_grad():
        one, rows = call.operator(x)
    torch.testing.assert_close(one, x + 1)
    assert module.launches == 1 and module.traced == []


STATIC = "TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS"


def test_a_compiled_kernels_package_asks_inductor_to_launch_it_statically(monkeypatch):
    """Inductor launches user-defined Triton kernels through Triton's launcher unless asked:
    the package asks (the variable for compile workers, the config here)."""
    import torch._inductor.config as config

    monkeypatch.setenv(STATIC, "")  # restored, absent, after the test
    monkeypatch.delenv(STATIC)
    monkeypatch.setattr(config, "static_launch_user_defined_triton_kernels", False)
    rt._static_launch()
    assert os.environ[STATIC] == "1"
    assert config.static_launch_user_defined_triton_kernels is True
    # the config was read before the variable was set: a user's later choice here holds
    config.static_launch_user_defined_triton_kernels = False
    assert config.static_launch_user_defined_triton_kernels is False


def test_a_users_own_static_launch_setting_is_left_alone(monkeypatch):
    import torch._inductor.config as config

    monkeypatch.setenv(STATIC, "0")
    before = getattr(config, "static_launch_user_defined_triton_kernels", None)
    rt._static_launch()
    assert os.environ[STATIC] == "0"
    assert getattr(config, "static_launch_user_defined_triton_kernels", None) == before


TRACE_SCRIPT = """
import importlib.util, sys
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

# The kernel file first: decorated while TRITON_INTERPRET is unset, its kernel is Triton's
# JITFunction (importing fusion_core without CUDA would turn the interpreter on).
spec = importlib.util.spec_from_file_location("traced_kernel", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["traced_kernel"] = module
spec.loader.exec_module(module)
from fusion_core.codegen import operators

assert operators._compiled_kernel(module), type(module.cluster0_kernel)
call = operators._register("traced_test", "cluster0", module, "cluster0", 1, (torch.float32,))
graphs = []

def forward_compiler(gm, inputs):  # keeps the graph; runs nothing (no GPU needed)
    graphs.append(gm)
    return make_boxed_func(lambda args: [torch.zeros(4, 1024)])

compiled = torch.compile(lambda x: call(x * 3.0) + 1.0, fullgraph=True,
                         backend=aot_autograd(fw_compiler=forward_compiler))
with torch.no_grad():
    compiled(torch.randn(4, 1024))
print(graphs[0].code)
"""


@pytest.mark.skipif(not hasattr(torch.library, "triton_op"), reason="torch < 2.6")
def test_under_compile_the_triton_op_becomes_our_kernels_launch(tmp_path):
    """The CUDA path, traced without a GPU: Dynamo records the operator, and AOTAutograd
    decomposes it (triton_op) into `traceable`'s allocation and one functional launch of
    our kernel with the launcher's grid and arguments. Nothing runs: the forward compiler
    keeps the graph."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from fusion_core.codegen import generate, write_kernels
    from fusion_core.ir.shapes import InputSpec
    from fusion_core.pipeline import analyze_file

    example = Path(__file__).resolve().parents[1] / "examples" / "example_net.py"
    analysis = analyze_file(example, [InputSpec((4, 1024))])
    (path,) = write_kernels([generate(analysis, analysis.clusters[0])], tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(example.parents[1]), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", TRACE_SCRIPT, str(path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    code = done.stdout
    assert "traced_test.cluster0" not in code  # decomposed, not called back
    assert "torch.ops.aten.empty" in code
    (launch,) = [line for line in code.splitlines() if "triton_kernel_wrapper_functional(" in line]
    assert "'in_ptr0': mul" in launch and "'out_ptr0': empty" in launch
    assert "grid = [(" in launch
