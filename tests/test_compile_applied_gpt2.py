"""torch.compile of Hugging Face GPT-2 with every usable kernel patched in as the operator
`--apply`'s package makes of it (what ``benchmarks/end_to_end.py`` times as "torch.compile
of the applied graph"): one graph, no break. On the H200 it broke six times: the four
input-less clusters (`arange → add`) were patched in as bare launchers, which Dynamo
traced into (launch cache, Triton's launch path). Tiny config; the CPU test runs the
custom-op path (interpreter kernels), the GPU test the triton_op path under Inductor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from vision_libs import import_transformers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


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


# Run without the interpreter, so the kernels are Triton-compiled and each becomes a
# triton_op; Dynamo and AOTAutograd trace on CPU tensors, the forward compiler keeps the
# graph and runs nothing (no GPU needed). Kernels are generated, not validated (no launch).
TRITON_OP_SCRIPT = """
import json, os, sys, tempfile, warnings
from pathlib import Path
os.environ["TRITON_INTERPRET"] = "0"
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/benchmarks"]
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from end_to_end import gpt2
from fusion_core.codegen import operators
from fusion_core.pipeline import analyze
from fusion_core.validate.kernels import build_kernels
from fusion_core.validate.modeltime import as_operators
from fusion_core.validate.prepare import recording
from fusion_core.validate.run import load_generated
from fusion_core.validate.subgraph import patch

torch.manual_seed(0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model, spec = gpt2(True)
analysis = analyze(model, spec, device="cpu")
kernels = build_kernels(analysis)
work = Path(tempfile.mkdtemp())
rec = recording(analysis, [], keep_rows=False, device="cpu", seed=0)
loaded = {}
for i in range(len(analysis.clusters)):
    first = kernels.same_as.get(i, i)
    if first in kernels.kernels:
        loaded.setdefault(first, load_generated(kernels.kernels[first], work).launcher)
        loaded[i] = loaded[first]
ops = as_operators(rec, loaded)
graphs = []

def keep(gm, inputs):  # the forward graph; the compiled call returns zeros of its outputs
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    shapes = [(a.meta["val"].shape, a.meta["val"].dtype) for a in out.args[0]]
    graphs.append(gm)
    return make_boxed_func(lambda *args: [torch.zeros(s, dtype=d) for s, d in shapes])

with torch.no_grad():
    torch.compile(patch(rec.gm, ops), fullgraph=True,
                  backend=aot_autograd(fw_compiler=keep))(*rec.inputs)
code = graphs[0].code
print(json.dumps({
    "triton_op": all(operators._compiled_kernel(sys.modules[k.__module__])
                     for k in loaded.values()),
    "operators": len(ops), "graphs": len(graphs),
    "launch_lines": sum("triton_kernel_wrapper_functional(" in line
                        for line in code.splitlines()),
    "left_as_calls": code.count("fusion_timing_")}))
"""


@pytest.mark.skipif(not hasattr(torch.library, "triton_op"), reason="torch < 2.6")
def test_applied_tiny_gpt2_traces_as_triton_ops_with_fullgraph_without_a_gpu():
    """The CUDA path's tracing on this machine: every operator is a triton_op, Dynamo takes
    the applied model as one graph (fullgraph: a break raises), and AOTAutograd turns each
    operator into launches of our kernels (none is left as an opaque call)."""
    if import_transformers() is None:
        pytest.skip("transformers is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", TRITON_OP_SCRIPT, str(ROOT)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["triton_op"] and got["graphs"] == 1
    assert got["operators"] > 0 and got["left_as_calls"] == 0
    assert got["launch_lines"] >= got["operators"]  # a split reduction launches twice
