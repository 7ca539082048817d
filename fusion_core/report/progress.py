"""Progress of the long steps (validation under the interpreter, kernel generation).

Reads nothing; writes to stderr, so stdout and ``--json`` stay clean: a rich progress bar
when stderr is a terminal (it disappears when the step ends), one plain line per step
otherwise (``fusion-advisor: cluster numerics: 6 distinct kernel(s) for 49 cluster(s)``).
Only steps with at least ``LONG_STEP`` items report: a three-cluster model finishes before
a bar would be read, and its stderr stays empty for the error messages.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import IO, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

LONG_STEP = 8  # items (clusters or kernels) from which a step reports its progress
Advance = Callable[[], None]


class StepProgress(Protocol):
    def step(self, label: str, total: int) -> contextlib.AbstractContextManager[Advance]:
        """A step of `total` items; the context yields the call that counts one done."""
        ...


class NoProgress:
    @contextlib.contextmanager
    def step(self, label: str, total: int) -> Iterator[Advance]:
        yield lambda: None


class PlainProgress:
    """One line per long step, written when the step starts."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    @contextlib.contextmanager
    def step(self, label: str, total: int) -> Iterator[Advance]:
        if total >= LONG_STEP:
            print(f"fusion-advisor: {label}", file=self.stream, flush=True)
        yield lambda: None


class BarProgress:
    """A transient rich bar per long step, on the terminal's stderr."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @contextlib.contextmanager
    def step(self, label: str, total: int) -> Iterator[Advance]:
        if total < LONG_STEP:
            yield lambda: None
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as bar:
            task = bar.add_task(label, total=total)
            yield lambda: bar.advance(task)


def for_stderr() -> StepProgress:
    """A bar on a terminal, plain lines on a pipe or file."""
    stream = sys.stderr
    if stream is not None and stream.isatty():
        return BarProgress(Console(stderr=True))
    return PlainProgress(stream) if stream is not None else NoProgress()


NO_PROGRESS = NoProgress()
