"""Warm launches without Triton's per-call dispatch: helpers copied into every generated file.

Like ``runtime.py``, ``source()`` gives the text a generated kernel file holds (it then needs
only torch and triton). ``kernel[grid](...)`` goes through ``JITFunction.run`` on every call:
it binds the arguments, computes their specialization and cache key, looks the compiled kernel
up and checks the globals it read, ~8 µs of Python before the CUDA launch. Within one launch
plan (one input layout, one chosen configuration) all of that is fixed but the tensors' data
pointers, so after the plan's first launch the launcher keeps ``_direct``'s result and calls
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
import inspect

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
    """A launcher of `compiled` (what `kernel[grid](*tensors, *scalars, **constexprs)`
    returned) for later calls with the same plan: `fire(*tensors)` launches it with these
    tensors, all else as this call had it, and returns True; it returns False where Triton
    must launch instead (another current device, or a pointer that is not 16-byte aligned).
    None where there is no direct launch (see the module docstring)."""
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
    tail = (*scalars, *(constexprs[n] for n in rest))
    g0, g1, g2 = (*grid, 1, 1)[:3]
    function, metadata = compiled.function, compiled.packed_metadata

    def fire(*tensors):
        for t in tensors:
            if t.data_ptr() % POINTER_ALIGN:
                return False
        if current_device() != device:
            return False
        run(
            g0,
            g1,
            g2,
            current_stream(device),
            function,
            metadata,
            None,
            None,
            None,
            *tensors,
            *tail,
        )
        return True

    return fire


HELPERS = (_hooks_set, _direct)
GLOBALS = ("POINTER_ALIGN", "DIRECT_SINCE")


def source() -> str:
    """The helpers' text as a generated file holds it, after its constant."""
    text = "\n\n\n".join(inspect.getsource(fn).rstrip() for fn in HELPERS)
    return (
        f"POINTER_ALIGN = {POINTER_ALIGN}  # bytes: Triton specializes pointers on it\n"
        f"DIRECT_SINCE = {DIRECT_SINCE}  # the Triton whose launcher takes every argument\n\n\n"
        + text
        + "\n"
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
