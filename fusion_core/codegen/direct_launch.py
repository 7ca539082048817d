"""Warm launches without Triton's per-call dispatch: helpers copied into every generated file.

Like ``runtime.py``, ``source()`` gives the text a generated kernel file holds (it then needs
only torch and triton). ``kernel[grid](...)`` goes through ``JITFunction.run`` on every call:
it binds the arguments, computes their specialization and cache key, looks the compiled kernel
up and checks the globals it read, ~8 µs of Python before the CUDA launch. Within one launch
plan (one input layout, one chosen configuration) all of that is fixed but the tensors' data
pointers, so after the plan's first launch the launcher keeps ``_direct``'s result in the
plan's entry (``_entry``, with a C++ guard of its layout and the allocator of its outputs:
``launch_warm.py`` writes the launcher's side) and calls
the compiled kernel's own launcher (``CompiledKernel.run``) with the same arguments, in the
order and calling convention ``JITFunction.run`` uses (triton >= 3.3: every bound argument,
constexprs included, after grid, stream, function, packed metadata, launch metadata and the
two launch hooks). Like Inductor's launchers, the hooks are read once: a launch hook installed
later (a profiler) is not called by warm launches; clear ``LAUNCH_CACHE`` and ``DIRECT_LAUNCH``
to launch through Triton again.

``_direct`` gives None where there is nothing to call directly: the interpreter (no compiled
kernel), a Triton without ``CompiledKernel.run``/``function``/``packed_metadata``, launch hooks
set, a pointer that was not 16-byte aligned (Triton compiled for it without the alignment
it assumes otherwise), or a kernel parameter left to its default. The launcher then keeps
launching through Triton. Not thread-safe: launch plans are shared module state, as Triton's
own caches are.
"""

from __future__ import annotations

import contextlib

import torch

from .helper_text import joined

# The helpers below run inside generated files, which import triton themselves; this module
# is also imported by the CLI, which must start (and say how to install triton) without it.
with contextlib.suppress(ImportError):
    import triton

from .writer import CodeWriter

POINTER_ALIGN = 16  # bytes: Triton specializes pointer arguments on this alignment
DIRECT_SINCE = (3, 3)  # the Triton whose launcher takes every bound argument


def _hooks_set():
    """Whether Triton has a launch enter/exit hook installed (a profiler): warm launches then
    go through Triton, which calls them. Newer Tritons hold a chain of hooks, empty when none
    is installed; older ones a function or None."""
    knobs = getattr(triton, "knobs", None)
    holder = knobs.runtime if knobs is not None else triton.compiler.CompiledKernel
    hooks = (getattr(holder, "launch_enter_hook", None), getattr(holder, "launch_exit_hook", None))
    return any(h is not None and bool(getattr(h, "calls", True)) for h in hooks)


def _direct(kernel, compiled, grid, tensors, scalars, constexprs):
    """What a later call with the same plan needs to launch `compiled` (what
    `kernel[grid](*tensors, *scalars, **constexprs)` returned) itself: (run, grid0, grid1,
    grid2, function, packed metadata, the arguments after the tensors, the current device, a
    function giving the current device, one giving a device's stream). The launcher calls
    `run` with its tensors where their pointers are 16-byte aligned and the device is still
    current (``launch_warm.direct_lines``). None where there is no direct launch (see the
    module docstring)."""
    run = getattr(compiled, "run", None)
    init = getattr(compiled, "_init_handles", None)
    if run is None or init is None or not hasattr(compiled, "packed_metadata") or _hooks_set():
        return None
    # Tritons before 3.3 passed the launcher no constexprs: another calling convention.
    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < DIRECT_SINCE:
        return None
    names = getattr(kernel, "arg_names", None)
    rest = names[len(tensors) + len(scalars) :] if names is not None else None
    if rest is None or any(n not in constexprs for n in rest):
        return None
    if any(t.data_ptr() % POINTER_ALIGN for t in tensors):
        return None
    init()  # loads the module on the current device (a launch did already)
    driver = triton.runtime.driver.active
    current_device, current_stream = driver.get_current_device, driver.get_current_stream
    device = current_device()
    # Triton's CUDA driver asks torch's Python wrapper, ~100 ns more than the C call it wraps
    # (CUDA is initialized: a launch ran).
    if current_device is getattr(torch.cuda, "current_device", None):
        current_device = getattr(torch._C, "_cuda_getDevice", current_device)
    g0, g1, g2 = (*grid, 1, 1)[:3]
    tail = (*scalars, *(constexprs[n] for n in rest))
    return (run, g0, g1, g2, compiled.function, compiled.packed_metadata, tail, device,
            current_device, current_stream)


class _Kept(dict):
    """DIRECT_LAUNCH: a dict of kept plans by launch cache key, whose `last` is the entry
    a call last found by its key (its guard then spares the next call the key). Any change
    to the dict drops `last`: clearing it, or setting entries False, reaches warm calls."""

    last = None

    def __setitem__(self, key, value):
        self.last = None
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self.last = None
        super().__delitem__(key)

    def update(self, *args, **kwargs):
        self.last = None
        super().update(*args, **kwargs)

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self):
        self.last = None
        super().clear()

    def pop(self, *args):
        self.last = None
        return super().pop(*args)

    def popitem(self):
        self.last = None
        return super().popitem()

    def setdefault(self, key, default=None):
        self.last = None
        return super().setdefault(key, default)


def _allocators():
    """{device type: `empty(shape, stride, dtype)` on its current device}: the C++
    allocation Inductor's wrappers call, or `torch.empty_strided` where this torch has none
    (it parses its keyword arguments in Python, ~1 µs more per output)."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    found = {}
    for kind in ("cuda", "xpu", "cpu"):
        fast = getattr(guards, f"_empty_strided_{kind}", None)
        found[kind] = fast or (lambda shape, stride, dtype, kind=kind: torch.empty_strided(
            shape, stride, dtype=dtype, device=kind))
    return found


def _guard(tensors):
    """A C++ check (Dynamo's TensorGuards) that tensors have these tensors' dtypes, devices,
    sizes and strides (all concrete: a None size would pass any), or None where this torch
    has none or it does not accept its own tensors."""
    try:
        guard = torch._C._dynamo.guards.TensorGuards(
            *tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) for t in tensors])
        return guard if guard.check(*tensors) is True else None
    except (AttributeError, TypeError, RuntimeError):
        return None


def _entry(launch, device, plan, given, scalars):
    """DIRECT_LAUNCH's value for a kept plan: (guard of the parameters `given` or None,
    the scalar operands' values, the plan, its direct launch or None). The launch (`_direct`'s
    fields, then the allocator for the plan's `device`) is dropped for a device the outputs
    cannot be allocated on as the current one (another CUDA device than Triton launched on;
    a device without an index, `torch.device("cuda")`, is the current one)."""
    if launch is not None:
        empty = ALLOCATE.get(device.type)
        if empty is None or (device.type != "cpu" and device.index not in (None, launch[7])):
            launch = None
        else:
            launch = (*launch, empty)
    return (_guard(given) if given else None, scalars, plan, launch)


ALLOCATE = _allocators()  # here for `_entry`'s tests; a generated file sets its own
HELPERS = (_hooks_set, _direct, _Kept, _allocators, _guard, _entry)
GLOBALS = ("POINTER_ALIGN", "DIRECT_SINCE", "ALLOCATE")


def source() -> str:
    """The helpers' text as a generated file holds it, after its constant."""
    text = joined(HELPERS)
    return (
        f"POINTER_ALIGN = {POINTER_ALIGN}  # bytes: Triton specializes pointers on it\n"
        f"DIRECT_SINCE = {DIRECT_SINCE}  # the Triton whose launcher takes every argument\n\n\n"
        + text
        + "\n\n\nALLOCATE = _allocators()  # output allocation of direct launches, by device type\n"
    )


# Generation time only (not copied into kernel files).
def launched_kernel(kernel: str) -> str:
    """`kernel` as a generated `_launch` launches it: as is, or through its `wrap` argument
    (tracing for torch.compile: ``torch.library.wrap_triton``)."""
    return f"({kernel} if wrap is None else wrap({kernel}))"


def launch_lines(
    kernel: str, grid: str, tensors: list[str], constexprs: list[tuple[str, str]], out: CodeWriter
) -> None:
    """One launch of `kernel` through Triton, then `return` of a thunk giving its direct
    launcher (called only when the launcher keeps it: the timing of candidates skips it)."""
    out.line(f"grid = {grid}")
    out.line("consts = {")
    with out.indented():
        out.wrapped([f'"{name}": {value}' for name, value in constexprs])
    out.line("}")
    out.line(f"compiled = {kernel}[grid](")
    with out.indented():
        out.wrapped([*tensors, "*args", "**consts", "num_warps=num_warps"])
    out.line(")")
    pointers = "(" + ", ".join(tensors) + ("," if len(tensors) == 1 else "") + ")"
    out.line(f"return lambda: _direct({kernel}, compiled, grid, {pointers}, args, consts)")
