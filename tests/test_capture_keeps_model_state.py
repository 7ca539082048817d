"""Capturing leaves the user's model as it was: a forward that memoizes a tensor in its own
attributes (timm's LeViT caches attention biases per device) keeps no FX Proxy there, so
the model still deep-copies (the CLI's and the zoo's Inductor comparison copy it)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

from fusion_core.ir.module_state import kept_as_it_was
from fusion_core.pipeline import analyze


class CachedBiasAttention(nn.Module):
    """Attention whose positional bias is gathered once per device and kept in a dict."""

    def __init__(self, dim: int = 4, positions: int = 3) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.table = nn.Parameter(torch.randn(2 * positions))
        pairs = torch.arange(positions)
        self.register_buffer("index", (pairs[:, None] - pairs[None, :]).abs(), persistent=False)
        self.bias_cache: dict[str, torch.Tensor] = {}

    def bias(self, device: torch.device) -> torch.Tensor:
        key = str(device)
        if key not in self.bias_cache:
            self.bias_cache[key] = self.table[self.index]
        return self.bias_cache[key]

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) * 0.5 + self.bias(x.device)
        return x + scores.softmax(-1) @ v


def _proxies(model: nn.Module) -> list[str]:
    return [f"{name}.{attr}" for name, m in model.named_modules() for attr, v in vars(m).items()
            if isinstance(v, fx.Proxy) or (isinstance(v, dict) and any(
                isinstance(e, fx.Proxy) for e in v.values()))]


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_analysis_leaves_a_caching_forward_as_it_was(capture):
    torch.manual_seed(0)
    model = nn.Sequential(CachedBiasAttention(), nn.GELU(), CachedBiasAttention()).eval()
    x = torch.randn(2, 3, 4)
    a = analyze(model, x, capture=capture)
    assert any("softmax" in c.ops for c in a.clusters)
    assert _proxies(model) == [] and all(m.bias_cache == {} for m in model[::2])
    copied = copy.deepcopy(model)
    torch.testing.assert_close(copied(x), model(x))
    torch.testing.assert_close(a.graph_module(x), model(x))


class RemembersLast(nn.Module):
    def forward(self, x):
        self.last = x * 1.0  # a plain attribute, set on every call
        return torch.relu(x) + 1.0


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_an_attribute_set_in_forward_is_not_left_holding_a_stand_in(capture):
    model = nn.Sequential(RemembersLast()).eval()
    analyze(model, (2, 4), capture=capture)
    assert not hasattr(model[0], "last")


class ConstantInForward(nn.Module):
    def forward(self, x):
        return (x * torch.tensor([1.0, 2.0, 3.0])).relu()


def test_a_tensor_made_in_forward_stays_in_the_graph_not_in_the_model():
    model = ConstantInForward()
    x = torch.randn(2, 3)
    a = analyze(model, x, capture="fx")
    assert [c.ops for c in a.clusters] == [("mul", "relu")]
    torch.testing.assert_close(a.graph_module(x), model(x))
    assert not [k for k in vars(model) if "constant" in k]


def test_kept_as_it_was_undoes_added_replaced_and_mutated_attributes():
    model = nn.Sequential(nn.Linear(2, 2))
    inner = model[0]
    inner.cache, inner.seen, inner.tag = {"a": 1}, [1], "before"
    cache, seen, weight = inner.cache, inner.seen, inner.weight
    with kept_as_it_was(model):
        inner.cache["b"] = 2
        inner.seen.append(2)
        inner.tag = "after"
        inner.extra = object()
        model.add_module("added", nn.ReLU())
    assert inner.cache is cache and cache == {"a": 1}
    assert inner.seen is seen and seen == [1]
    assert inner.tag == "before" and not hasattr(inner, "extra")
    assert list(model._modules) == ["0"] and inner.weight is weight
