"""torch.compile of Hugging Face GPT-2 with every usable kernel patched in as the operator
`--apply`'s package makes of it (what ``benchmarks/end_to_end.py`` times as "torch.compile
of the applied graph"): one graph, no break. On the H200 it broke six times: the four
input-less clusters (`arange → add`) were patched in as bare launchers, which Dynamo
traced into (launch cache, Triton's launch path). Tiny config; the CPU test runs the
custom-op path (interpreter kernels), the GPU test the triton_op path under Inductor."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from vision_libs import import_transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _applied_tiny_gpt2(device, workdir):
    if import_transformers() is None:
        pytest.skip("transformers is not installed")
    from end_to_end import gpt2
    from graph_breaks import applied_graph

    return applied_graph(gpt2, True, device, workdir)


def _patched(gm):
    """The clusters the patched graph launches (`subgraph.patch` names each call)."""
    return {int(n.target.__name__.removeprefix("cluster").removesuffix("_launch"))
            for n in gm.graph.nodes
            if n.op == "call_function" and n.target.__name__.endswith("_launch")}


def _operators(graphs):
    """The clusters whose operator (`fusion_timing_<id>::cluster<i>`) Dynamo recorded."""
    return {int(n.target.name().rsplit("::cluster", 1)[1].split(".")[0])
            for g in graphs for n in g.graph.nodes
            if isinstance(n.target, torch._ops.OpOverload)
            and n.target.namespace.startswith("fusion_timing_")}


@pytest.mark.cpu  # interpreter kernels as custom ops; the triton_op path: the gpu test
def test_applied_tiny_gpt2_compiles_as_one_graph_without_breaks(tmp_path):
    rec, applied, usable = _applied_tiny_gpt2("cpu", tmp_path)
    without_inputs = [i for i in usable if not rec.clusters[i].inputs]
    assert without_inputs  # GPT-2's position and mask aranges: the clusters that broke
    # Every usable cluster with inputs is patched in; the input-less ones keep their ops.
    with_inputs = set(usable) - set(without_inputs)
    assert _patched(applied) == with_inputs
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(applied)(*rec.inputs)
        assert explained.graph_break_count == 0, explained.break_reasons
        assert explained.graph_count == 1
        assert _operators(explained.graphs) == with_inputs  # each one Dynamo's operator
        torch._dynamo.reset()
        got = torch.compile(applied, backend="aot_eager", fullgraph=True)(*rec.inputs)
        torch.testing.assert_close(got, applied(*rec.inputs))


@pytest.mark.gpu
def test_applied_tiny_gpt2_compiles_with_fullgraph_under_inductor_on_the_gpu(tmp_path):
    """The triton_op path: Inductor traces into our kernels' launches; no break, and the
    compiled model gives the patched graph's result."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from torch._dynamo.utils import counters

    rec, applied, _ = _applied_tiny_gpt2("cuda", tmp_path)
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        got = torch.compile(applied, fullgraph=True)(*rec.inputs)
        assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
        torch.testing.assert_close(got, applied(*rec.inputs), atol=2e-3, rtol=2e-3)
