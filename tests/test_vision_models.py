"""torchvision models (small inputs, random weights): located in torchvision's files, their
in-place activations fused, library files never edited, wrapped leaves seen through.

Skipped where torchvision cannot be imported (CI installs none); tests/vision_libs.py imports
it where only a CUDA build matching another torch exists (this machine).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from vision_libs import import_torchvision

from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze
from fusion_core.sourcemap.mapping import map_clusters

tv = import_torchvision()
if tv is None:
    pytest.skip("torchvision is not importable here", allow_module_level=True)

IMAGE = (1, 3, 32, 32)


def _analyze(model: torch.nn.Module):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analyze(model, IMAGE)


@pytest.fixture(scope="module")
def resnet():
    return _analyze(tv.models.resnet18(weights=None, num_classes=10))


def test_resnet_batch_norms_fuse_with_their_inplace_relus(resnet):
    assert not any(n.kind is OpKind.INPLACE for n in resnet.graph.nodes)
    fused = [c.ops for c in resnet.clusters]
    assert fused.count(("batch_norm", "relu")) >= 8
    # The head's global average pool is a reduction that joins the last block's add → relu.
    assert all(op in ("batch_norm", "relu", "add", "adaptive_avg_pool2d")
               for ops in fused for op in ops)


def test_resnet_clusters_point_into_torchvision_but_are_never_edited(resnet):
    files = {c.lines.file for c in resnet.clusters}
    assert files and all(f.endswith("torchvision/models/resnet.py") for f in files)
    mappings = map_clusters(resnet)
    assert all(not m.exact and "installed library" in m.reason for m in mappings)


def test_stochastic_depth_is_seen_through_by_auto_capture():
    cnb = tv.models.convnext.CNBlockConfig
    model = tv.models.convnext.ConvNeXt([cnb(16, 32, 1), cnb(32, None, 1)],
                                        stochastic_depth_prob=0.1, num_classes=10)
    a = _analyze(model)
    assert a.graph.frontend == "export"
    assert "`stochastic_depth`" in a.capture_choice and "chose torch.export" in a.capture_choice


def test_vit_rank_assert_is_not_a_reader():
    model = tv.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                        hidden_dim=32, mlp_dim=64, num_classes=10)
    a = _analyze(model)
    assert a.graph.frontend == "fx"
    assert not any(n.target == "torch._assert" for n in a.graph.nodes)
    assert len(a.clusters) == 5 and all("layer_norm" in c.ops for c in a.clusters)
