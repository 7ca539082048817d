"""Our own torch.compile calls, without Dynamo's chatter on the user's terminal.

Every place fusion-advisor compiles (``--vs-inductor``'s capture, the pytest plugin's
compiled record, the timing of torch.compile against our kernels) runs inside ``quiet()``.
Dynamo's notes on what it does not trace (the `UserWarning` "Dynamo does not know how to
trace the builtin `math.log`") and its log lines ("Graph break from `Tensor.item()`") are
compile-time chatter about a compile the user did not ask for, not a finding of ours: what
matters in them (the graph breaks) our records already say. Inductor's are the same kind
(on a GPU, "TensorFloat32 tensor cores ... available but not enabled" for a float32 model the
user never asked to compile). Only Dynamo's and Inductor's own warnings and loggers are
hushed, and only for the call: the model's warnings still show, and the user's logging
levels (``TORCH_LOGS``, ``logging.getLogger("torch._dynamo").setLevel``) are restored after
it.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

COMPILERS = ("torch._dynamo", "torch._inductor")


def _compiler_loggers() -> list[logging.Logger]:
    """Each of `COMPILERS` and those of its children that exist now (a child created during
    the call has no level of its own: it inherits the hushed parent's)."""
    names = [n for n in logging.root.manager.loggerDict
             if any(n == c or n.startswith(c + ".") for c in COMPILERS)]
    return [logging.getLogger(n) for n in sorted({*COMPILERS, *names})]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Hush Dynamo's and Inductor's warnings and log lines below ERROR for the block."""
    loggers = _compiler_loggers()
    levels = [lg.level for lg in loggers]
    try:
        with warnings.catch_warnings():
            for compiler in COMPILERS:
                warnings.filterwarnings("ignore", category=UserWarning,
                                        module=compiler.replace(".", r"\.") + r"(\.|$)")
            for lg in loggers:
                lg.setLevel(logging.ERROR)
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
