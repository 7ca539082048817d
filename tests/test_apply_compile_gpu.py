"""A model `--apply` rewrote, on a CUDA GPU, the ways a user removes host time: under
`torch.compile(fullgraph=True)` (no graph break; Inductor traces into the fused package's
triton ops and launches our kernels from its own code), captured by hand in a CUDA graph,
and under `mode="reduce-overhead"` (torch.compile's own CUDA graphs). Each matches the
original model on fresh inputs."""

from __future__ import annotations

import pytest
import torch
from test_apply import backup_as_py, call_lines, copy_example, load, run_cli

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SHAPE = (256, 1024)


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    """(original ExampleNet, the rewritten one with the same weights), on the GPU, eval."""
    tmp_path = tmp_path_factory.mktemp("applied")
    path = copy_example(tmp_path, "example_net.py")
    result = run_cli(path, "--input-shape", ",".join(map(str, SHAPE)), "--apply", "--yes")
    assert result.exit_code == 0, result.output
    assert call_lines(path), result.output  # at least one cluster applied
    original = load(backup_as_py(path.with_name("example_net.py.bak")), "ExampleNet")
    rewritten = load(path, "ExampleNet")
    rewritten.load_state_dict(original.state_dict())
    return original.cuda().eval(), rewritten.cuda().eval()


def _x():
    return torch.randn(*SHAPE, device="cuda")


def _close(got, want):
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


def test_the_applied_model_compiles_with_fullgraph_and_keeps_our_kernels(applied):
    """On CUDA each fused operator is a triton op: Dynamo records the operator, and Inductor
    traces into it and launches our Triton kernels from its own code (their source is in
    it), instead of calling the operator back."""
    from torch._inductor.utils import run_and_get_code

    original, rewritten = applied
    with torch.no_grad():
        explained = torch._dynamo.explain(rewritten)(_x())
        assert explained.graph_break_count == 0, explained.break_reasons
        ours = [
            n
            for g in explained.graphs
            for n in g.graph.nodes
            if n.op == "call_function" and "fused_" in str(n.target)
        ]
        assert ours, "the fused package's operators are not in the captured graph"
        names = sorted({str(n.target).split(".")[1] for n in ours})  # cluster0, ...
        torch._dynamo.reset()
        compiled = torch.compile(rewritten, fullgraph=True)
        x = _x()
        got, code = run_and_get_code(compiled, x)
        _close(got, original(x))
        text = "\n".join(code)
        for name in names:
            assert f"{name}_kernel" in text, f"Inductor's code does not launch {name}_kernel"
        x = _x()
        _close(compiled(x), original(x))  # a second call: the compiled code, no recompile


def test_the_applied_model_is_captured_in_a_cuda_graph(applied):
    original, rewritten = applied
    static_x = _x()
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm: plans, configurations and launchers kept
            for _ in range(2):
                rewritten(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = rewritten(static_x)
        for _ in range(2):
            static_x.copy_(_x())
            graph.replay()
            torch.cuda.synchronize()
            _close(static_out, original(static_x))


def test_the_applied_model_runs_under_reduce_overhead(applied):
    original, rewritten = applied
    torch._dynamo.reset()
    compiled = torch.compile(rewritten, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for _ in range(3):  # warm-up, recording, replay
            x = _x()
            _close(compiled(x).clone(), original(x))
