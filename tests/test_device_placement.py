"""Validation on another device moves every tensor the graph reads or creates there.

torch.export keeps a tensor constant built in a forward (`torch.tensor(...)`, a mask) as
a plain attribute of the unlifted module, which `Module.to` does not move: on the H200 a
Hugging Face LLaMA failed every cluster with a CPU/CUDA device mismatch. The CPU tests
use the `meta` device as the target, which no CPU tensor may meet either.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
from vision_libs import import_transformers

from fusion_core.codegen.reference import graph_on
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze


class RotaryWithConstants(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        steps = torch.arange(0, 8, 2).float() / 8
        self.register_buffer("inv_freq", 1.0 / (10000 ** steps), persistent=False)

    def forward(self, x):
        pos = torch.arange(x.shape[1], device=x.device).float()
        angles = torch.outer(pos, self.inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        gain = torch.tensor([0.5, 2.0]).mean()  # lifted by export as a tensor constant
        return (x * emb.cos() + x * emb.sin()) * gain


def _tensors_read(gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    """Every tensor a `get_attr` reads, in `gm` and in the graphs nested in it (an autocast
    block's body); a nested graph module itself is not a tensor."""
    out = {}
    for prefix, module in gm.named_modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op == "get_attr":
                value = module
                for part in str(node.target).split("."):
                    value = getattr(value, part)
                if isinstance(value, torch.Tensor):
                    out[".".join(filter(None, (prefix, str(node.target))))] = value
    return out


def _device_arguments(gm: torch.fx.GraphModule) -> list[torch.device]:
    return [a for module in gm.modules() if isinstance(module, torch.fx.GraphModule)
            for n in module.graph.nodes for a in (*n.args, *n.kwargs.values())
            if isinstance(a, torch.device)]


def test_export_keeps_a_constant_that_module_to_does_not_move():
    gm = analyze(RotaryWithConstants(), (2, 4, 8), capture="export").graph_module
    moved = gm.to("meta")
    left = [name for name, t in _tensors_read(moved).items() if t.device.type != "meta"]
    assert left  # the premise: without graph_on a constant stays behind


def test_every_constant_buffer_and_device_argument_moves():
    gm = analyze(RotaryWithConstants(), (2, 4, 8), capture="export").graph_module
    moved = graph_on(gm, "meta")
    tensors = _tensors_read(moved)
    assert {"inv_freq"} < set(tensors)
    assert all(t.device.type == "meta" for t in tensors.values())
    devices = _device_arguments(moved)
    assert devices and all(d.type == "meta" for d in devices)
    assert moved(torch.empty(2, 4, 8, device="meta")).device.type == "meta"
    # The original stays where it was (validation works on a copy).
    assert all(t.device.type == "cpu" for t in _tensors_read(gm).values())


class AutocastBlock(nn.Module):
    """Hugging Face's rotary embedding (transformers 5.17) built its angles inside a block
    torch.export moves into a nested graph module called through a higher-order op, where
    `arange(..., device=cpu)` met the H200. `ir/inline_blocks.py` now inlines grad-mode and
    disabled autocast blocks; an enabled one (`enabled=True`) stays nested."""

    def __init__(self, enabled: bool) -> None:
        super().__init__()
        self.enabled = enabled

    def forward(self, x):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=self.enabled):
            pos = torch.arange(x.shape[1], device=x.device).float()
            angles = pos[:, None] * torch.ones(x.shape[-1], device=x.device)
        return x * angles.float().cos() + 1.0


@pytest.mark.parametrize("enabled", [True, False], ids=["nested", "inlined"])
def test_an_autocast_blocks_factory_calls_move_too(enabled):
    gm = analyze(AutocastBlock(enabled), (2, 4, 8), capture="export").graph_module
    nested = [m for name, m in gm.named_modules() if name and isinstance(m, torch.fx.GraphModule)]
    assert bool(nested) is enabled  # the premise: export nests the block; only this one stays
    assert any(d.type == "cpu" for d in _device_arguments(gm))
    moved = graph_on(gm, "meta")
    assert {d.type for d in _device_arguments(moved)} == {"meta"}
    assert moved(torch.empty(2, 4, 8, device="meta")).device.type == "meta"
    assert any(d.type == "cpu" for d in _device_arguments(gm))  # the original is untouched


def _llama_bf16(hidden: int = 64, tokens: tuple[int, int] = (2, 16), device: str = "cpu"):
    """A 2-layer LLaMA in bf16 with random weights; widths follow `hidden` (the issue's model
    is hidden 2048, 4x512). A large one is built and analysed on `device`."""
    transformers = import_transformers()
    if transformers is None:
        pytest.skip("transformers is not installed")
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=hidden, intermediate_size=2 * hidden,
        num_attention_heads=max(4, hidden // 128), num_key_value_heads=2, use_cache=False,
        vocab_size=128, max_position_embeddings=max(64, tokens[1]))
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.LlamaModel(config).to(device, torch.bfloat16)
        return analyze(model, InputSpec(tokens, torch.int64))


def test_llama_graph_runs_on_the_target_device():
    # Its rotary cast is `aten.to.device(x, cpu, ...)`: the device is positional.
    moved = graph_on(_llama_bf16().graph_module, "meta")
    devices = _device_arguments(moved)
    assert devices and {d.type for d in devices} == {"meta"}
    assert all(t.device.type == "meta" for t in _tensors_read(moved).values())
    out = moved(torch.zeros(2, 16, dtype=torch.int64, device="meta"))
    assert out.last_hidden_state.device.type == "meta"


_needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@_needs_cuda
@pytest.mark.parametrize("hidden,tokens", [(64, (2, 16)), (2048, (4, 512))],
                         ids=["hidden64-2x16", "hidden2048-4x512"])
def test_llama_bf16_validates_on_the_gpu(hidden, tokens):
    """Numerics only (gates 1 and 2): every kernel verified and offered. At hidden 2048, 4x512
    the model check once withheld all 20 clusters over one bf16 rounding step (issue 26)."""
    from fusion_core.validate.run import validate

    report = validate(_llama_bf16(hidden, tokens, "cuda"), timing=False)
    failed = [(r.cluster, [g.detail for g in r.gates if not g.passed]) for r in report.results
              if not r.usable]
    assert not failed
    assert report.model.passed, report.model.detail
    assert not report.timed


@pytest.mark.gpu
@pytest.mark.timing
@_needs_cuda
def test_llama_bf16_kernels_are_not_slower_than_eager_when_dram_bound():
    """The benchmark gate on LLaMA's kernels where it measures kernels: 4x4096 tokens at
    hidden 2048 move 64 MiB per activation, past the H200's 60 MiB L2. (At hidden 64 and
    2x16 tokens each kernel moves a few KB; its time is the Python launch path, not the
    kernel, and a 0.45x verdict there said nothing about the kernel.)"""
    from fusion_core.validate.run import validate

    report = validate(_llama_bf16(2048, (4, 4096), "cuda"))
    timed = [r for r in report.results if r.regime == "dram-bound"]
    assert report.timed and timed, [(r.cluster, r.regime) for r in report.results]
    slow = [(r.cluster, r.cluster_speedup, r.gate("benchmark").detail) for r in timed
            if not r.gate("benchmark").passed]
    assert not slow


class NormGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w, self.b = nn.Parameter(torch.ones(8)), nn.Parameter(torch.zeros(8))

    def forward(self, x):
        return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (8,), self.w, self.b))


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_model_on_another_device_is_analyzed_with_inputs_there(capture):
    # A model moved to CUDA met CPU example inputs in its first op (the shapes panel on the
    # H200); `meta` plays the other device here.
    analysis = analyze(NormGelu().to("meta"), (4, 8), capture=capture)
    assert [c.chain for c in analysis.clusters] == ["layer_norm → gelu"]
