"""A number written first (`1 + scale`, `2.0 * g`, `math.sqrt(2.0 / math.pi) * t`, `s * h`)
under torch.export.

Export records the tensor first (`aten.add.Tensor(scale, 1)`); matched in source order, the
source edit passed the constant where the kernel takes the tensor (`cluster0(x, 1, shift)`,
with the note "built into the kernel: scale = 1") and `--apply` failed its check. A number
computed by `math` (GPT-2's tanh GELU), a local set only to constants and a number attribute
of the module were still taken for the tensor: the cluster stayed a pointer ("`math.sqrt(...)`
is not `add`").
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from apply_checks import same_outputs
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.pipeline import analyze
from fusion_core.sourcemap import map_clusters


class Modulate(nn.Module):  # DiT's adaLN modulation
    def forward(self, x, scale, shift):
        h = x * (1 + scale) + shift
        return torch.relu(h)


class Doubled(nn.Module):
    def forward(self, x):
        return torch.relu(2.0 * x)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_leading_constant_stays_a_constant_in_the_source_edit(capture):
    a = analyze(Modulate(), (4, 8), (4, 8), (4, 8), capture=capture)
    (m,) = map_clusters(a)
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(scale, x, shift)"
    assert m.baked == ()  # was `scale = 1`: the tensor taken for the constant


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_product_with_the_constant_first_maps_exactly(capture):
    (m,) = map_clusters(analyze(Doubled(), (4, 8), capture=capture))
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(x)"


class TanhGelu(nn.Module):  # GPT-2's NewGELUActivation, as nanoGPT writes it
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 0.5

    def forward(self, h):
        s = 0.25
        return torch.relu(s * h) + self.scale * h


class Arithmetic(nn.Module):  # numbers computed from held numbers
    def forward(self, h):
        s = 0.25
        return torch.relu(-s * h) + (1 - s) * h


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class ModuleConstant(nn.Module):  # the GELU with its constant named at the top of the file
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


class Unknown(nn.Module):
    def forward(self, h, s: float = 0.25):
        return torch.relu(s * h)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_number_math_computes_is_the_constant_of_the_tanh_gelu(capture):
    (m,) = map_clusters(analyze(TanhGelu(), (4, 8), capture=capture))
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(x)"
    assert m.baked == (f"math.sqrt(2.0 / math.pi) = {math.sqrt(2.0 / math.pi)!r}",)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_local_set_to_a_constant_and_a_number_attribute_are_the_constants(capture):
    (m,) = map_clusters(analyze(Scaled(), (4, 8), capture=capture))
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(h)"
    assert set(m.baked) == {"s = 0.25", "self.scale = 0.5"}


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_module_constant_written_first_is_the_constant(capture):
    (m,) = map_clusters(analyze(ModuleConstant(), (4, 8), capture=capture))
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(x)"
    assert m.baked == (f"SQRT_2_OVER_PI = {SQRT_2_OVER_PI!r}",)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_arithmetic_on_numbers_is_a_number(capture):
    (m,) = map_clusters(analyze(Arithmetic(), (4, 8), capture=capture))
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(h)"


def test_a_parameter_is_not_known_to_be_a_number_and_gets_no_edit_naming_it():
    """`s` may hold another number for another caller: the cluster stays a pointer, and the
    reason names `s` (the graph's tensor is the input `h`), not `h`."""
    (m,) = map_clusters(analyze(Unknown(), (4, 8), capture="export"))
    assert not m.exact
    assert m.replacement is None
    assert m.reason.startswith("`s` is a parameter of `forward`"), m.reason


GELU_FILE = """\
import math

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))
"""


def test_apply_rewrites_the_tanh_gelu_captured_by_export_and_computes_the_same(tmp_path):
    path = tmp_path / "gelu_net.py"
    path.write_text(GELU_FILE)
    result = CliRunner().invoke(cli, ["--model", f"{path}:Net", "--input-shape", "4,8",
                                      "--capture", "export", "--no-timing", "--apply", "--yes"])
    assert result.exit_code == 0, result.output
    assert "return cluster0(h)" in path.read_text()
    same_outputs(tmp_path, path, GELU_FILE, shape=(4, 8))
