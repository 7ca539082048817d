"""Generated kernels pass Triton's real compiler front end for an sm_90 (H200) target.

The interpreter runs kernels as NumPy and accepts code the compiler rejects (dtype
mismatches, loop-carried values that change type); this compiles a spread of kernels,
in one subprocess, without a GPU. FUSION_FULL_COMPILE=1 goes all the way to cubin.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from codegen_harness import Lambda, compile_for_gpu

from fusion_core.codegen import Tuning, generate
from fusion_core.codegen.reference import capture_values, cluster_inputs
from fusion_core.pipeline import analyze

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from example_net import ExampleNet  # noqa: E402
from microgpt import MicroGPT  # noqa: E402

LOOP = Tuning(max_block=64, loop_block=64)
W = 100


def _column_result(m, x, b, y):
    bb = torch.sigmoid(b * 2) + 1  # escapes too: a (7, 1) result of a (7, 2) tiled kernel
    return x.t() * y + bb, bb  # `y` contiguous: two memory orders, so the kernel tiles


def _jobs(model, inputs, tmp_path, tag, **gen):
    analysis = analyze(model, *inputs)
    values = capture_values(analysis, *inputs)
    return [(generate(analysis, c, **gen), tmp_path / f"{tag}{c.index}",
             cluster_inputs(analysis, c, values)) for c in analysis.clusters]


def test_kernels_compile_for_sm90(tmp_path):
    half = torch.float16
    jobs = _jobs(ExampleNet(), (torch.randn(4, 1024),), tmp_path, "en")
    jobs += _jobs(MicroGPT(), (torch.randint(0, 256, (1, 16)),), tmp_path, "mg")
    jobs += _jobs(MicroGPT(), (torch.randint(0, 256, (1, 16)),), tmp_path, "mgloop",
                  tuning=Tuning(max_block=8, loop_block=8))
    reductions = [
        lambda m, x: F.softmax(x * 2, dim=-1), lambda m, x: F.log_softmax(x, dim=-1),
        lambda m, x: F.layer_norm(x, (W,), m.w, m.b), lambda m, x: F.rms_norm(x, (W,), m.w),
        lambda m, x: (x * 2).sum(-1), lambda m, x: x - (x * 2).mean(-1, keepdim=True),
        lambda m, x: torch.amax(x + 1, dim=-1), lambda m, x: torch.amin(x * 2, dim=-1) + 1,
    ]
    for i, fn in enumerate(reductions):
        model = Lambda(fn, w=torch.randn(W), b=torch.randn(W))
        jobs += _jobs(model, (torch.randn(3, W),), tmp_path, f"red{i}-", tuning=LOOP)
        if i in (0, 2, 4):
            jobs += _jobs(model.to(half), (torch.randn(3, W, dtype=half),), tmp_path, f"h{i}")
    per_row = Lambda(lambda m, x, c, b: (x * c).sum(-1) + b)
    jobs += _jobs(per_row, (torch.randn(3, W), torch.randn(3, 1), torch.randn(3)), tmp_path,
                  "row", tuning=LOOP)
    ints = (torch.randint(0, 3, (3, W)), torch.randint(0, 3, (3, W)))
    for i, fn in enumerate([lambda m, a, b: (a + 1) == b, lambda m, a, b: (a * b).sum(-1),
                            lambda m, a, b: torch.amax(a - b, dim=-1),
                            lambda m, a, b: (a.float() * 0.5).half() + 1]):
        jobs += _jobs(Lambda(fn), ints, tmp_path, f"int{i}-")
        jobs += _jobs(Lambda(fn), ints, tmp_path, f"intloop{i}-", tuning=LOOP)
    # A bool reduction's lanes stay int1 through the loop (a literal 1 made them int32).
    mask_min = Lambda(lambda m, x: x.float() * (~torch.amin(x & True, -1, keepdim=True)).float())
    jobs += _jobs(mask_min, (torch.rand(3, W) > 0.5,), tmp_path, "boolloop", tuning=LOOP)
    casts = Lambda(lambda m, x: torch.logical_not(torch.sigmoid(x.to(torch.int32) * 2.5) > 0.5))
    jobs += _jobs(casts, (torch.randn(3, W),), tmp_path, "cast")
    tiled = [  # 2-D tiles: a column result, a bool mask and half data through transposed views
        (_column_result, (torch.randn(2, 7), torch.randn(7, 1), torch.randn(7, 2))),
        (lambda m, x, k: x.masked_fill(k.t(), 0.5) * 2, (torch.randn(4, 6),
                                                          torch.rand(6, 4) > 0.5)),
        (lambda m, x, y: torch.sigmoid(x.t()) * y, (torch.randn(6, 4, dtype=half),
                                                     torch.randn(4, 6, dtype=half))),
        (lambda m, x, y, z: x.permute(0, 2, 1, 3) * y + z, (
            torch.randn(2, 3, 4, 5), torch.randn(4, 1, 5), torch.randn(2, 4, 3, 5))),
    ]
    for i, (fn, inputs) in enumerate(tiled):
        jobs += _jobs(Lambda(fn), inputs, tmp_path, f"tile{i}-")
    unique = {}
    for k, tmp, args in jobs:  # the same kernel body (other than its name) compiles once
        body = k.source[k.source.index("@triton.jit"):k.source.index("NAME = ")]
        unique.setdefault(body.replace(k.name, "clusterN"), (k, tmp, args))
    assert sum(k.tiled for k, _, _ in unique.values()) >= len(tiled)
    results = compile_for_gpu(list(unique.values()))
    assert len(results) == len(unique) >= 27
    assert all(results.values()), results
