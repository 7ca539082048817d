"""A test's timing shape: the analysis its kernels are timed on, when not the analysed one.

Reads the test's analysis and its ``timing_inputs`` (marker keyword or ``analyze()``
argument, in the forms the example inputs take); returns the analysis at that shape and
how its clusters map to the analysed ones, so timings taken there are recorded against
the baseline's clusters (``measure.to_measured``). Writes nothing; a shape that cannot
stand for the analysed kernels fails the test with one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest


def cluster_map(analysis: Any, timed: Any) -> tuple[dict[int, int], list[str]]:
    """(timed cluster index -> analysis cluster index, chains of the analysis' clusters
    the timing analysis lacks): clusters match by their node names and boundary values."""
    by_nodes = {
        (tuple(c.nodes), tuple(c.inputs), tuple(c.outputs)): c.index for c in timed.clusters
    }
    found: dict[int, int] = {}
    lacking = []
    for c in analysis.clusters:
        j = by_nodes.get((tuple(c.nodes), tuple(c.inputs), tuple(c.outputs)))
        if j is None:
            lacking.append(" → ".join(c.ops))
        else:
            found[j] = c.index
    return found, lacking


def timing_analysis(
    analysis: Any, timing_inputs: Any, dtype: Any, device: str, call: str
) -> tuple[Any, dict[int, int] | None]:
    """(the analysis the kernels are timed on, its cluster indices -> `analysis`' ones; None
    when it is `analysis` itself). Fails the test when `timing_inputs` is no list of inputs,
    the model rejects it, or the clusters there are not the analysed ones."""
    import fusion_core

    from .fixture import build_inputs, fixes  # the fixture's input forms and their fixes

    where = call.replace("(...)", "(timing_inputs=...)")
    if isinstance(timing_inputs, str) or not isinstance(timing_inputs, Sequence):
        pytest.fail(
            f"{where} must be a list of inputs like the example inputs, e.g. "
            f"[(16384, 1024)], got {timing_inputs!r}",
            pytrace=False,
        )
    try:
        specs = build_inputs(timing_inputs, dtype)
        if [str(s) for s in specs] == [str(s) for s in analysis.inputs]:
            return analysis, None
        timed = fusion_core.analyze(
            analysis.module, *specs, capture=analysis.graph.frontend, device=device
        )
    except fusion_core.FusionAdvisorError as e:
        failure = f"{where}: {e.worded(fixes(call))}"
    else:
        failure = None
    if failure is not None:  # outside the handler: pytest would print the whole chain
        pytest.fail(failure, pytrace=False)
    index_map, lacking = cluster_map(analysis, timed)
    if lacking:
        pytest.fail(
            f"{where}: at {', '.join(str(s) for s in timed.inputs)} the model fuses "
            f"differently (no cluster `{lacking[0]}` there), so its timings would not "
            "be the analysed kernels'; choose a timing shape with the same clusters",
            pytrace=False,
        )
    return timed, index_map
