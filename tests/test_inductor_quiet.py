"""`--vs-inductor` compiles the model: Dynamo's own notes on what it cannot trace (a
`UserWarning` such as "Dynamo does not know how to trace the builtin `math.log`") are not
the user's business and stay out of the output, while other warnings still show."""

from __future__ import annotations

import warnings
import zlib

import torch
import torch.nn as nn

from fusion_core.inductor.capture import capture


class Checksum(nn.Module):
    """Calls a C builtin Dynamo does not trace: its note is a warning from torch._dynamo."""

    def forward(self, x):
        if torch.compiler.is_compiling():
            warnings.warn("the model's own warning", UserWarning, stacklevel=1)
        return torch.relu(x) * (zlib.crc32(b"fusion-advisor quiet") % 7) + 1.0


def test_dynamo_notes_stay_out_and_other_warnings_show():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cap = capture(Checksum(), [torch.randn(4, 8)])
        warnings.warn("a warning of ours after the compile", UserWarning, stacklevel=1)
    texts = [str(w.message) for w in seen]
    assert cap.kernels
    assert not any("Dynamo does not know how to trace" in t for t in texts), texts
    assert "the model's own warning" in texts  # raised while Dynamo traces forward
    assert "a warning of ours after the compile" in texts
