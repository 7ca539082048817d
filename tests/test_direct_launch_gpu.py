"""Direct launches of generated kernels on a CUDA GPU: a warm call skips Triton's dispatch,
gives what Triton's path gives, leaves misaligned inputs to Triton, and is captured by a CUDA
graph (it launches on the capturing stream). The same logic on CPU, against stand-ins:
test_codegen_direct_launch.py."""

import pytest
import torch
from codegen_harness import Lambda

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.pipeline import analyze

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


class _Counting:
    """The module's jitted kernel, counting the launches that go through Triton."""

    def __init__(self, kernel) -> None:
        self.kernel, self.launches = kernel, 0

    def __getattr__(self, name):
        return getattr(self.kernel, name)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches += 1
            return self.kernel[grid](*args, **kwargs)

        return launch


def _scaled_add(m, x, y):
    return torch.relu(x * 2.0 + y)


def _softmax(m, x):
    return torch.softmax(x * 2.0, dim=-1)


def _loaded(tmp_path, fn, *example):
    analysis = analyze(Lambda(fn), *example)
    assert len(analysis.clusters) == 1, [c.chain for c in analysis.clusters]
    kernel = generate(analysis, analysis.clusters[0])
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    counting = _Counting(getattr(module, f"{kernel.name}_kernel"))
    setattr(module, f"{kernel.name}_kernel", counting)
    return module, getattr(module, kernel.name), counting


def _cuda(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda").to(dtype)


def test_warm_calls_launch_directly_and_match_eager(tmp_path):
    module, launch, counting = _loaded(
        tmp_path, _scaled_add, torch.randn(64, 96), torch.randn(64, 96)
    )
    for _ in range(2):  # the bucket's configuration is chosen, then kept with its launcher
        launch(_cuda(64, 96), _cuda(64, 96))
    ((_, _, _, direct),) = module.DIRECT_LAUNCH.values()  # guard, scalars, plan, launch
    assert direct is not None
    before = counting.launches
    for _ in range(5):
        x, y = _cuda(64, 96), _cuda(64, 96)
        torch.testing.assert_close(launch(x, y), _scaled_add(None, x, y))
    assert counting.launches == before


def test_direct_and_triton_launches_give_the_same_bits(tmp_path):
    module, launch, counting = _loaded(tmp_path, _softmax, torch.randn(32, 1000))
    x = _cuda(32, 1000)
    launch(x)
    direct = launch(x)
    module.DIRECT_LAUNCH.update(dict.fromkeys(module.DIRECT_LAUNCH, False))
    before = counting.launches
    through_triton = launch(x)
    assert counting.launches == before + 1
    assert torch.equal(direct, through_triton)
    torch.testing.assert_close(direct, _softmax(None, x))


def test_each_dtype_gets_its_own_direct_launcher(tmp_path):
    module, launch, _ = _loaded(tmp_path, _softmax, torch.randn(32, 256))
    for dtype in (torch.float32, torch.float16, torch.float32, torch.float16):
        x = _cuda(32, 256, dtype=dtype)
        torch.testing.assert_close(launch(x), _softmax(None, x.float()), atol=2e-3, rtol=2e-3)
    assert len(module.DIRECT_LAUNCH) == 2
    assert all(entry[3] is not None for entry in module.DIRECT_LAUNCH.values())


def test_a_misaligned_input_goes_through_triton(tmp_path):
    module, launch, counting = _loaded(tmp_path, _softmax, torch.randn(32, 256))
    for _ in range(2):
        launch(_cuda(32, 256))
    shifted = _cuda(32 * 256 + 1)[1:].view(32, 256)  # the same key, data 4 bytes off
    assert shifted.data_ptr() % 16
    before = counting.launches
    torch.testing.assert_close(launch(shifted), _softmax(None, shifted))
    assert counting.launches == before + 1 and len(module.LAUNCH_CACHE) == 1


def test_a_direct_launch_is_captured_in_a_cuda_graph(tmp_path):
    module, launch, counting = _loaded(
        tmp_path, _scaled_add, torch.randn(64, 96), torch.randn(64, 96)
    )
    x, y = _cuda(64, 96), _cuda(64, 96)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the default stream, as capture wants
        for _ in range(2):
            launch(x, y)
    torch.cuda.current_stream().wait_stream(side)
    before = counting.launches
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = launch(x, y)
    assert counting.launches == before  # the direct launcher was what got captured
    for _ in range(2):
        x.copy_(_cuda(64, 96))
        y.copy_(_cuda(64, 96))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, _scaled_add(None, x, y))
