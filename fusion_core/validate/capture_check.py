"""Does the traced graph compute what the model computes?

Reads a ``Recording`` (the traced graph's output on random inputs, and those inputs) and the
model it was captured from; writes a verdict: (passed, max abs error, what differs), passed
None when the two cannot be compared (the model does not run there, or its outputs do not
line up with the graph's).

Model numerics compares the graph with kernels patched in against the unpatched graph. A
capture that dropped or changed an op (say an activation inside a norm layer traced as a bare
``batch_norm``) passes that comparison and is still not the model; running the model itself
on the same inputs catches it. Where they differ and the graph run again agrees with the
model, the recorded output is what changed (written after the recording, by something that
does not own its memory): said as such (``RECORDING_CHANGED``), the capture not blamed; so is
a graph that no longer runs at all (``GRAPH_FAILS_AGAIN``: a CUDA error an earlier kernel left).
"""

from __future__ import annotations

import copy

import torch

from ..ir.shapes import model_device
from .numerics import MODEL_TOL, as_tuple, compare, one_line
from .prepare import Recording

RECORDING_CHANGED = ("the graph's output recorded before the kernels ran no longer holds what "
                     "the graph computes: something wrote into its memory since (a kernel "
                     "storing out of bounds, most likely; none is offered)")
GRAPH_FAILS_AGAIN = ("the traced graph, which ran before the kernels did, fails when run again "
                     "after them (a kernel storing out of bounds, most likely; none is offered)")
# Verdicts of `graph_matches_model` that are not the capture's fault.
NOT_THE_CAPTURE = (RECORDING_CHANGED, GRAPH_FAILS_AGAIN)


def graph_matches_model(rec: Recording) -> tuple[bool | None, float | None, str]:
    module = rec.analysis.module
    device = rec.device
    try:
        model = module if model_device(module) == device else copy.deepcopy(module).to(device)
        with torch.no_grad():
            out = model(*[t.clone() for t in rec.inputs])
    except Exception as e:  # noqa: BLE001 - the graph ran; the model's own failure is noted
        return None, None, f"the model itself did not run: {one_line(e)}"
    expected, actual = as_tuple(out), as_tuple(rec.model_out)
    if not expected or len(expected) != len(actual) or any(
            a.shape != e.shape for a, e in zip(actual, expected, strict=True)):
        return None, None, "the model's outputs do not line up with the graph's"
    same, err, differs = compare(actual, expected, MODEL_TOL)
    if same:
        return same, err, differs
    # The graph run again: agreeing with the model now, the recorded output changed after the
    # recording (memory written by something that does not own it), not the capture.
    try:
        with torch.no_grad():
            again = as_tuple(rec.gm(*[t.clone() for t in rec.inputs]))
    except Exception as e:  # noqa: BLE001 - it ran before the kernels did
        return False, err, f"{GRAPH_FAILS_AGAIN} ({one_line(e)}; {differs})"
    if compare(again, expected, MODEL_TOL)[0]:
        return False, err, f"{RECORDING_CHANGED} ({differs})"
    return same, err, differs
