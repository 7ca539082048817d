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

Where torch ships Inductor's C++ launcher (``torch._C._StaticCudaLauncher``), ``_static``
loads the compiled kernel's cubin into it and a warm launch goes there instead of through
``CompiledKernel.run``: no Python launcher, no argument specialization on the way (Inductor
launches its own kernels this way for the same reason). ``_static`` gives None where torch has
no such launcher or it cannot take this kernel (ROCm, scratch memory, more than one CTA); the
warm launch then uses ``CompiledKernel.run``.

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


def _static(compiled, device, n_tensors, fixed):
    """Torch's C++ launch of `compiled` on `device`, as `launch(grid, stream, tensors)`, for
    calls whose arguments are `n_tensors` tensors then `fixed` (scalars and constexprs, in the
    kernel's parameter order); None where there is none (see the module docstring)."""
    try:
        import os
        import tempfile

        import torch
        if torch.version.hip is not None or not hasattr(torch._C, "_StaticCudaLauncher"):
            return None
        try:  # its name since torch 2.12; torch._inductor loads on this first plan only
            import torch._inductor.runtime.static_triton_launcher as launchers
        except ImportError:
            import torch._inductor.runtime.static_cuda_launcher as launchers
        if not hasattr(compiled, "_cubin_path"):
            compiled._cubin_path = None  # Inductor's attribute: None loads the cubin we hold
        static = launchers.StaticallyLaunchedCudaKernel(compiled)
        with tempfile.TemporaryDirectory() as folder:
            static.reload_cubin_from_raw(os.path.join(folder, "kernel.cubin"))
            static.load_kernel(device)
        names = list(compiled.src.fn.arg_names)

        def index(key):  # a parameter's name, its index, or a 1-tuple of either
            key = key[0] if isinstance(key, tuple) else key
            return names.index(key) if isinstance(key, str) else key

        types = {index(k): t for k, t in compiled.src.signature.items()}
        # Constexprs, and the arguments Triton specialized into constants (an int equal to
        # 1), are compiled in: the cubin takes the rest, then a None per scratch buffer.
        dropped = {index(k) for k in getattr(compiled.src, "constants", {})}
        kept = [i for i in sorted(types) if types[i] != "constexpr" and i not in dropped]
        if kept[:n_tensors] != list(range(n_tensors)):
            return None
        scratch = (None,) * (bool(getattr(static, "has_global_scratch", False))
                             + bool(getattr(static, "has_profile_scratch", False)))
        tail = (*(fixed[i - n_tensors] for i in kept[n_tensors:]), *scratch)
        arg_types = static.arg_tys + "O" * len(scratch)
        if len(arg_types) != n_tensors + len(tail):
            return None
        launch_kernel = static.C_impl._launch_kernel
        function, warps, shared = static.function, static.num_warps, static.shared
    except Exception:  # noqa: BLE001 - any failure: Triton's launcher stays
        return None

    def launch(g0, g1, g2, stream, tensors):
        launch_kernel(function, g0, g1, g2, warps, shared, arg_types, (*tensors, *tail), stream)

    launch.static = static  # owns the loaded module: unloaded when it is collected
    return launch


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
    static = _static(compiled, device, len(tensors), tail)

    def fire(*tensors):
        for t in tensors:
            if t.data_ptr() % POINTER_ALIGN:
                return False
        if current_device() != device:
            return False
        if static is not None:
            static(g0, g1, g2, current_stream(device), tensors)
            return True
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

    fire.static = static is not None  # which launcher warm calls use (benchmarks say it)
    return fire


HELPERS = (_hooks_set, _static, _direct)
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
