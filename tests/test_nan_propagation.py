"""A NaN goes through a fused kernel as it goes through eager: relu, clamp, hardtanh,
maximum, minimum, hardsigmoid and hardswish give NaN for NaN (Triton's `tl.maximum` alone
returns the other operand, so a fused relu turned a NaN into 0 and hid it)."""

import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import DEVICE, Lambda

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.pipeline import analyze

NAN_FED = [
    ("relu", lambda m, x, y: torch.relu(x * 2.0) + y),
    ("clamp", lambda m, x, y: torch.clamp(x * 2.0, -1.0, 1.0) + y),
    ("hardtanh", lambda m, x, y: F.hardtanh(x * 2.0) + y),
    ("maximum", lambda m, x, y: torch.maximum(x * 2.0, y) + 1.0),
    ("minimum", lambda m, x, y: torch.minimum(y, x * 2.0) + 1.0),
    ("hardsigmoid", lambda m, x, y: F.hardsigmoid(x * 2.0) + y),
    ("hardswish", lambda m, x, y: F.hardswish(x * 2.0) + y),
]


@pytest.mark.parametrize("fn", [f for _, f in NAN_FED], ids=[n for n, _ in NAN_FED])
def test_a_nan_stays_nan_where_eager_keeps_it(fn):
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    a = analyze(Lambda(fn, 2), x, y)
    (cluster,) = a.clusters
    (path,) = write_kernels([generate(a, cluster)], Path(tempfile.mkdtemp()))
    launch = load_kernel(path).cluster0
    x[0, :3] = float("nan")  # through the clamp-like op
    y[1, :2] = float("nan")  # the other operand of maximum / minimum
    want = fn(None, x, y)
    got = launch(x.to(DEVICE), y.to(DEVICE)).cpu()
    assert want[0, :3].isnan().all() and want[1, :2].isnan().all()
    torch.testing.assert_close(got, want, equal_nan=True)
