"""The Inductor comparison draws integer divisor inputs from 1, as validation does.

`python -m fusion_core.agreement` and `fusion-advisor --vs-inductor` drew every integer
input from [0, 16): a model computing `i // j` on integer inputs divided by zero there
(eager on the CPU refuses it). Both now draw through ``validate.inputs.graph_inputs``.
The compile itself is replaced by a stand-in that runs the model eagerly on the inputs it
is given and stops there, so no compiled kernel divides by zero in this process.
"""

from __future__ import annotations

import io
import sys

import pytest
import torch
from codegen_harness import Lambda
from rich.console import Console

import fusion_core.inductor.capture  # noqa: F401 - loaded for sys.modules below
from fusion_core import agreement as agreement_module
from fusion_core.cli_run import Run
from fusion_core.pipeline import Analysis, analyze
from fusion_core.report.progress import NO_PROGRESS


class Compiled(Exception):
    """Raised by the stand-in compile once it ran the model eagerly."""


def _analysis() -> Analysis:
    def fn(m, x, i, j):
        return (x * 2).relu() + 1, (i + 1) // j * 3
    shape = (64, 64)  # 4096 values from [0, 16): a zero among them is certain
    ints = torch.randint(1, 9, shape)
    return analyze(Lambda(fn), torch.randn(shape), ints, ints.clone())


def _eager_then_stop(seen: list[list[torch.Tensor]]):
    def capture(model, inputs, *args, **kwargs):
        seen.append(list(inputs))
        model(*inputs)  # eager: "ZeroDivisionError" on a 0 in `j`
        raise Compiled
    return capture


def test_the_agreement_path_draws_the_divisor_from_one(monkeypatch):
    seen: list[list[torch.Tensor]] = []
    monkeypatch.setattr(agreement_module, "capture", _eager_then_stop(seen))
    with pytest.raises(Compiled):
        agreement_module.agreement(_analysis())
    (x, i, j), = seen
    assert int(j.min()) >= 1 and int(i.min()) == 0  # only the divisor skips 0


def test_the_cli_vs_inductor_path_draws_the_divisor_from_one(monkeypatch):
    # the module, not the `capture` function the package exports under the same name
    capture_module = sys.modules["fusion_core.inductor.capture"]
    seen: list[list[torch.Tensor]] = []
    monkeypatch.setattr(capture_module, "capture", _eager_then_stop(seen))
    run = Run(_analysis(), Console(file=io.StringIO()), NO_PROGRESS, ())
    with pytest.raises(Compiled):
        run.compare_inductor()
    (x, i, j), = seen
    assert int(j.min()) >= 1 and int(i.min()) == 0
