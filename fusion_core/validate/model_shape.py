"""The input shape the whole-model numerics check (gate 2) runs at under the interpreter.

Reads an ``Analysis`` (its input specs and the user's module); writes the analysis captured
at the smallest input shape found that the model runs at with the same graph (see
``prepare.matched``), with its clusters keyed by the analysed ones.

Under Triton's interpreter every program instance costs ~2 ms, so each input dim is cut as
far as the model allows. Step by step (``shrink.shrink_steps``: the batch to 1, then the
other dims grouped by size, largest first), each size of a step is tried smallest first and
the first the model runs at is kept; a group whose dims cannot shrink together tries them
one at a time. A dim the model fixes (a Linear's in_features, a positional table's length)
fails every size and keeps its own. A step's test is one eager forward on random inputs
(milliseconds, as a fixed dim fails at its first use); the shape found is then captured and
compared with the analysis once. Only when that comparison fails (a dim that changes the
graph, not just the sizes) are the steps taken again with a capture for each, seconds
apiece (at most ``MAX_CAPTURES``), so that dim keeps its size while the others still shrink.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..ir.shapes import InputSpec
from ..pipeline import Analysis
from .inputs import random_inputs
from .prepare import Matched, matched
from .shrink import Position, resized, shrink_steps

Specs = tuple[InputSpec, ...]
# Captures the careful search may spend (a 12-layer transformer takes 1-2 s each): past
# that, the dims not settled yet keep their size.
MAX_CAPTURES = 8


def smallest_matching(analysis: Analysis, seed: int = 0) -> Matched:
    """The analysis at the smallest input shape found (the analysed one when no dim can
    shrink), and its clusters keyed by the analysed ones."""
    specs = tuple(analysis.inputs)

    def runs(candidate: Specs) -> bool:
        return model_runs(analysis.module, candidate, seed)

    quick = search(specs, runs)
    if quick != specs:
        found = matched(analysis, quick, keep_rows=False)
        if found is not None:
            return found
        captured: dict[Specs, Matched] = {}
        attempts = iter(range(MAX_CAPTURES))

        def same_graph(candidate: Specs) -> bool:
            if not runs(candidate) or next(attempts, None) is None:
                return False
            found = matched(analysis, candidate, keep_rows=False)
            if found is not None:
                captured[candidate] = found
            return found is not None

        careful = search(specs, same_graph)
        if careful != specs:
            return captured[careful]
    return analysis, {c.index: c for c in analysis.clusters}


def search(specs: Specs, accept: Callable[[Specs], bool]) -> Specs:
    """`specs` with each step of ``shrink_steps`` taken at the smallest size `accept`
    takes, given the steps before it."""
    current = specs

    def shrink(positions: tuple[Position, ...], sizes: tuple[int, ...]) -> bool:
        nonlocal current
        for size in sizes:
            candidate = resized(current, positions, size)
            if accept(candidate):
                current = candidate
                return True
        return False

    for positions, sizes in shrink_steps(specs):
        if not shrink(positions, sizes) and len(positions) > 1:
            for p in positions:
                shrink((p,), sizes)
    return current


def model_runs(module: torch.nn.Module, specs: Specs, seed: int) -> bool:
    """Whether the model's own forward runs on random CPU inputs of `specs`."""
    try:
        with torch.no_grad():
            module(*random_inputs(specs, module, "cpu", seed))
    except Exception:  # noqa: BLE001 - any failure means the model does not take this shape
        return False
    return True
