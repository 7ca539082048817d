"""`--apply` on a small UNet decoder whose upsample is read inside the kernel: `self.up(h)`
(`nn.Upsample`, nearest, factor 2), the skip concatenated, GroupNorm and SiLU, one kernel
taking the low-resolution `h` (``ir/upsample.py``). Kernels run under the Triton
interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import importlib
import sys

import torch
import torch._dynamo
from apply_checks import DEVICE, apply_net, original_and_rewritten, same_outputs
from torch._subclasses.fake_tensor import FakeTensorMode

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.fused import package_name

DECODER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, 8, 1)
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.up = nn.Upsample(scale_factor=2)
        self.norm = nn.GroupNorm(4, 16)
        self.out = nn.Conv2d(16, 3, 1)

    def forward(self, x):
        skip = self.inp(x)
        h = self.down(skip)
        h = torch.cat([self.up(h), skip], 1)
        h = F.silu(self.norm(h))
        return self.out(h)
"""


def test_a_decoder_upsample_cat_norm_silu_is_one_applied_edit(tmp_path):
    path = tmp_path / "unet.py"
    path.write_text(DECODER)
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))], class_name="Net")
    (cluster,) = analysis.clusters
    assert cluster.ops == ("interpolate", "cat", "group_norm", "silu")
    (m,) = map_clusters(analysis)
    assert m.exact, m.reason
    assert (m.start, m.end) == (18, 19)
    assert m.replacement == ("        h = cluster0(h, skip, self.norm.weight.reshape(-1, 1, 1), "
                             "self.norm.bias.reshape(-1, 1, 1))")  # the low-resolution `h`
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    same_outputs(tmp_path, path, DECODER)


def test_the_applied_decoder_is_an_operator_that_compiles_with_fullgraph(tmp_path):
    # The launcher's `traceable` path reads the low-resolution input through `_repeated`
    # (unsqueeze + expand) on fake tensors too: the fake implementation gives the real
    # launcher's shapes and strides, and `torch.compile(fullgraph=True)` runs the model.
    path = tmp_path / "unet.py"
    path.write_text(DECODER)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    before, after = (m.to(DEVICE) for m in original_and_rewritten(tmp_path, path, DECODER))
    package = sys.modules[package_name(path.stem)]
    kernels = importlib.import_module(f"{package.__name__}.cluster0")
    inputs = tuple(torch.randn(s, device=DEVICE) for s in ((2, 8, 4, 4), (2, 8, 8, 8),
                                                            (16, 1, 1), (16, 1, 1)))
    with torch.no_grad():
        real = kernels.cluster0(*inputs)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = package.cluster0.operator(*(mode.from_tensor(t) for t in inputs))
    assert (fake.shape, fake.dtype, fake.stride()) == (real.shape, real.dtype, real.stride())
    torch._dynamo.reset()
    compiled = torch.compile(after, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        for batch in (2, 3):
            x = torch.randn(batch, 3, 8, 8, device=DEVICE)
            torch.testing.assert_close(compiled(x), before(x), atol=1e-5, rtol=1e-4)
