"""Without CUDA, Triton runs kernels only through its interpreter, and it reads
TRITON_INTERPRET when `triton` is first imported (its own @jit helpers are decorated then).
torch.export and torch.compile import triton, so the flag is set as fusion_core loads,
before any capture; a user's explicit setting wins."""

import contextlib
import dataclasses
import os
import warnings

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on"):  # as Triton reads it
    # The interpreter computes with numpy, which warns where torch is silent: log(0) = -inf,
    # -inf cast to an integer (T5's relative-position buckets). The numerics gates judge
    # those values against eager; the warnings only put numpy's file and line in the report.
    warnings.filterwarnings("ignore", category=RuntimeWarning,
                            module=r"triton\.runtime\.interpreter")

    # Every integer add, sub and mul the interpreter runs is first redone in int64 and
    # compared with the int32 range (`sanitize_overflow`), and the result is then dropped:
    # only `device_assert` reads it, and that returns at once unless the options say
    # `debug`, which the interpreter's never do. A fifth of an interpreted kernel's time;
    # turning it off changes no value and no error.
    with contextlib.suppress(ImportError, AttributeError, TypeError):
        from triton.runtime import interpreter as _interpreter

        _builder = _interpreter.interpreter_builder
        if not _builder.options.debug:
            _builder.options = dataclasses.replace(_builder.options, sanitize_overflow=False)
