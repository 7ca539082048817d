"""A warm call's fast path (`launch_warm.py`), on CPU: the last kept plan's guard (Dynamo's
TensorGuards, in C++) spares a repeated layout its key and lookups; any other size,
stride, dtype or scalar value misses it and takes the key path, whose plans, refusals and
switch-off are as before; a kept direct launch allocates its outputs with the C++ allocator
and leaves another current device to Triton. The kernels run under the interpreter (the
direct launches through test_codegen_direct_launch's stand-in compiled kernel)."""

import math

import pytest
import torch
from codegen_harness import Lambda
from test_codegen_direct_launch import _Driver, _Interpreted
from test_run_scalars import Attention

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.pipeline import analyze

pytestmark = pytest.mark.cpu  # the stand-in interprets the kernel: see that file


class _Counted(dict):
    """A dict counting its `get` calls (the launcher's key lookups)."""

    gets = 0

    def get(self, *args):
        self.gets += 1
        return super().get(*args)


def _counting(module):
    """Count the launcher's lookups in LAUNCH_CACHE and DIRECT_LAUNCH from here on."""
    kept = type(module.DIRECT_LAUNCH)
    spied = type("Spied", (_Counted, kept), {})
    module.DIRECT_LAUNCH = spied(module.DIRECT_LAUNCH)
    module.LAUNCH_CACHE = _Counted(module.LAUNCH_CACHE)


def _lookups(module):
    return module.DIRECT_LAUNCH.gets + module.LAUNCH_CACHE.gets


def _add_softmax(m, x, y):
    return torch.softmax(x + y, dim=-1)


def _module(tmp_path, monkeypatch, fn, *example):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    analysis = analyze(Lambda(fn), *example)
    kernel = generate(analysis, analysis.clusters[0])
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    return module, getattr(module, kernel.name), kernel.name


def test_a_repeated_layout_passes_the_guard_and_builds_no_key(tmp_path, monkeypatch):
    module, launch, _ = _module(tmp_path, monkeypatch, _add_softmax, torch.randn(4, 128),
                                torch.randn(128))
    x, y = torch.randn(4, 128), torch.randn(128)
    launch(x, y)  # plan and configuration: kept (no direct launch under the interpreter)
    _counting(module)
    launch(x, y)  # found by its key, its guard kept for the next call
    assert _lookups(module) == 1 and module.DIRECT_LAUNCH.last is not None
    for _ in range(3):
        x, y = torch.randn(4, 128), torch.randn(128)
        torch.testing.assert_close(launch(x, y), _add_softmax(None, x, y))
    assert _lookups(module) == 1  # no key looked up: the guard passed


@pytest.mark.parametrize("other", ["129 columns", "strides", "dtype"])
def test_another_layout_misses_the_guard_and_gets_its_own_plan(tmp_path, monkeypatch, other):
    module, launch, _ = _module(tmp_path, monkeypatch, _add_softmax, torch.randn(4, 128),
                                torch.randn(128))
    for _ in range(2):
        launch(torch.randn(4, 128), torch.randn(128))
    armed = module.DIRECT_LAUNCH.last
    assert armed is not None
    x, y = {"129 columns": (torch.randn(4, 129), torch.randn(129)),
            "strides": (torch.randn(4, 160)[:, :128], torch.randn(128)),
            "dtype": (torch.randn(4, 128).double(), torch.randn(128).double())}[other]
    for _ in range(2):  # a new plan, then kept: its guard replaces the last one
        torch.testing.assert_close(launch(x, y), _add_softmax(None, x, y).float())
    assert len(module.LAUNCH_CACHE) == 2 and module.DIRECT_LAUNCH.last is not armed
    assert module.DIRECT_LAUNCH.last[0].check(x, y) and not armed[0].check(x, y)


def test_a_refused_layout_after_warm_calls_gets_todays_refusal(tmp_path, monkeypatch):
    module, launch, _ = _module(tmp_path, monkeypatch, _add_softmax, torch.randn(4, 128),
                                torch.randn(128))
    for _ in range(2):
        launch(torch.randn(4, 128), torch.randn(128))
    assert module.DIRECT_LAUNCH.last is not None
    bad = (torch.randn(4, 128), torch.randn(4, 128))  # `y` varies where it was broadcast
    with pytest.raises(ValueError) as warm:
        launch(*bad)
    module.LAUNCH_CACHE.clear()
    module.DIRECT_LAUNCH.clear()
    with pytest.raises(ValueError) as cold:
        launch(*bad)
    assert str(warm.value) == str(cold.value) and "`b` of shape (4, 128)" in str(warm.value)


def test_another_scalar_value_misses_the_guard(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    a = analyze(Attention("sqrt"), (2, 8, 16), (2, 8, 16), capture="fx")
    kernel = generate(a, a.clusters[0])
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    launch = getattr(module, kernel.name)
    scores = torch.randn(2, 8, 8)
    for _ in range(2):
        launch(scores, 4.0)
    assert module.DIRECT_LAUNCH.last[1] == (4.0,)
    for _ in range(2):  # same tensor layout, another scale: not the kept plan's arguments
        got = launch(scores, math.sqrt(24))
        torch.testing.assert_close(got, (scores / math.sqrt(24)).softmax(-1))
    assert module.DIRECT_LAUNCH.last[1] == (math.sqrt(24),)
    torch.testing.assert_close(launch(scores, 4.0), (scores / 4.0).softmax(-1))


@pytest.fixture
def direct(tmp_path, monkeypatch):
    """A softmax module whose kernel launches through the interpreting stand-in, its driver
    faked: warm calls launch directly."""
    import triton

    driver = _Driver()
    monkeypatch.setattr(triton.runtime.driver, "_active", driver)
    module, launch, name = _module(tmp_path, monkeypatch, _add_softmax, torch.randn(4, 24),
                                   torch.randn(24))
    stand_in = _Interpreted(getattr(module, f"{name}_kernel"))
    setattr(module, f"{name}_kernel", stand_in)
    return module, launch, stand_in, driver


def test_a_direct_launch_allocates_its_outputs_in_cpp(direct, monkeypatch):
    module, launch, stand_in, _ = direct
    made = []

    def allocate(shape, stride, dtype):
        made.append((tuple(shape), tuple(stride), dtype))
        return torch._C._dynamo.guards._empty_strided_cpu(shape, stride, dtype)

    monkeypatch.setitem(module.ALLOCATE, "cpu", allocate)  # read once the plan is kept
    x, y = torch.randn(4, 24), torch.randn(24)
    launch(x, y)
    assert made == []  # through Triton: torch.empty_strided
    for _ in range(2):
        torch.testing.assert_close(launch(x, y), _add_softmax(None, x, y))
    assert made == [((4, 24), (24, 1), torch.float32)] * 2
    assert len(stand_in.compiled.calls) == 2 and stand_in.triton_launches == 1


def test_switching_direct_launches_off_reaches_a_guarded_warm_call(direct):
    module, launch, stand_in, _ = direct
    x, y = torch.randn(4, 24), torch.randn(24)
    for _ in range(2):
        launch(x, y)
    assert module.DIRECT_LAUNCH.last is not None and len(stand_in.compiled.calls) == 1
    kept = dict(module.DIRECT_LAUNCH)
    module.DIRECT_LAUNCH.update(dict.fromkeys(kept, False))  # as the benchmark does
    assert module.DIRECT_LAUNCH.last is None
    launch(x, y)
    assert len(stand_in.compiled.calls) == 1 and stand_in.triton_launches == 2
    module.DIRECT_LAUNCH.update(kept)
    launch(x, y)
    launch(x, y)
    assert len(stand_in.compiled.calls) == 3 and module.DIRECT_LAUNCH.last is not None


def test_a_misaligned_input_or_another_device_passes_the_guard_to_triton(direct):
    module, launch, stand_in, driver = direct
    for _ in range(2):
        launch(torch.randn(4, 24), torch.randn(24))
    _counting(module)
    launch(torch.randn(4, 24), torch.randn(24))
    assert _lookups(module) == 1  # the key once more, then the guard
    shifted = torch.randn(4 * 24 + 1)[1:].view(4, 24)  # the kept layout, data 4 bytes off
    y = torch.randn(24)
    torch.testing.assert_close(launch(shifted, y), _add_softmax(None, shifted, y))
    assert _lookups(module) == 1 and stand_in.triton_launches == 2
    driver.device = 1  # not the device the kernel was launched on
    x = torch.randn(4, 24)
    torch.testing.assert_close(launch(x, y), _add_softmax(None, x, y))
    assert _lookups(module) == 1 and stand_in.triton_launches == 3
    assert len(stand_in.compiled.calls) == 2  # the two aligned warm calls on device 0
