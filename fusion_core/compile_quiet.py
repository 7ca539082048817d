"""Our own torch.compile calls, without Dynamo's chatter on the user's terminal.

Every place fusion-advisor compiles (``--vs-inductor``'s capture, the pytest plugin's
compiled record, the timing of torch.compile against our kernels) runs inside ``quiet()``.
Dynamo's notes on what it does not trace (the `UserWarning` "Dynamo does not know how to
trace the builtin `math.log`") and its log lines ("Graph break from `Tensor.item()`") are
compile-time chatter about a compile the user did not ask for, not a finding of ours: what
matters in them (the graph breaks) our records already say. Only Dynamo's own warnings and
loggers are hushed, and only for the call: the model's warnings still show, and the
user's logging levels (``TORCH_LOGS``, ``logging.getLogger("torch._dynamo").setLevel``) are
restored after it.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

DYNAMO = "torch._dynamo"


def _dynamo_loggers() -> list[logging.Logger]:
    """`torch._dynamo` and those of its children that exist now (a child created during the
    call has no level of its own: it inherits the hushed parent's)."""
    names = [n for n in logging.root.manager.loggerDict
             if n == DYNAMO or n.startswith(DYNAMO + ".")]
    return [logging.getLogger(n) for n in sorted({DYNAMO, *names})]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Hush Dynamo's warnings and log lines below ERROR for the duration of the block."""
    loggers = _dynamo_loggers()
    levels = [lg.level for lg in loggers]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning,
                                    module=r"torch\._dynamo(\.|$)")
            for lg in loggers:
                lg.setLevel(logging.ERROR)
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
