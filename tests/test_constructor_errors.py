"""A constructor that raises: the one line names the fix its cause calls for. A value the
constructor rejects (nn.GroupNorm's channels) asks for other --model-kwargs, a bug in its
code for a fix of the constructor, and a constructor run on its defaults for arguments."""

from __future__ import annotations

import functools
import json

import pytest
from cli_inputs import assert_one_line
from click.testing import CliRunner

import fusion_core
from fusion_core.cli import cli
from fusion_core.errors import ModelLoadError

UNET = """\
import torch.nn as nn


class UNetBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm = nn.GroupNorm(8, ch)

    def forward(self, x):
        return self.norm(x).relu()
"""

TYPO = UNET.replace("nn.GroupNorm(8, ch)", "nn.GroupNrom(8, ch)")
DEFAULTS = UNET.replace("def __init__(self, ch)", "def __init__(self, ch=30)")


def _run(tmp_path, text: str, *args: str):
    path = tmp_path / "unet.py"
    path.write_text(text)
    return CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "2,32,4,4", *args])


def test_a_value_the_constructor_rejects_asks_for_other_model_kwargs(tmp_path):
    result = _run(tmp_path, UNET, "--model-kwargs", json.dumps({"ch": 30}))
    line = assert_one_line(
        result, "UNetBlock(ch=30) raised ValueError: num_channels", "divisible by num_groups",
        "at unet.py:7; check the values given with --model-kwargs (if they are right, the "
        "constructor)")
    assert not line.rstrip().endswith("(fix the constructor)")


def test_a_bug_in_the_constructor_is_not_blamed_on_the_model_kwargs(tmp_path):
    result = _run(tmp_path, TYPO, "--model-kwargs", json.dumps({"ch": 32}))
    assert_one_line(result, "UNetBlock(ch=32) raised AttributeError: ", "GroupNrom",
                    "at unet.py:7; a bug in the constructor, not the values given with "
                    "--model-kwargs: fix the constructor")


def test_defaults_that_fail_ask_for_model_kwargs(tmp_path):
    result = _run(tmp_path, DEFAULTS)
    assert_one_line(result, "UNetBlock() raised ValueError: num_channels",
                    "at unet.py:7; it ran with its defaults (ch=30): pass "
                    """others with --model-kwargs '{"ch": ...}', or fix the constructor""")


def test_the_python_api_words_the_fix_as_model_kwargs(tmp_path):
    path = tmp_path / "unet.py"
    path.write_text(UNET)
    with pytest.raises(ModelLoadError) as err:
        fusion_core.load_model(path, model_kwargs={"ch": 30})
    assert str(err.value).endswith("; check the values given in model_kwargs (if they are "
                                   "right, the constructor)")


def _make_block(ch: int, note: str = "", groups: int = 8):
    return __import__("torch").nn.GroupNorm(groups, ch)


def test_a_partial_is_named_by_the_function_it_wraps_with_its_bound_arguments():
    # `partial(...)` is no call the user wrote: name `_make_block` and every argument it got.
    with pytest.raises(ModelLoadError) as err:
        fusion_core.build_model(functools.partial(_make_block, 30, note="x"), {"groups": 7})
    assert str(err.value).startswith(
        "_make_block(30, note='x', groups=7) raised ValueError: num_channels")
    # A nested partial's keywords given later override the earlier ones, as the call does.
    inner = functools.partial(_make_block, note="x", groups=4)
    with pytest.raises(ModelLoadError) as err:
        fusion_core.build_model(functools.partial(inner, 30, groups=7))
    assert str(err.value).startswith("_make_block(30, note='x', groups=7) raised ValueError")


def test_a_partial_missing_an_argument_is_named_by_its_function():
    with pytest.raises(ModelLoadError) as err:
        fusion_core.build_model(functools.partial(_make_block, note="x"))
    assert str(err.value).startswith("_make_block() needs arguments (ch)")


def _make_norm(ch: int = 30, groups: int = 8):
    return __import__("torch").nn.GroupNorm(groups, ch)


def test_values_a_partial_binds_are_not_called_its_defaults():
    # partial(_make_norm, ch=30): ch=30 is the user's value, groups=8 the function's default.
    with pytest.raises(ModelLoadError) as err:
        fusion_core.build_model(functools.partial(_make_norm, ch=30))
    assert ("it ran with the values its partial binds (ch=30) and its defaults (groups=8): "
            "pass others as model_kwargs=") in str(err.value)
