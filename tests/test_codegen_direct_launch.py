"""Warm launches past Triton's dispatch (`direct_launch.py`), on CPU.

`_direct` is checked against stand-ins for Triton's compiled kernel and driver: the argument
order it launches with, and every case where it must leave the launch to Triton. Then a
generated launcher runs under the interpreter with a stand-in compiled kernel whose `run`
executes the real (interpreted) kernel with the arguments it was given, so a wrong argument
order, a stale plan or a launch with the wrong grid gives a wrong result: one direct launcher
per plan, a new one for new strides or dtype, results identical to Triton's path, and
Triton's path whenever a pointer is not 16-byte aligned. The same launcher on a real GPU:
test_direct_launch_gpu.py.
"""

import pytest
import torch
import triton
from codegen_harness import Lambda

from fusion_core.codegen import direct_launch, generate, load_kernel, write_kernels
from fusion_core.pipeline import analyze


class _Driver:
    """Triton's active driver as `_direct` uses it: a current device and its stream."""

    def __init__(self) -> None:
        self.device = 0

    def get_current_device(self):
        return self.device

    def get_current_stream(self, device):
        return 1000 + device


@pytest.fixture
def driver(monkeypatch):
    fake = _Driver()
    monkeypatch.setattr(triton.runtime.driver, "_active", fake)
    return fake


class _Compiled:
    """A CompiledKernel stand-in: `run` records its arguments, or runs `execute` on them."""

    def __init__(self, execute=None) -> None:
        self.calls, self.execute = [], execute
        self.function, self.packed_metadata = "function", "metadata"

    def _init_handles(self):
        pass

    def run(self, *args):
        self.calls.append(args)
        if self.execute is not None:
            self.execute(*args)


class _Kernel:
    arg_names = ["x_ptr", "out_ptr", "n", "stride", "BLOCK", "ALIGN"]


def _fire(compiled, tensors, constexprs=None):
    return direct_launch._direct(
        _Kernel(),
        compiled,
        (3, 2),
        tensors,
        (10, 7),
        {"ALIGN": 16, "BLOCK": 64} if constexprs is None else constexprs,
    )


def test_direct_keeps_the_launch_in_the_signature_order(driver):
    compiled = _Compiled()
    launch = _fire(compiled, (torch.zeros(4), torch.zeros(4)))
    run, g0, g1, g2, function, metadata, tail, device, current, stream = launch
    assert run == compiled.run and (g0, g1, g2) == (3, 2, 1)
    assert (function, metadata) == ("function", "metadata")
    assert tail == (10, 7, 64, 16)  # the scalars, then BLOCK before ALIGN as the kernel has them
    assert (device, current(), stream(device)) == (0, 0, 1000)
    driver.device = 1
    assert current() == 1  # the driver's, asked at each call


def test_direct_asks_torchs_c_call_for_the_device_where_triton_asks_torch(driver, monkeypatch):
    def python_wrapper():
        return 0

    def c_call():
        return 0

    monkeypatch.setattr(torch.cuda, "current_device", python_wrapper)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", c_call, raising=False)
    monkeypatch.setattr(driver, "get_current_device", python_wrapper, raising=False)
    *_, current, _ = _fire(_Compiled(), (torch.zeros(4), torch.zeros(4)))
    assert current is c_call


def test_entry_keeps_a_launch_only_where_its_outputs_can_be_allocated(driver):
    launch = _fire(_Compiled(), (torch.zeros(4), torch.zeros(4)))
    x = torch.zeros(4)
    guard, scalars, plan, kept = direct_launch._entry(launch, x.device, "plan", (x,), (2.0,))
    assert (scalars, plan) == ((2.0,), "plan") and guard.check(x)
    assert kept == (*launch, direct_launch.ALLOCATE["cpu"])
    assert direct_launch._entry(launch, torch.device("cuda", 0), "plan", (), ())[3] is not None
    # Triton launched on device 0: outputs on cuda:1 cannot come from the current device
    assert direct_launch._entry(launch, torch.device("cuda", 1), "plan", (), ())[3] is None
    # "cuda" without an index (a kernel without inputs called with it) is the current device
    assert direct_launch._entry(launch, torch.device("cuda"), "plan", (), ())[3] is not None
    assert direct_launch._entry(launch, torch.device("meta"), "plan", (), ())[3] is None
    assert direct_launch._entry(None, x.device, "plan", (x,), ())[3] is None


@pytest.mark.parametrize(
    "case",
    [
        "no compiled kernel",
        "no run",
        "hook",
        "hook in a chain",
        "triton before 3.3",
        "default parameter",
        "misaligned when compiled",
    ],
)
def test_no_direct_launch_where_triton_must_launch(driver, monkeypatch, case):
    compiled = None if case == "no compiled kernel" else _Compiled()
    tensors = (torch.zeros(4), torch.zeros(4))
    constexprs = None
    if case == "no run":  # a Triton whose compiled kernel has no `run`
        compiled = type("Old", (), {"packed_metadata": 0, "_init_handles": lambda self: None})()
    elif case == "hook":
        monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *a: None)
    elif case == "hook in a chain":  # a Triton that keeps a (normally empty) chain of hooks
        chain = triton.knobs.runtime.launch_exit_hook
        if not hasattr(chain, "add"):
            pytest.skip("this Triton keeps one launch hook, not a chain")
        monkeypatch.setattr(chain, "calls", [_Kernel])  # as `chain.add` would, undone after
    elif case == "triton before 3.3":
        monkeypatch.setattr(triton, "__version__", "3.2.0")
    elif case == "default parameter":
        constexprs = {"BLOCK": 64}  # ALIGN left to a default: not in the arguments we have
    elif case == "misaligned when compiled":
        tensors = (torch.zeros(9)[1:], torch.zeros(4))
    assert _fire(compiled, tensors, constexprs) is None


# --- a generated launcher, its kernel run through the stand-in's `run` -----------------------
# CPU only: these four failed on the H200 (traceback not kept). The likely cause: the softmax
# kernel's reductions call Triton's own @jit helpers, decorated for the interpreter only when
# TRITON_INTERPRET is set as triton is first imported (fusion_core/_interpret.py), and where
# CUDA is triton was imported for the GPU. The same launches on a GPU: test_direct_launch_gpu.py.
INTERPRETER_ONLY = pytest.mark.cpu


class _Interpreted:
    """Stands in for the module's kernel: launches through the interpreter, counts those
    launches, and returns a compiled stand-in whose `run` interprets the kernel again with
    exactly the arguments it is given (bound by the kernel's parameter names)."""

    def __init__(self, kernel) -> None:
        self.kernel, self.triton_launches = kernel, 0
        self.arg_names = kernel.arg_names
        self.compiled = _Compiled(self._execute)

    def _execute(self, g0, g1, g2, stream, function, metadata, meta, enter, exit_, *bound):
        self.kernel[(g0, g1, g2)](**dict(zip(self.arg_names, bound, strict=True)))

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.triton_launches += 1
            self.kernel[grid](*args, **kwargs)
            return self.compiled

        return launch


# Rows of 24: block 32, columns aligned to 8, one row a program: constexprs that differ, so a
# launch that passes them out of order computes something else.
COLS = 24


def _softmax(m, x):
    return torch.softmax(x * 2.0, dim=-1)


def _loaded(tmp_path, monkeypatch):
    """The softmax cluster's module, its kernel decorated under the interpreter and wrapped in
    `_Interpreted`."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    analysis = analyze(Lambda(_softmax, 1), torch.randn(4, COLS))
    kernel = generate(analysis, analysis.clusters[0])
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    stand_in = _Interpreted(getattr(module, f"{kernel.name}_kernel"))
    setattr(module, f"{kernel.name}_kernel", stand_in)
    return module, getattr(module, kernel.name), stand_in


def _direct_launches(stand_in):
    return len(stand_in.compiled.calls)


@INTERPRETER_ONLY
def test_a_warm_call_launches_directly_with_the_same_result(tmp_path, monkeypatch, driver):
    module, launch, stand_in = _loaded(tmp_path, monkeypatch)
    x = torch.randn(4, COLS)
    first = launch(x)  # plan, configuration, direct launcher kept
    assert stand_in.triton_launches == 1 and _direct_launches(stand_in) == 0
    ((_, _, _, direct),) = module.DIRECT_LAUNCH.values()  # guard, scalars, plan, launch
    assert direct is not None
    for _ in range(2):
        y = torch.randn(4, COLS)
        torch.testing.assert_close(launch(y), _softmax(None, y))
    assert stand_in.triton_launches == 1 and _direct_launches(stand_in) == 2
    assert torch.equal(launch(x), first)  # bit for bit what Triton's path gave


@INTERPRETER_ONLY
def test_other_strides_or_dtype_get_their_own_direct_launcher(tmp_path, monkeypatch, driver):
    module, launch, stand_in = _loaded(tmp_path, monkeypatch)
    x = torch.randn(4, COLS)
    launch(x)
    wide = torch.randn(4, 40)[:, :COLS]  # same shape, row stride 40
    for t in (wide, wide, x.double(), x.double()):  # results as analysed: float32
        torch.testing.assert_close(launch(t), _softmax(None, t).float())
    assert len(module.LAUNCH_CACHE) == 3 and len(module.DIRECT_LAUNCH) == 3
    assert stand_in.triton_launches == 3 and _direct_launches(stand_in) == 2  # one per plan
    strides = {key[1] for key in module.DIRECT_LAUNCH}
    assert strides == {(COLS, 1), (40, 1)}


@INTERPRETER_ONLY
def test_a_misaligned_input_with_a_known_layout_launches_through_triton(
    tmp_path, monkeypatch, driver
):
    module, launch, stand_in = _loaded(tmp_path, monkeypatch)
    launch(torch.randn(4, COLS))
    shifted = torch.randn(4 * COLS + 1)[1:].view(4, COLS)  # same key, data 4 bytes off
    torch.testing.assert_close(launch(shifted), _softmax(None, shifted))
    assert stand_in.triton_launches == 2 and _direct_launches(stand_in) == 0
    assert len(module.LAUNCH_CACHE) == 1


@INTERPRETER_ONLY
def test_the_oldest_plan_and_its_direct_launcher_make_room(tmp_path, monkeypatch, driver):
    module, launch, _ = _loaded(tmp_path, monkeypatch)
    module.LAUNCH_CACHE_SIZE = 2
    for rows in (1, 2, 3):
        launch(torch.randn(rows, COLS))
    kept = [key[0][0] for key in module.LAUNCH_CACHE]
    assert kept == [2, 3] and list(module.DIRECT_LAUNCH) == list(module.LAUNCH_CACHE)
