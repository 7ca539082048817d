"""A wall-clock limit on one step of a benchmark script (one panel case, one zoo model).

Reads nothing; `time_guard(seconds)` raises `OverTime` in the main thread once `seconds` of
wall time have passed inside its block (SIGALRM, so Unix and the main thread only). The signal
is handled between Python bytecodes: a long call into C (a CUDA synchronize, one big kernel)
ends first, and then the step stops.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class OverTime(BaseException):
    """The step ran past its limit. A BaseException on purpose: the code under test catches
    `Exception` to record a failure and carry on (validation never raises), and a limit
    turned into one more failure there would let the step run on."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"past the {seconds:g} s limit")
        self.seconds = seconds


@contextlib.contextmanager
def time_guard(seconds: float | None) -> Iterator[None]:
    """Raise `OverTime` if the block runs longer than `seconds` (None or 0: no limit)."""
    if not seconds:
        yield
        return

    def expire(signum, frame):
        raise OverTime(seconds)

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
