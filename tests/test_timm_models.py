"""timm models (small inputs, random weights): the FX graph computes what the model does,
norm-and-activation layers fuse, and analysis leaves the model copyable.

Skipped where timm (or the torchvision it imports) cannot be imported: CI installs neither;
tests/vision_libs.py imports them where only a CUDA torchvision build exists (this machine).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from vision_libs import import_timm

from fusion_core.pipeline import analyze

timm = import_timm()
if timm is None:
    pytest.skip("timm is not importable here", allow_module_level=True)


def _build_and_analyze(name: str, shape: tuple[int, ...], **kw):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = timm.create_model(name, pretrained=False, num_classes=10, **kw).eval()
        return model, analyze(model, shape)


@pytest.mark.parametrize("name, act", [("efficientnet_b0", "silu"),
                                       ("mobilenetv3_small_100", "hardswish")])
def test_batch_norm_act_layers_keep_and_fuse_their_activation(name, act):
    model, a = _build_and_analyze(name, (1, 3, 32, 32))
    assert a.graph.frontend == "fx"
    x = torch.randn(1, 3, 32, 32)
    torch.testing.assert_close(a.graph_module(x), model(x))
    assert sum(c.chain.startswith(f"batch_norm → {act}") for c in a.clusters) >= 5


def test_levit_keeps_no_proxy_in_its_bias_cache_and_still_copies():
    model, a = _build_and_analyze("levit_128s", (1, 3, 64, 64), img_size=64)
    caches = [m.attention_bias_cache for m in model.modules() if hasattr(m, "attention_bias_cache")]
    assert caches and all(c == {} for c in caches)
    x = torch.randn(1, 3, 64, 64)
    torch.testing.assert_close(copy.deepcopy(model).to("cpu")(x), model(x))
