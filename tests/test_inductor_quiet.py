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


def test_inductor_chatter_is_hushed_for_the_call_and_levels_come_back():
    """Inductor's own notes (a `UserWarning` from `torch._inductor.compile_fx`, a log line of
    `torch._inductor.utils`) stay out during our compile; the user's logger still speaks, and
    every level is the user's again afterwards."""
    import logging

    from fusion_core.compile_quiet import quiet

    utils_log = logging.getLogger("torch._inductor.utils")
    utils_log.setLevel(logging.INFO)
    user_log = logging.getLogger("the_users_model")
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    keep = Keep()
    for lg in (utils_log, user_log):
        lg.addHandler(keep)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with quiet():
                warnings.warn_explicit("TensorFloat32 tensor cores ... not enabled", UserWarning,
                                       "compile_fx.py", 1, module="torch._inductor.compile_fx")
                utils_log.warning("not enough SMs to use max_autotune")
                user_log.warning("the user's own line")
            warnings.warn_explicit("after the call", UserWarning, "compile_fx.py", 2,
                                   module="torch._inductor.compile_fx")
        assert [str(w.message) for w in seen] == ["after the call"]
        assert records == ["the user's own line"]
        assert utils_log.level == logging.INFO
    finally:
        for lg in (utils_log, user_log):
            lg.removeHandler(keep)
        utils_log.setLevel(logging.NOTSET)
