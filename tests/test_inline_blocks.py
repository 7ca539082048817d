"""torch.export wraps a `no_grad` / `set_grad_enabled` block and a disabled `torch.autocast`
block in one higher-order call with a nested graph; `ir/inline_blocks.py` copies such a body
into the parent graph so its ops fuse (Hugging Face LLaMA's rotary embedding under
transformers 5.17), and leaves an enabled autocast block, which changes dtypes, as it was."""

from __future__ import annotations

import contextlib
import inspect
import operator

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

from fusion_core.ir import export as export_frontend
from fusion_core.ir.inline_blocks import inline_blocks
from fusion_core.pipeline import analyze

HOP = torch.ops.higher_order
BLOCKS = {
    "autocast_off": lambda: torch.autocast(device_type="cpu", enabled=False),
    "no_grad": torch.no_grad,
    "set_grad_enabled": lambda: torch.set_grad_enabled(False),
}


class Angles(nn.Module):
    """A few pointwise ops inside a block; the caller reads the result afterwards."""

    def __init__(self, block: str) -> None:
        super().__init__()
        self.block = block

    def forward(self, x):
        with BLOCKS[self.block]():
            angles = x.float().cos() * 3.0  # inside the block
            angles = angles.sin() + 1.0  # inside the block
        return angles


class BlockModel(nn.Module):
    def __init__(self, block: str) -> None:
        super().__init__()
        self.rot = Angles(block)

    def forward(self, x):
        return self.rot(x) * x


def _inside_lines() -> set[int]:
    lines, start = inspect.getsourcelines(Angles.forward)
    return {start + i for i, text in enumerate(lines) if "# inside the block" in text}


def _blocks(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if isinstance(n.target, torch._ops.HigherOrderOperator)]


def _nested(gm: fx.GraphModule) -> list[str]:
    return [name for name, m in gm.named_modules() if name and isinstance(m, fx.GraphModule)]


def _graph_matches_model(analysis, *shape: int) -> None:
    x = torch.randn(*shape)
    with torch.no_grad():
        expected = analysis.module(x)
        actual = analysis.graph_module(x)
    actual = actual[0] if isinstance(actual, tuple) else actual
    torch.testing.assert_close(actual, expected)


@contextlib.contextmanager
def _without_inlining():
    original = export_frontend.inline_blocks
    export_frontend.inline_blocks = lambda gm: []
    try:
        yield
    finally:
        export_frontend.inline_blocks = original


@pytest.mark.parametrize("block", BLOCKS)
def test_without_the_pass_the_block_is_one_opaque_call_and_nothing_fuses(block):
    with _without_inlining():
        a = analyze(BlockModel(block), (4, 8), capture="export")
    assert _blocks(a.graph_module) and _nested(a.graph_module)
    assert not [c for c in a.clusters if "cos" in c.ops]


@pytest.mark.parametrize("block", BLOCKS)
def test_the_blocks_ops_fuse_with_their_source_lines_and_module(block):
    a = analyze(BlockModel(block), (4, 8), capture="export")
    assert not _blocks(a.graph_module) and not _nested(a.graph_module)
    [cluster] = a.clusters
    assert [op for op in cluster.ops if op != "to"] == ["cos", "mul", "sin", "add", "mul"]
    inside = [a.graph[n] for n in cluster.nodes if a.graph[n].op in ("cos", "sin")]
    assert {n.source.line for n in inside} == _inside_lines()
    assert all(n.source.file.endswith("test_inline_blocks.py") for n in inside)
    assert {n.module for n in inside} == {"rot"}
    _graph_matches_model(a, 4, 8)


def test_enable_grad_is_recorded_as_no_block_at_all():
    # Export traces with grad mode on: an enable_grad block changes nothing and leaves no
    # trace in the graph, so its ops fused before this pass too.
    class EnableGrad(nn.Module):
        def forward(self, x):
            with torch.enable_grad():
                y = x.cos() * 3.0
            return y + 1.0

    with _without_inlining():
        a = analyze(EnableGrad(), (4, 8), capture="export")
    assert not _blocks(a.graph_module)
    assert [c.ops for c in a.clusters] == [("cos", "mul", "add")]


class EnabledAutocast(nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = (x @ x.t()).cos() * 3.0
        return y.float() + 1.0


def test_an_enabled_autocast_block_is_not_inlined():
    a = analyze(EnabledAutocast(), (4, 4), capture="export")
    [call] = _blocks(a.graph_module)
    assert call.target is HOP.wrap_with_autocast and call.args[2] is True
    assert _nested(a.graph_module)
    assert not [c for c in a.clusters if "cos" in c.ops]
    _graph_matches_model(a, 4, 4)


class Nested(nn.Module):
    """A disabled autocast block inside a no_grad block, an enabled one inside that."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 8))

    def forward(self, x):
        with torch.no_grad():
            with torch.autocast(device_type="cpu", enabled=False):
                y = x.cos() * self.scale * torch.tensor(2.0)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    z = y @ y.t()
            y = y.sin() + 1.0
        return y * x, z


def test_a_block_inside_a_block_is_inlined_and_an_enabled_one_is_kept():
    a = analyze(Nested(), (8, 8), capture="export")
    gm = a.graph_module
    gm.graph.lint()
    [kept] = _blocks(gm)
    assert kept.target is HOP.wrap_with_autocast and kept.args[2] is True
    # Its body was re-homed on the top-level module; the inlined bodies are gone.
    assert _nested(gm) == [str(kept.args[4].target)]
    assert {"cos", "sin"} <= {op for c in a.clusters for op in c.ops}
    x = torch.randn(8, 8)
    with torch.no_grad():
        expected, actual = a.module(x), gm(x)
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want)


# --- calls the pass cannot read stay as they were --------------------------------

def _body() -> fx.GraphModule:
    g = fx.Graph()
    x = g.placeholder("x")
    g.output((g.call_function(torch.cos, (x,)),))
    return fx.GraphModule(nn.Module(), g)


def _two_calls(second_read_by_getitem: bool) -> fx.GraphModule:
    """Two grad-mode calls sharing one body; the second's result goes out whole (no
    getitem) unless `second_read_by_getitem`."""
    root = nn.Module()
    root.body = _body()
    g = fx.Graph()
    x = g.placeholder("x")
    first = g.call_function(HOP.wrap_with_set_grad_enabled, (False, g.get_attr("body"), x))
    second = g.call_function(HOP.wrap_with_set_grad_enabled, (False, g.get_attr("body"), x))
    read = g.call_function(operator.getitem, (second, 0)) if second_read_by_getitem else second
    g.output((g.call_function(operator.getitem, (first, 0)), read))
    return fx.GraphModule(root, g)


def test_a_call_read_whole_stays_and_keeps_the_shared_body():
    gm = _two_calls(second_read_by_getitem=False)
    assert len(inline_blocks(gm)) == 1
    gm.graph.lint()
    assert len(_blocks(gm)) == 1 and isinstance(gm.body, fx.GraphModule)
    x = torch.randn(3)
    first, (second,) = gm(x)
    torch.testing.assert_close(first, x.cos())
    torch.testing.assert_close(second, x.cos())


def test_the_body_goes_when_no_call_reads_it_any_more():
    gm = _two_calls(second_read_by_getitem=True)
    assert len(inline_blocks(gm)) == 2
    assert not _blocks(gm) and not hasattr(gm, "body")
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), (x.cos(), x.cos()))


class Rotary(nn.Module):
    """The shape of Hugging Face LLaMA's rotary embedding (transformers 5.17): a
    `@torch.no_grad()` forward whose angles are computed with autocast disabled."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        steps = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
        self.register_buffer("inv_freq", 1.0 / (10000 ** steps), persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1).to(x.device)
        pos = position_ids[:, None, :].float()
        with torch.autocast(device_type="cpu", enabled=False):
            freqs = (inv.float() @ pos.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * 1.0
            sin = emb.sin() * 1.0
        return cos.to(x.dtype), sin.to(x.dtype)


class RotaryUser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rotary_emb = Rotary()

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device)[None, :]
        cos, sin = self.rotary_emb(x, positions)
        return x * cos + x.flip(-1) * sin


def test_a_rotary_embedding_under_no_grad_and_autocast_off_fuses():
    with _without_inlining():
        before = analyze(RotaryUser(), (1, 6, 8), capture="export")
    assert _blocks(before.graph_module)
    assert not [c for c in before.clusters if {"cos", "sin"} & set(c.ops)]
    a = analyze(RotaryUser(), (1, 6, 8), capture="export")
    assert not _blocks(a.graph_module) and not _nested(a.graph_module)
    fused = [c for c in a.clusters if {"cos", "sin"} & set(c.ops)]
    assert fused and {"cos", "sin"} <= {op for c in fused for op in c.ops}
    assert all(a.graph[n].module == "rotary_emb" for c in fused for n in c.nodes
               if a.graph[n].op in ("cos", "sin"))
    _graph_matches_model(a, 1, 6, 8)


def _passing_through(read: int) -> fx.GraphModule:
    """A grad-mode call whose body returns (cos(x), k) for operands (x, 2.0); the caller
    reads result `read`."""
    root = nn.Module()
    g = fx.Graph()
    x, k = g.placeholder("x"), g.placeholder("k")
    g.output((g.call_function(torch.cos, (x,)), k))
    root.body = fx.GraphModule(nn.Module(), g)
    g = fx.Graph()
    x = g.placeholder("x")
    call = g.call_function(HOP.wrap_with_set_grad_enabled, (False, g.get_attr("body"), x, 2.0))
    g.output(g.call_function(operator.getitem, (call, read)))
    return fx.GraphModule(root, g)


def test_a_result_that_is_not_a_graph_value_keeps_the_call():
    gm = _passing_through(read=1)
    assert inline_blocks(gm) == [] and len(_blocks(gm)) == 1
    assert gm(torch.randn(3)) == 2.0
    gm = _passing_through(read=0)
    assert len(inline_blocks(gm)) == 1 and not _blocks(gm)
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), x.cos())
