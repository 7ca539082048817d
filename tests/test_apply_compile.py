"""A model `--apply` rewrote, traced and compiled on any machine: every applied cluster is a
torch operator, its fake implementation gives the launcher's shapes, dtypes and strides,
torch.fx traces the model through the operators, and `torch.compile(fullgraph=True)` runs it
without a graph break, matching the original model. Without CUDA the operators are custom ops
over Triton's interpreter (opaque to the compiler); with CUDA they are triton ops Inductor
traces into (test_apply_compile_gpu.py checks its code).
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
import torch._dynamo
from model_sources import RES_NORM
from rich.console import Console
from test_apply import DEVICE, _plan, backup_as_py, copy_example, load
from torch._subclasses.fake_tensor import FakeTensorMode

from fusion_core.sourcemap.apply import apply
from fusion_core.sourcemap.fused import package_name


def _applied(path, shape, class_name):
    """(original, rewritten with the same weights, the fused package), eval, on DEVICE."""
    analysis, plan = _plan(path, shape)
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result is not None and result.clusters
    original = load(backup_as_py(result.files[0].backup), class_name).to(DEVICE).eval()
    rewritten = load(path, class_name).to(DEVICE).eval()
    rewritten.load_state_dict(original.state_dict())
    package = sys.modules[package_name(path.stem)]
    return original, rewritten, package


@pytest.fixture(scope="module")
def example_net(tmp_path_factory):
    path = copy_example(tmp_path_factory.mktemp("compile_example"), "example_net.py")
    return _applied(path, (2, 1024), "ExampleNet")


@pytest.fixture(scope="module")
def res_norm(tmp_path_factory):
    path = tmp_path_factory.mktemp("compile_resnorm") / "resnorm.py"
    path.write_text(RES_NORM)
    return _applied(path, (4, 8), "ResNorm")


def _ours(gm: torch.fx.GraphModule, package) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes
            if n.op == "call_function" and str(n.target).startswith(package.NAMESPACE)]


def test_every_applied_cluster_is_an_operator_with_its_launchers_arity(example_net, res_norm):
    for _, _, package in (example_net, res_norm):
        names = [n for n in ("cluster0", "cluster1", "cluster2") if hasattr(package, n)]
        assert names
        for name in names:
            op = getattr(package, name).operator
            assert op is getattr(getattr(torch.ops, package.NAMESPACE), name).default
    schema = str(res_norm[2].cluster0.operator._schema)
    assert schema.endswith("(Tensor in0, Tensor in1, Tensor in2, Tensor in3) -> (Tensor, Tensor)")


@pytest.mark.parametrize("rows", [2, 5])
def test_the_fake_implementation_gives_the_launchers_shapes_dtypes_and_strides(res_norm, rows):
    _, _, package = res_norm
    kernels = importlib.import_module(f"{package.__name__}.cluster0")
    inputs = (torch.randn(rows, 8), torch.randn(rows, 8), torch.randn(8), torch.randn(8))
    inputs = tuple(t.to(DEVICE) for t in inputs)
    with torch.no_grad():
        real = kernels.cluster0(*inputs)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = package.cluster0.operator(*(mode.from_tensor(t) for t in inputs))
    assert len(fake) == len(real) == 2
    for f, r in zip(fake, real, strict=True):
        assert (f.shape, f.dtype, f.stride(), f.device) == (r.shape, r.dtype, r.stride(), r.device)


def test_plain_eager_calls_of_the_applied_model_skip_the_operators(res_norm):
    """Its kernel reads the LayerNorm's weight and bias (parameters): under no_grad the
    name the model calls launches directly; with grad on, autograd sees the operator."""
    _, rewritten, package = res_norm
    x = torch.randn(4, 8, device=DEVICE)
    with torch.no_grad(), torch.profiler.profile() as prof:
        rewritten(x)
    assert not [e for e in prof.events() if package.NAMESPACE in e.name]
    with torch.profiler.profile() as prof:
        out = rewritten(x)
    assert [e for e in prof.events() if package.NAMESPACE in e.name]
    with pytest.raises(RuntimeError, match="inference only"):
        out.sum().backward()


def test_torch_fx_traces_the_applied_model_through_the_operators(example_net):
    original, rewritten, package = example_net
    traced = torch.fx.symbolic_trace(rewritten)
    assert len(_ours(traced, package)) == 3
    x = torch.randn(3, 1024, device=DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), original(x), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_applied_model_compiles_with_fullgraph_and_no_graph_break(example_net, backend):
    original, rewritten, package = example_net
    torch._dynamo.reset()
    x = torch.randn(2, 1024, device=DEVICE)
    with torch.no_grad():
        explained = torch._dynamo.explain(rewritten)(x)
        assert explained.graph_break_count == 0, explained.break_reasons
        assert sorted(op for g in explained.graphs for op in _ours(g, package)) == [
            f"{package.NAMESPACE}.cluster{i}.default" for i in range(3)]
        torch._dynamo.reset()
        compiled = torch.compile(rewritten, backend=backend, fullgraph=True)
        for rows in (2, 2, 3):  # compiled, then reused; another batch recompiles
            x = torch.randn(rows, 1024, device=DEVICE)
            torch.testing.assert_close(compiled(x), original(x), atol=1e-4, rtol=1e-3)


def test_dynamic_shapes_recompile_only_in_another_shape_bucket(example_net):
    """With sizes traced symbolically (`dynamic=True`, or torch.compile's automatic dynamic
    shapes after a size changes) the launcher's shape bucket (sizes rounded up to a power of
    two) adds guards on the sizes' range, not their values: one graph serves 5 to 8 rows of
    1024 columns, 9 rows (another bucket) compiles a second. Before, every row count did."""
    from torch._dynamo.utils import counters

    original, rewritten, _ = example_net
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(rewritten, backend="aot_eager", fullgraph=True, dynamic=True)
    graphs = []
    with torch.no_grad():
        for rows in (5, 6, 7, 8, 9):
            x = torch.randn(rows, 1024, device=DEVICE)
            torch.testing.assert_close(compiled(x), original(x), atol=1e-4, rtol=1e-3)
            graphs.append(counters["stats"]["unique_graphs"])
    assert graphs == [1, 1, 1, 1, 2]


@pytest.mark.slow
def test_inductor_compiles_the_applied_model(example_net):
    """The default backend: on CPU Inductor calls the opaque operators from its C++ code."""
    original, rewritten, _ = example_net
    torch._dynamo.reset()
    compiled = torch.compile(rewritten, fullgraph=True)
    x = torch.randn(2, 1024, device=DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), original(x), atol=1e-4, rtol=1e-3)
