"""benchmarks/tile_order_probe.py's columns-first kernel on any machine (compiled where there
is a GPU, interpreted elsewhere): over several row and column blocks it computes what the
generated kernel and eager compute, and only its program order differs. The timed run needs
CUDA."""

import sys
from pathlib import Path

import torch
from codegen_harness import DEVICE, compare, poison_empty

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import tile_order_probe as probe  # noqa: E402
from gpu_clusters import as_tuple  # noqa: E402
from panel_cases import CASES, Fn2  # noqa: E402
from shapes_panel import eager_cluster, fused_cluster  # noqa: E402

from fusion_core.codegen import load_kernel  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402


def test_columns_first_tiles_compute_what_the_generated_kernel_does(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_ADVISOR_AUTOTUNE", "0")  # a GPU keeps the heuristic's tile too
    case = CASES[20]  # (y*g).permute(0,3,1,2)+x, float32
    gen = torch.Generator().manual_seed(0)
    module = Fn2(case.fn, 96, {"g": torch.randn(96, generator=gen)}).to(DEVICE)
    # rows N x C = 192 and columns H x W = 576: 3 x 9 tiles of 64 x 64
    model_inputs = (torch.randn(2, 24, 24, 96, generator=gen).to(DEVICE),
                    torch.randn(2, 96, 24, 24, generator=gen).to(DEVICE))
    analysis = analyze(module, *model_inputs)
    cluster, _ = fused_cluster(analysis)
    inputs = cluster_inputs(analysis, cluster, capture_values(analysis, *model_inputs),
                            torch.Generator(DEVICE).manual_seed(1))
    want = as_tuple(eager_cluster(analysis, cluster)(*inputs))
    outputs, texts = [], []
    for order in probe.ORDERS:
        path, name = probe.kernel_file(analysis, cluster, tmp_path / order.replace(" ", "_"),
                                       order)
        kernel_module = load_kernel(path)
        poison_empty(kernel_module)  # an element no program writes stays NaN
        got = as_tuple(getattr(kernel_module, name)(*inputs))
        for g, w in zip(got, want, strict=True):
            compare(g, w, order)  # compiled on a GPU, y*g+x may be one fused multiply-add
        assert [c[:2] for c in kernel_module.CHOSEN.values()] == [(64, 64)]
        outputs.append(got)
        texts.append(path.read_text())
    assert all(torch.equal(a, b) for a, b in zip(*outputs, strict=True))  # same ops a value
    assert "col_block = place % tl.num_programs(1)" in texts[1]
    assert "place = tl.program_id(0)" not in texts[0]
