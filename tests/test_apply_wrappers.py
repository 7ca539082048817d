"""Calls through decorator wrappers (`functools.wraps`, `update_wrapper`) and layers whose
`__call__` (or wrapped `forward`, as transformers' `GradientCheckpointingLayer` does) hands
the call on: the wrapper's frame lies between the caller's line and the callee, and the
source map looks through it to the callee itself. Kernels run under the Triton interpreter on
CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rich.console import Console
from test_apply import assert_same_outputs, backup_as_py
from test_apply_callsite import line_of, plan
from test_apply_unet import RESBLOCK
from test_apply_unet import _maps as _unet_maps

from fusion_core.sourcemap import EXACT, POINTER
from fusion_core.sourcemap.apply import apply

CAPTURES = ["fx", "export"]


# Three ways to make a pass-through decorator; `{decorate}` is the wrapper's own decoration.
DECORATORS = {
    "wraps": ("    @functools.wraps(fn)\n", ""),
    "update_wrapper": ("", "    functools.update_wrapper(wrapper, fn)\n"),
    "__wrapped__": ("", "    wrapper.__wrapped__ = fn\n"),
}

DECORATED_HELPERS = '''\
import functools

import torch
import torch.nn as nn


def passthrough(fn):
{before}    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
{after}    return wrapper


@passthrough
def rms_norm(x, weight, eps: float = 1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.weight = nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x):
        h = x + self.proj(x)
        h = rms_norm(h, self.weight, eps=1e-5)
        g = self._scale(h, 3.0)
        return self.proj(g)

    @passthrough
    def _scale(self, t, s):
        return torch.tanh(t) * s
'''


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("decorator", DECORATORS)
def test_decorated_helpers_map_at_their_call_lines_and_apply(tmp_path, capture, decorator):
    before, after = DECORATORS[decorator]
    path = tmp_path / "decorated.py"
    path.write_text(DECORATED_HELPERS.format(before=before, after=after))
    analysis, (m,), p = plan(path, capture)
    assert m.quality == EXACT, m.reason
    assert (m.start, m.end) == (line_of(path, "h = x + self.proj(x)"),
                                line_of(path, "g = self._scale(h, 3.0)"))
    assert m.replacement.strip() == "g = cluster0(x, self.proj(x), self.weight)"
    assert p.clusters == (0,)
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert result.clusters == (0,)
    assert "g = cluster0(x, self.proj(x), self.weight)" in path.read_text()
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "M", torch.randn(3, 8))


# A base layer whose `__call__` only forwards, or whose subclasses' `forward` is wrapped at
# class creation (transformers' GradientCheckpointingLayer); `{norm_forward}` is the norm's.
FORWARDING_BASES = {
    "__call__": '''\
class Layer(nn.Module):
    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs)
''',
    "__init_subclass__": '''\
class Layer(nn.Module):
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        forward = cls.forward

        @functools.wraps(forward)
        def forward_with_checkpointing(self, *args, **kwargs):
            return forward(self, *args, **kwargs)

        cls.forward = forward_with_checkpointing
''',
}

LAYERED = '''\
import functools

import torch
import torch.nn as nn


{base}

class RMSNorm(Layer):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)
        self.eps = eps
        self.proj = nn.Linear(d, d)

    def forward(self, x):
{norm_forward}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_like = nn.Linear(8, 8)
        self.norm = RMSNorm(8)

    def forward(self, x):
        h = x + self.attn_like(x)
        h = self.norm(h)
        return self.attn_like(h)
'''
NORM = "        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight"
# The norm also runs a layer and an activation: no cluster holds the whole call.
NORM_THEN_MORE = (
    "        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight\n"
    "        return torch.relu(self.proj(y)) * 2.0")


def layered(path: Path, base: str, norm_forward: str) -> Path:
    path.write_text(LAYERED.format(base=FORWARDING_BASES[base], norm_forward=norm_forward))
    return path


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("base", FORWARDING_BASES)
def test_a_call_through_a_forwarding_layer_maps_at_its_line_and_applies(tmp_path, capture, base):
    path = layered(tmp_path / "layered.py", base, NORM)
    analysis, mappings, p = plan(path, capture, "Block")
    (m,) = [m for m, c in zip(mappings, analysis.clusters, strict=True) if "add" in c.ops]
    assert m.quality == EXACT, m.reason
    assert (m.start, m.end) == (line_of(path, "h = x + self.attn_like(x)"),
                                line_of(path, "h = self.norm(h)"))
    assert m.replacement.strip() == "h = cluster0(x, self.attn_like(x), self.norm.weight)"
    assert m.cluster_index in p.clusters
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert "h = self.norm(h)" not in path.read_text()
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Block", torch.randn(3, 8))


@pytest.mark.parametrize("base", FORWARDING_BASES)
def test_a_half_fused_call_through_a_forwarding_layer_names_the_layers_forward(tmp_path, base):
    path = layered(tmp_path / "partial.py", base, NORM_THEN_MORE)
    analysis, mappings, p = plan(path, "fx", "Block")
    call = line_of(path, "h = self.norm(h)")
    (m,) = [m for m, c in zip(mappings, analysis.clusters, strict=True) if "add" in c.ops]
    assert m.quality == POINTER
    # The callee is the norm's forward, not the wrapper the call went through.
    assert m.reason.startswith(f"only part of the call at line {call} (`RMSNorm.forward`) is "
                               "in the cluster"), m.reason
    assert m.cluster_index not in p.clusters


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("base", FORWARDING_BASES)
def test_a_forwarding_layer_whose_forward_returns_a_tuple_is_not_lifted(tmp_path, capture, base):
    """`a, b = self.act(h)`: the wrapper returns one expression, the forward behind it a
    tuple; the kernel's results cannot be bound to those names."""
    path = tmp_path / "tuple_layer.py"
    path.write_text(f'''\
import functools

import torch
import torch.nn as nn


{FORWARDING_BASES[base]}

class ActKeep(Layer):
    def forward(self, x):
        return torch.tanh(x) * 2.0, x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Linear(8, 8)
        self.act = ActKeep()

    def forward(self, x):
        h = self.p(x) * 3.0
        a, b = self.act(h)
        return self.p(a) + self.p(b)
''')
    _, (m,), p = plan(path, capture, "Block")
    assert m.quality == POINTER, m.replacement
    assert "returns several values" in m.reason and "ActKeep.forward" in m.reason, m.reason
    assert p.clusters == ()


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_wrapper_that_computes_an_op_of_its_own_is_not_looked_through(tmp_path, capture):
    """`x = x * 2.0` in the wrapper runs at the caller's line too: an edit replacing the call
    of `rms_norm` alone would drop it."""
    path = tmp_path / "doubling.py"
    path.write_text(DECORATED_HELPERS.format(before="    @functools.wraps(fn)\n", after="")
                    .replace("    def wrapper(*args, **kwargs):\n",
                             "    def wrapper(x, *args, **kwargs):\n        x = x * 2.0\n")
                    .replace("return fn(*args, **kwargs)", "return fn(x, *args, **kwargs)")
                    .replace("    @passthrough\n    def _scale", "    def _scale"))
    analysis, mappings, p = plan(path, capture)
    for m in mappings:
        assert m.quality == POINTER, m.replacement
    assert p.clusters == ()


LOOPED_WRAPPED_BLOCKS = '''\
import functools

import torch
import torch.nn as nn


def passthrough(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    @passthrough
    def forward(self, x):
        h = self.proj(torch.tanh(x))
        return x + h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for blk in self.blocks:
            x = blk(
                x)
        return x
'''


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_cluster_joining_two_calls_through_a_wrapper_names_the_callers_line(tmp_path,
                                                                             capture):
    """Block 0's `x + h` fuses with block 1's `tanh`: two calls of the wrapped forward. The
    reason names the loop's line that called each block (a call written over two lines, its
    brackets closed), not the wrapper's `return fn(*args, **kwargs)` both went through."""
    path = tmp_path / "looped.py"
    path.write_text(LOOPED_WRAPPED_BLOCKS)
    analysis, mappings, p = plan(path, capture, "Net")
    (m,) = [m for m, c in zip(mappings, analysis.clusters, strict=True)
            if set(c.ops) == {"add", "tanh"}]
    call, add, tanh = (line_of(path, t) for t in ("x = blk(", "return x + h",
                                                    "h = self.proj(torch.tanh(x))"))
    assert m.quality == POINTER and m.cluster_index not in p.clusters
    assert m.reason.startswith(
        f"the cluster joins `add` (line {add}) of the call at line {call} (`x = blk(...)`) on "
        f"`blk` (`self.blocks[0]`) with `tanh` (line {tanh}) of another call at line {call} "
        "(`x = blk(...)`) on `blk` (`self.blocks[1]`) of `Block.forward`"), m.reason
    assert m.reason.endswith("(here both in their caller, `Net.forward`)"), m.reason
    assert "return fn(" not in m.reason


def wrapped_resblocks(path: Path, b2_eps: bool) -> Path:
    """test_apply_unet's two ResBlocks, their forward behind a `functools.wraps` decorator;
    with `b2_eps`, b2's first GroupNorm has another eps (so cluster 0 cannot serve it)."""
    src = (DECORATED_HELPERS.split("@passthrough")[0].replace("import torch.nn as nn\n", "")
           + RESBLOCK.replace("    def forward(s, x, emb):",
                              "    @passthrough\n    def forward(s, x, emb):"))
    if b2_eps:
        src = src.replace("def __init__(s, ch, temb):", "def __init__(s, ch, temb, eps=1e-5):"
                          ).replace("s.n1 = nn.GroupNorm(8, ch)",
                                    "s.n1 = nn.GroupNorm(8, ch, eps=eps)").replace(
            "self.b2 = ResBlock(16, 32)", "self.b2 = ResBlock(16, 32, 1e-3)")
    path.write_text(src.format(before="    @functools.wraps(fn)\n", after=""))
    return path


def test_another_call_through_a_wrapper_is_said_at_the_callers_line(tmp_path):
    """The served call, the call a line also runs in and the calls a cluster joins: each at
    `h = self.b2(h, emb)` (or b1's), never at the wrapper's `return fn(*args, **kwargs)`."""
    path = wrapped_resblocks(tmp_path / "served.py", b2_eps=False)
    b1, b2 = line_of(path, "h = self.b1(h, emb)"), line_of(path, "h = self.b2(h, emb)")
    maps = _unet_maps(path)
    assert maps[0].exact and maps[0].serves[0].site == (
        f"at line {b2} (`h = self.b2(h, emb)`) on `self.b2`"), maps[0].reason
    assert maps[4].reason.startswith(
        f"the cluster joins `add` (line {line_of(path, 'return x + h')}) of the call at line "
        f"{b1} (`h = self.b1(h, emb)`) on `self.b1` with `add`"), maps[4].reason
    norm = line_of(path, "h = s.c1(F.silu(s.n1(x)))")
    maps = _unet_maps(wrapped_resblocks(tmp_path / "other.py", b2_eps=True))
    assert maps[0].reason.startswith(
        f"line {norm} (`s.n1(x)`) also runs in another call of `ResBlock.forward` at line "
        f"{b2} (`h = self.b2(h, emb)`), where it is part of cluster 2"), maps[0].reason
    assert not [m.reason for m in maps if m.reason and "return fn(" in m.reason]
