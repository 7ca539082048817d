"""Progress of the long steps (validation under the interpreter, kernel generation).

Reads nothing; writes to stderr, so stdout and ``--json`` stay clean: a rich progress bar
when stderr is a terminal (it disappears when the step ends), one plain line per step
otherwise (``fusion-advisor: cluster numerics: 6 distinct kernel(s) for 49 cluster(s)``).
Only long runs report: those over at least ``LONG_RUN`` clusters, and any run that compiles
the model with torch.compile (tens of seconds even for a small model). A three-cluster model
without it finishes before a bar would be read, and its stderr stays empty for the errors.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import IO, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

LONG_RUN = 8  # clusters from which a run reports the progress of its steps
Advance = Callable[[], None]


class StepProgress(Protocol):
    def step(self, label: str, total: int) -> contextlib.AbstractContextManager[Advance]:
        """A step of `total` items; the context yields the call that counts one done."""
        ...


class NoProgress:
    @contextlib.contextmanager
    def step(self, label: str, total: int) -> Iterator[Advance]:
        yield lambda: None


NO_PROGRESS = NoProgress()


class PlainProgress:
    """One line per long step, written when the step starts."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    @contextlib.contextmanager
    def step(self, label: str, total: int) -> Iterator[Advance]:
        print(f"fusion-advisor: {label}", file=self.stream, flush=True)
        yield lambda: None


class BarProgress:
    """A transient rich bar per long step, on the terminal's stderr."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @contextlib.contextmanager
    def step(self, label: str, total: int) -> Iterator[Advance]:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as bar:
            task = bar.add_task(label, total=total)
            yield lambda: bar.advance(task)


def for_stderr(clusters: int, compiles: bool = False) -> StepProgress:
    """For a run over `clusters` clusters (`compiles`: it also runs torch.compile): a bar on
    a terminal, plain lines on a pipe or file, nothing for a short run."""
    stream = sys.stderr
    if (clusters < LONG_RUN and not compiles) or stream is None:
        return NO_PROGRESS
    if stream.isatty():
        return BarProgress(Console(stderr=True))
    return PlainProgress(stream)
