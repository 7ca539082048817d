"""Shared by the --apply tests: load a model file's `Net` fresh, and compare a rewritten
file's model with the original's on the original's weights."""

from __future__ import annotations

from pathlib import Path

import torch

from fusion_core.load import import_model_file, instantiate, pick_class
from fusion_core.sourcemap.apply import forget_package
from fusion_core.sourcemap.fused import package_name


def load_net(path: Path) -> torch.nn.Module:
    forget_package(package_name(path.stem))  # a rewritten file imports its own package
    return instantiate(pick_class(import_model_file(path), path, "Net"), path)


def same_outputs(tmp_path: Path, path: Path, original: str) -> None:
    """The rewritten `path` computes what `original` did, on a 2×3×8×8 input."""
    (tmp_path / "original.py").write_text(original)
    before, after = load_net(tmp_path / "original.py").eval(), load_net(path).eval()
    for name, buffer in before.named_buffers():  # BatchNorm starts at mean 0, var 1
        if name.endswith(("running_mean", "running_var")):
            buffer.uniform_(0.5, 1.5)
    after.load_state_dict(before.state_dict())
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(after(x), before(x), atol=1e-5, rtol=1e-4)
