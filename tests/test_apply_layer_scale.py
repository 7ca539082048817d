"""A cluster that starts in the last statements of an `if` on a module setting and goes on
below it: ConvNeXt's layer scale before the residual add,

    if self.gamma is not None:
        x = x.mul(self.gamma)
    x = x + shortcut

is rewritten keeping the choice (the tail form of ``sourcemap/guard.py``):

    if self.gamma is not None:
        x = cluster0(x, self.gamma, shortcut)
    else:
        x = x + shortcut

Before, it stayed a pointer ("lie in different blocks"): timm's convnext_atto had 8 verified
clusters so. Kernels run under the Triton interpreter on CPU.
"""

from __future__ import annotations

import pytest
import torch
from apply_checks import DEVICE, apply_net, original_and_rewritten, same_outputs
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.load import import_model_file
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.apply import forget_package
from fusion_core.sourcemap.fused import package_name

LAYER_SCALE = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, scale=True):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gamma = nn.Parameter(torch.full((8,), 0.5)) if scale else None

    def forward(self, x):
        shortcut = x
        x = self.fc(x)
        if self.gamma is not None:
            # layer scale
            x = x.mul(self.gamma)

        x = x + shortcut
        return x


class Net(nn.Module):
    def __init__(self, scales=None):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block(False), Block())
        if scales is not None:  # other settings than the analysed ones
            self.blocks = nn.Sequential(*(Block(s) for s in scales))
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        return self.out(self.blocks(x))
"""

REWRITTEN = """\
        if self.gamma is not None:
            # layer scale
            x = cluster0(x, self.gamma, shortcut)
        else:
            x = x + shortcut
        return x
"""


def _net(path, cls: str = "Net"):
    return analyze_file(path, [InputSpec((4, 8))], class_name=cls)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_layer_scale_before_the_residual_is_applied_keeping_the_choice(tmp_path, capture):
    path = tmp_path / "layer_scale.py"
    path.write_text(LAYER_SCALE)
    result = CliRunner().invoke(cli, ["--model", f"{path}:Net", "--input-shape", "4,8",
                                      "--capture", capture, "--no-timing", "--apply", "--yes"])
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output
    assert REWRITTEN in path.read_text()
    # The block without a layer scale runs the `else` branch: the add as written.
    same_outputs(tmp_path, path, LAYER_SCALE, shape=(4, 8))
    # A model with other settings than the analysed one computes what the original does.
    (tmp_path / "original.py").write_text(LAYER_SCALE)
    for scales in ((False, False), (True, False, True, True)):
        before = _built(tmp_path / "original.py", scales)
        after = _built(path, scales)
        after.load_state_dict(before.state_dict())
        x = torch.randn(3, 8)
        with torch.no_grad():
            torch.testing.assert_close(after.to(DEVICE)(x.to(DEVICE)).cpu(), before(x))


def _built(path, scales):
    forget_package(package_name(path.stem))  # a rewritten file imports its own package
    return import_model_file(path).Net(scales).eval()


def test_the_statements_above_the_run_in_the_if_body_stay_in_it(tmp_path):
    src = LAYER_SCALE.replace("""            # layer scale
            x = x.mul(self.gamma)
""", """            g = self.gamma
            x = x.mul(g)
""")
    path = tmp_path / "kept.py"
    path.write_text(src)
    mapping = next(m for m in map_clusters(_net(path)) if m.exact)
    assert mapping.replacement == (
        "        if self.gamma is not None:\n"
        "            g = self.gamma\n"
        "            x = cluster0(x, g, shortcut)\n"
        "        else:\n"
        "            x = x + shortcut")


def test_an_if_with_an_else_or_a_condition_on_a_global_stays_a_pointer(tmp_path):
    with_else = LAYER_SCALE.replace("""            x = x.mul(self.gamma)
""", """            x = x.mul(self.gamma)
        else:
            x = x * 1.0
""")
    on_global = LAYER_SCALE.replace("if self.gamma is not None:", "if SCALED:").replace(
        "Block(), Block(False), Block()", "Block(), Block()") + "\n\nSCALED = True\n"
    for name, src in (("with_else", with_else), ("on_global", on_global)):
        path = tmp_path / f"{name}.py"
        path.write_text(src)
        maps = map_clusters(_net(path))
        spanning = [m for m in maps if not m.exact and "lie in different blocks" in m.reason]
        assert spanning, (name, [(m.exact, m.reason) for m in maps])
        assert "or the last ones of its body with those right below it" in spanning[0].reason


def test_outputs_match_under_a_setting_changed_after_construction(tmp_path):
    """The edit reads the condition at each call, as the lines it replaces did."""
    path = tmp_path / "layer_scale.py"
    path.write_text(LAYER_SCALE)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    before, after = original_and_rewritten(tmp_path, path, LAYER_SCALE)
    before.blocks[0].gamma = None
    after.blocks[0].gamma = None
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(after.to(DEVICE)(x.to(DEVICE)).cpu(), before(x))


def test_a_sequential_called_below_the_if_keeps_the_call_inside_the_if(tmp_path):
    """The line below calls a Sequential whose first layer joins the cluster: the edit
    spells it layer by layer, and the fused call sits in the `if` body, not at its level."""
    src = LAYER_SCALE.replace(
        "        self.fc = nn.Linear(8, 8)\n",
        "        self.fc = nn.Linear(8, 8)\n        self.post = nn.Sequential(nn.ReLU(), "
        "nn.Linear(8, 8))\n").replace(
        "        x = x + shortcut\n        return x", "        x = self.post(x + shortcut)\n"
        "        return x").replace("Block(), Block(False), Block()", "Block(), Block()")
    path = tmp_path / "post.py"
    path.write_text(src)
    result = apply_net(path, "4,8")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output
    text = path.read_text()
    assert ("        if self.gamma is not None:\n"
            "            # layer scale\n"
            "            x = self.post[1](cluster0(x, self.gamma, shortcut))\n"
            "        else:\n") in text, text
    same_outputs(tmp_path, path, src, shape=(4, 8))


def test_a_number_bound_in_the_if_body_above_the_run_is_held_by_the_kernel(tmp_path):
    """`k = 0.5` in the body above the fused line is bound once on every path to it: the
    edit holds it (the line stays in the `if`), where the range's `if` line was taken for
    the run's first and `k` said to be unbound there."""
    src = LAYER_SCALE.replace("""            # layer scale
            x = x.mul(self.gamma)
""", """            k = 0.5
            x = x.mul(self.gamma) * k
""").replace("Block(), Block(False), Block()", "Block()")
    path = tmp_path / "k.py"
    path.write_text(src)
    mapping = next(m for m in map_clusters(_net(path)) if m.cluster_index == 0)
    assert mapping.exact, mapping.reason
    assert mapping.replacement.splitlines()[:3] == [
        "        if self.gamma is not None:", "            k = 0.5",
        "            x = cluster0(x, self.gamma, shortcut)"]
