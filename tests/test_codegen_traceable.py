"""A generated file's `traceable(*inputs, wrap)`, what torch.compile traces (on fake tensors):
every kernel launch goes through `wrap` (``torch.library.wrap_triton`` there), with the
launcher's grids and results, and none of the launcher's caches change. Run here with a
recording `wrap` that launches the kernel itself, on a kernel reading its input through a
view and on a split-rows reduction (three kernels)."""

from __future__ import annotations

import torch
from codegen_harness import DEVICE, Lambda, compare, to_device
from test_codegen_split_rows import FAMILIES, _load

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.codegen.operators import _shapes_only
from fusion_core.codegen.reference import capture_values, eager_cluster
from fusion_core.pipeline import analyze


def _recording(module):
    """A `wrap` that records which of the module's kernels each launch used, and its grid."""
    names = {id(getattr(module, n)): n.removeprefix(f"{module.NAME}_")
             for n in dir(module) if n.startswith(f"{module.NAME}_")}
    seen = []

    def wrap(kernel):
        class Launch:
            def __getitem__(self, grid):
                seen.append((names[id(kernel)], grid))
                return kernel[grid]

        return Launch()

    return wrap, seen


def test_a_view_kernel_traces_through_wrap_with_the_launchers_result(tmp_path):
    torch.manual_seed(0)
    w, b = torch.randn(16), torch.randn(16)
    fn = Lambda(lambda m, x: torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (16,),
                                                            m.w, m.b), 1, w=w, b=b)
    x = torch.randn(2, 16, 4, 4)
    analysis = analyze(fn, x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster)
    assert "def _views(" in kernel.source  # the launcher views its input: traceable too
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    values = capture_values(analysis, x)
    args = tuple(to_device(values[n]) for n in cluster.inputs)
    (want,) = eager_cluster(analysis, cluster)(*(values[n] for n in cluster.inputs))
    wrap, seen = _recording(module)
    got = module.traceable(*args, wrap=wrap)
    assert [name for name, _ in seen] == ["kernel"]
    assert not module.LAUNCH_CACHE and not module.DIRECT_LAUNCH
    compare(got.cpu(), want, "traced permute → layer_norm")
    assert got.stride() == getattr(module, kernel.name)(*args).stride()
    shaped = module.traceable(*args, wrap=_shapes_only)
    assert (shaped.shape, shaped.dtype) == (want.shape, want.dtype)


def test_a_split_rows_reduction_traces_all_three_kernels_through_wrap(tmp_path):
    torch.manual_seed(3)
    module, launch, inputs, want = _load(FAMILIES["softmax"], torch.randn(2, 4096), tmp_path)
    launch(*inputs)  # keeps the bucket's configuration: four programs per row
    wrap, seen = _recording(module)
    got = module.traceable(*inputs, wrap=wrap)
    assert seen == [("partials", (2, 4)), ("finish", (2, 4))]
    compare(got.cpu(), want, "traced split softmax")
    assert str(got.device).startswith(DEVICE)


def test_a_trace_before_any_eager_call_takes_the_tuning_cache_choice(tmp_path, monkeypatch):
    """A new process that compiles the applied model before calling it eagerly: `traceable`
    launches the configuration an earlier process timed and stored on disk, as the eager call
    would (GPU identity and timing faked here: off CUDA nothing is read)."""
    monkeypatch.setenv("FUSION_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    analysis = analyze(Lambda(lambda m, x: torch.softmax(x * 2.0, -1)), torch.randn(64, 256))
    kernel = generate(analysis, analysis.clusters[0])
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    identity = ["NVIDIA H200", "3.9.0", "ab" * 32]
    monkeypatch.setattr(module, "_cache_identity", lambda device: identity)
    monkeypatch.setattr(module, "_timing_on", lambda device: True)
    monkeypatch.setattr(module, "TUNE_MIN_ELEMENTS", 0)
    x = to_device(torch.randn(64, 256))
    *_, tune_key, configs = module._plan(x)
    assert len(configs) > 1
    stored = configs[-1]
    module._cache_write(module._cache_path(identity), identity, module._cache_key(tune_key),
                        stored)
    launched, real = [], module._launch
    monkeypatch.setattr(module, "_launch", lambda config, *a, **k: launched.append(config)
                        or real(config, *a, **k))
    wrap, _ = _recording(module)
    got = module.traceable(x, wrap=wrap)
    assert launched == [stored] and not module.CHOSEN
    compare(got.cpu(), torch.softmax(x.cpu() * 2.0, -1), "traced with the stored choice")
