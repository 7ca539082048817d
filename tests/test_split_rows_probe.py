"""benchmarks/split_rows_probe.py at a tiny size on any machine: its case is the panel's, its
`--before` form takes exactly the finish kernel's scalar lines out, and both forms of the split
kernels (and the recorder around them) still match eager. The timed run needs CUDA."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import split_rows_probe as probe  # noqa: E402
import torch  # noqa: E402
from codegen_harness import to_device  # noqa: E402

from fusion_core.codegen import Tuning, generate, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402


def test_probe_forms_match_eager(tmp_path):
    (case,) = [c for c in probe.CASES if c.label == probe.CASE and c.dtype == torch.float32]
    module, xs = probe.build(case, True, "cpu", torch.Generator().manual_seed(0))
    analysis = analyze(module, *xs)
    cluster, why = probe.fused_cluster(analysis)
    assert cluster is not None, why
    values = capture_values(analysis, *xs)
    inputs = cluster_inputs(analysis, cluster, values, torch.Generator().manual_seed(1))
    (want,) = eager_cluster(analysis, cluster)(*inputs)
    # rows of 70 loop over blocks of 16 and split into chunks of 16 or more
    kernel = generate(analysis, cluster, Tuning(max_block=16, loop_block=16, split_min_cols=16))
    (path,) = write_kernels([kernel], tmp_path)
    taken = probe._SCALAR_LINES.findall(path.read_text())
    # the finish and joined kernels' layer_norm: mean, rstd
    assert len(taken) == 6 and "static_assert" in taken[0] and "static_assert" in taken[3], taken
    config = (16, 1, 2, 4)
    for before in (False, True):
        state = {"compiled": {}, "config": config}
        _, launch = probe._load(path, kernel.name, state, before)
        got = launch(*map(to_device, inputs)).cpu()
        assert probe.close(got, want, torch.float32)[0], before
        assert sorted(state["compiled"][config]) == ["finish", "partials"]
    after, before = path.read_text(), path.with_name(path.stem + "_before.py").read_text()
    assert not probe._SCALAR_LINES.findall(before)
    assert len(after.splitlines()) - len(before.splitlines()) == len(taken)
