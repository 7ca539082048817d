"""A forward that returns an object torch.export cannot flatten (a class of the user's, a
Hugging Face `DynamicCache`): one line that names the class and what to return instead."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from fusion_core.errors import CaptureError
from fusion_core.pipeline import analyze


class Box:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


class Boxed(nn.Module):
    def forward(self, x):
        return Box(torch.relu(x) * 2.0)


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_an_unflattenable_result_is_named_with_what_to_return(capture):
    with pytest.raises(CaptureError) as err:
        analyze(Boxed(), (4, 8), capture=capture)
    msg = str(err.value)
    assert "\n" not in msg
    assert ("Boxed.forward returns a `Box`, which torch.export cannot flatten: return "
            "tensors, or tuples, lists and dicts of them") in msg
    # Not the generic advice, which names no line here, nor torch's pytree essay.
    assert "rewrite the line they name" not in msg and "register a pytree" not in msg
    assert "use_cache" not in msg
    assert "FX failed too" not in msg  # FX stopped at the same result: said once


def test_fx_alone_names_the_result_it_cannot_record_and_no_missing_line():
    with pytest.raises(CaptureError) as err:
        analyze(Boxed(), (4, 8), capture="fx")
    msg = str(err.value)
    assert msg == ("cannot trace Boxed.forward: it returns a `Box`, which FX cannot record: "
                   "return tensors, or tuples, lists and dicts of them")


def test_a_hugging_face_cache_result_says_use_cache_false():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPTNeoXConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        vocab_size=64, max_position_embeddings=32)
    model = transformers.GPTNeoXModel(config)
    with pytest.raises(CaptureError) as err:
        analyze(model, torch.zeros(1, 8, dtype=torch.int64))
    msg = str(err.value)
    assert "GPTNeoXModel.forward returns a `DynamicCache`" in msg
    assert "unless its config has `use_cache=False`" in msg
    # ... and the advice is true: without the cache the model captures.
    config.use_cache = False
    assert analyze(transformers.GPTNeoXModel(config),
                   torch.zeros(1, 8, dtype=torch.int64)).clusters
