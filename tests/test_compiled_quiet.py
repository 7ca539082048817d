"""The compiled record (the pytest plugin's `fusion_compiled`) compiles the user's model:
Dynamo's log lines ("Graph break from `Tensor.item()`") and its UserWarnings stayed on the
user's terminal. They are hushed for our compile only: the model's own warning still shows,
and the user's level on Dynamo's logger is what it was. One real CPU compile."""

from __future__ import annotations

import logging
import warnings

import torch
import torch.nn as nn

from fusion_core import compiled_record


class ItemBreak(nn.Module):
    def forward(self, x):
        warnings.warn("the model's own warning", UserWarning, stacklevel=1)
        scale = x.abs().sum().item()  # a graph break Dynamo logs at WARNING
        return torch.relu(x) * scale + 1.0


def test_a_graph_break_prints_no_dynamo_lines_and_the_models_warning_shows(capfd, caplog):
    dynamo = logging.getLogger("torch._dynamo")
    before = dynamo.level
    dynamo.setLevel(logging.INFO)  # the user's own setting
    try:
        with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING):
            warnings.simplefilter("always")
            record = compiled_record(ItemBreak(), torch.randn(4, 8))
        assert dynamo.level == logging.INFO  # restored after our compile
    finally:
        dynamo.setLevel(before)
    assert len(record.graph_breaks) == 1 and "item()" in record.graph_breaks[0].reason
    out, err = capfd.readouterr()
    assert "Graph break" not in out + err and "torch/_dynamo" not in out + err, err[-2000:]
    assert not [r for r in caplog.records if r.name.startswith("torch._dynamo")]
    texts = [str(w.message) for w in seen]
    assert "the model's own warning" in texts, texts
    assert not [w for w in seen if "torch/_dynamo" in w.filename.replace("\\", "/")], texts
