"""Kernels as torch operators: the runtime of the package `--apply` writes, real Python,
linted and unit-tested here.

The package's ``__init__.py`` (``fused.init_source``) holds a verbatim copy of the functions
in ``HELPERS`` (``source()`` gives their text), then one ``_register`` call per applied
cluster, in its ``NAMESPACE`` (one per import, so a re-import never redefines an operator).
Model timing (``validate/modeltime.py``) registers the kernels it times the same way.

``_register`` makes the cluster's launcher a PyTorch operator ``<namespace>::<name>`` and
returns the function the rewritten model calls. That function launches directly in a plain
eager call: the operator's dispatch alone costs more host time than a warm launch
(``benchmarks/op_dispatch.py``). Where something traces or records, it calls the operator:
under torch.compile, with tensor subclasses (fake tensors, fx proxies), under a torch
function or dispatch mode (``make_fx``, FakeTensorMode, FlopCounterMode), or when autograd
records (the operator's backward refuses: inference only).

The operator is a ``torch.library.triton_op`` where torch has one (2.6+) and Triton compiles
the kernel: torch.compile traces into it, and ``wrap_triton`` shows each launch to Inductor,
which keeps our kernel in its own code, launches it with its static launcher
(``_static_launch``) and can capture it in CUDA graphs. Triton's CPU
interpreter gives kernels ``wrap_triton`` cannot trace; there (and on older torch) it is a
``torch.library.custom_op``, opaque to the compiler, whose fake implementation runs the
launcher's checks and shape logic and launches nothing. Both run the kernel file's
``traceable(*inputs, wrap=...)``: the launcher without its caches, candidate timing or
direct launches (tracing runs it on fake tensors).
"""

from __future__ import annotations

import inspect
import os

import torch

from .helper_text import joined


def _check_dtypes(name, dtypes, tensors):
    got = tuple(t.dtype for t in tensors)
    if got != dtypes:
        raise TypeError(f"{name} was generated for inputs of dtype "
                        f"{[str(d) for d in dtypes]}, got {[str(d) for d in got]}: "
                        "re-run fusion-advisor with that --dtype")


def _no_backward(ctx, *grads):
    raise RuntimeError("fused kernels are inference only: run under torch.no_grad() "
                       "or restore the original lines (see the .bak file) to train")


class _ShapesOnly:
    """A kernel that launches nothing, for a fake implementation: only the results'
    shapes, strides and dtypes are wanted there (`kernel[grid](...)` does nothing)."""

    def __getitem__(self, grid):
        return self

    def __call__(self, *args, **kwargs):
        return None


def _shapes_only(kernel):
    return _ShapesOnly()


def _plain_eager(tensors, dtypes):
    """Whether the launcher can take this call itself: plain tensors (or parameters) of the
    generated dtypes, no autograd recording and no torch function or dispatch mode (which
    must see the operator). Anything else goes to the operator, which also says what is
    wrong."""
    if torch._C._is_torch_function_mode_enabled() or torch._C._len_torch_dispatch_stack():
        return False
    grad = torch.is_grad_enabled()
    for t, dtype in zip(tensors, dtypes, strict=False):
        if (type(t) not in (torch.Tensor, torch.nn.Parameter) or t.dtype is not dtype
                or (grad and t.requires_grad)):
            return False
    return len(tensors) == len(dtypes)


def _compiled_kernel(module):
    """Whether torch.compile can trace this kernel file's launches: torch has triton_op and
    wrap_triton, and the kernel is Triton-compiled (the CPU interpreter's is not)."""
    if not (hasattr(torch.library, "triton_op") and hasattr(torch.library, "wrap_triton")):
        return False
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False
    return isinstance(getattr(module, module.NAME + "_kernel", None), JITFunction)


def _signature(n_inputs, n_results, scalars=()):
    """`(Tensor in0, ..., float s0, ...) -> Tensor` (or a tuple of them) as a Python
    signature: torch infers the operator's schema from it. `scalars`: the types ("float",
    "int") of the Python numbers the launcher takes after its tensors."""
    kinds = {"float": float, "int": int}
    params = [inspect.Parameter(f"in{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=torch.Tensor) for i in range(n_inputs)]
    params += [inspect.Parameter(f"s{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                 annotation=kinds[t]) for i, t in enumerate(scalars)]
    results = torch.Tensor if n_results == 1 else tuple[(torch.Tensor,) * n_results]
    return inspect.Signature(params, return_annotation=results)


def _static_launch():
    """Ask Inductor to launch user-defined Triton kernels (ours, under torch.compile) through
    its static launcher, as it launches its own kernels; torch leaves that off by default, and
    falls back to Triton's launcher for a kernel the static one cannot take. Through Triton's
    launcher our 39 kernels in GPT-2 12L fp16 cost torch.compile of the applied graph 2486 µs
    a forward against 2222 for torch.compile alone; launched statically, 2228-2251 (H100,
    torch 2.11, ``benchmarks/host_profile.py --compiled``). Compile workers read the
    environment variable (those started later inherit it), this process the config, read
    before the variable is set: torch takes the variable as forced, and a user's later
    `config.static_launch_user_defined_triton_kernels = False` here still holds. A user's
    own setting of the variable is left as it is (0 keeps Triton's launcher everywhere)."""
    name = "TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS"
    if name in os.environ:
        return
    try:
        import torch._inductor.config as config
    except ImportError:  # a torch without Inductor: nothing to ask
        return
    if not hasattr(config, "static_launch_user_defined_triton_kernels"):
        return  # an older torch: no static launch of user-defined kernels
    config.static_launch_user_defined_triton_kernels = True
    os.environ[name] = "1"


def _register(namespace, name, module, launcher_name, n_results, dtypes, scalars=()):
    """The operator `namespace::name` over `module`'s launcher `launcher_name` (inputs of
    `dtypes`, then Python numbers of the types `scalars`, `n_results` results), and the
    function the rewritten model calls as `name`."""
    n = len(dtypes)
    launcher, traceable = getattr(module, launcher_name), module.traceable
    qualified = f"{namespace}::{name}"
    if _compiled_kernel(module):
        _static_launch()
        wrap = torch.library.wrap_triton

        def impl(*args):
            _check_dtypes(name, dtypes, args[:n])
            if all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in args[:n]):  # run
                return launcher(*args)
            return traceable(*args, wrap=wrap)

        impl.__signature__ = _signature(n, n_results, scalars)
        op = torch.library.triton_op(qualified, impl, mutates_args=())
    else:
        def impl(*args):
            _check_dtypes(name, dtypes, args[:n])
            return launcher(*args)

        def fake(*args):
            _check_dtypes(name, dtypes, args[:n])
            return traceable(*args, wrap=_shapes_only)

        impl.__signature__ = _signature(n, n_results, scalars)
        op = torch.library.custom_op(qualified, impl, mutates_args=())
        op.register_fake(fake)
    op.register_autograd(_no_backward)
    overload = getattr(getattr(torch.ops, namespace), name).default

    def call(*args):
        if torch.compiler.is_compiling() or not _plain_eager(args[:n], dtypes):
            return overload(*args)
        return launcher(*args)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = (f"The fused kernel `{launcher_name}`; the operator `{qualified}` where "
                    "something traces or records.")
    call.operator = overload
    return call


HELPERS = (_check_dtypes, _no_backward, _ShapesOnly, _shapes_only, _plain_eager,
           _compiled_kernel, _signature, _static_launch, _register)
IMPORTS = ("inspect", "os")  # standard modules the helpers use (and torch), imported
# by the package


def source() -> str:
    """The helpers' text as the package's ``__init__.py`` holds it, two blank lines apart."""
    return joined(HELPERS) + "\n"
