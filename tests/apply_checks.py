"""Shared by the --apply tests: load a model file's `Net` fresh, and compare a rewritten
file's model with the original's on the original's weights."""

from __future__ import annotations

from pathlib import Path

import torch
from click.testing import CliRunner, Result

from fusion_core.cli import cli
from fusion_core.load import import_model_file, instantiate, pick_class
from fusion_core.sourcemap.apply import forget_package
from fusion_core.sourcemap.fused import package_name

# Where the rewritten model's kernels run: a GPU's when there is one (its kernels are not
# interpreted there), else the CPU's, under Triton's interpreter.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def load_net(path: Path, name: str = "Net") -> torch.nn.Module:
    forget_package(package_name(path.stem))  # a rewritten file imports its own package
    return instantiate(pick_class(import_model_file(path), path, name), path)


def apply_net(path: Path, shape: str = "2,3,8,8") -> Result:
    """`fusion-advisor --model PATH:Net --apply --yes` (no timing), as a user runs it."""
    return CliRunner().invoke(cli, ["--model", f"{path}:Net", "--input-shape", shape,
                                    "--no-timing", "--apply", "--yes"])


def refused_untouched(path: Path, source: str, shape: str) -> str:
    """`source` written to `path`, run through `apply_net`: the run ends cleanly and leaves
    the file as it was; its output, for the test to find the refusal's reason in."""
    path.write_text(source)
    result = apply_net(path, shape)
    assert result.exit_code == 0, result.output
    assert path.read_text() == source
    return result.output


def original_and_rewritten(tmp_path: Path, path: Path, original: str, name: str = "Net"
                           ) -> tuple[torch.nn.Module, torch.nn.Module]:
    """`original`'s model and the rewritten `path`'s, in eval mode, on the original's
    weights (BatchNorm's statistics moved away from 0 and 1)."""
    (tmp_path / f"original_{path.stem}.py").write_text(original)
    before = load_net(tmp_path / f"original_{path.stem}.py", name).eval()
    after = load_net(path, name).eval()
    for buffer_name, buffer in before.named_buffers():  # BatchNorm starts at mean 0, var 1
        if buffer_name.endswith(("running_mean", "running_var")):
            buffer.uniform_(0.5, 1.5)
    after.load_state_dict(before.state_dict())
    return before, after


def same_outputs(tmp_path: Path, path: Path, original: str, name: str = "Net",
                 shape: tuple[int, ...] = (2, 3, 8, 8), device: str = DEVICE,
                 atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """The rewritten `path` computes what `original` did, on the original's weights."""
    before, after = original_and_rewritten(tmp_path, path, original, name)
    x = torch.randn(shape, device=device)
    with torch.no_grad():
        want, got = before.to(device)(x), after.to(device)(x)
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


def conv_apart(layer: str, arg: str = "x", functional: str = "nn.functional") -> str:
    """A GPU target's kernel arguments for `layer(arg)`, a Conv2d whose bias the analysis
    split off: the call without its bias, then the bias (sourcemap/unbiased.py)."""
    return (f"{functional}.conv2d({arg}, {layer}.weight, None, {layer}.stride, "
            f"{layer}.padding, {layer}.dilation, {layer}.groups), "
            f"{layer}.bias.reshape(-1, 1, 1)")


def bn_args(layer: str) -> str:
    """A kernel's arguments for BatchNorm2d `layer` in eval mode, as the edit passes them."""
    return (f"{layer}.running_mean.reshape(-1, 1, 1), {layer}.running_var.reshape(-1, 1, 1), "
            f"{layer}.weight.reshape(-1, 1, 1), {layer}.bias.reshape(-1, 1, 1)")


def applied_file(tmp_path: Path, source: str) -> Path:
    """`source` written to `tmp_path/net.py` and rewritten by `apply_net`, one edit."""
    path = tmp_path / "net.py"
    path.write_text(source)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit to" in result.output, result.output
    return path


def seeded_outputs(before: torch.nn.Module, after: torch.nn.Module, x: torch.Tensor,
                   seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Both models on `x` under torch.no_grad(), each from the same random state (the same
    dropout draws)."""
    with torch.no_grad():
        torch.manual_seed(seed)
        want = before(x)
        torch.manual_seed(seed)
        return want, after(x)


def same_in_train_mode(tmp_path: Path, path: Path, original: str, seed: int = 3,
                       shape: tuple[int, ...] = (2, 3, 8, 8)) -> None:
    """In train mode under torch.no_grad(), the rewritten `path` draws and computes as
    `original` does."""
    before, after = original_and_rewritten(tmp_path, path, original)
    before, after = before.to(DEVICE).train(), after.to(DEVICE).train()
    x = torch.randn(shape, device=DEVICE)
    want, got = seeded_outputs(before, after, x, seed)
    torch.testing.assert_close(got, want)
