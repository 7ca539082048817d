"""Every bad input gets one line on stderr naming the problem and the fix, exit code 2,
no traceback; `--debug` lets the exception through instead."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_inputs import assert_one_line
from click.testing import CliRunner

from fusion_core.cli import FIXES, cli
from fusion_core.errors import CaptureError, Fix, FusionAdvisorError, InputSpecError, ModelLoadError
from fusion_core.ir.shapes import InputSpec

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "example_net.py")

GOOD = """
import torch.nn as nn

class M(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0
"""

BAD_FILES = {
    "syntax.py": """
import torch.nn as nn

class M(nn.Module):
    def forward(self, x)
        return x
""",
    "imports.py": """
import torch.nn as nn
import fusion_advisor_missing_package_xyz

class M(nn.Module):
    pass
""",
    "no_module.py": """
import torch
from torch.nn import Linear  # imported classes are not candidates

def forward(x):
    return x
""",
    "several.py": """
import torch.nn as nn

class A(nn.Module):
    def forward(self, x):
        return x * 2.0

class B(nn.Module):
    def forward(self, x):
        return x + 1.0
""",
    "needs_args.py": """
import torch.nn as nn

class M(nn.Module):
    def __init__(self, width, depth=2):
        super().__init__()
        self.width = width

    def forward(self, x):
        return x * 2.0
""",
    "ctor_raises.py": """
import torch.nn as nn

class M(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("no weights file")
""",
    "data_dependent.py": """
import torch.nn as nn

class M(nn.Module):
    def forward(self, x):
        y = x * 2.0
        if y.sum() > 0:
            return y
        return -y
""",
    "forward_bug.py": """
import torch.nn as nn

class M(nn.Module):
    def forward(self, x):
        y = x * 2.0
        return y.not_a_tensor_method()
""",
    "debug_item.py": """
import torch.nn as nn

class M(nn.Module):
    def forward(self, x):
        y = x * 2.0
        print(y.max().item())
        return y + 1.0
""",
    "uses_len.py": """
import torch.nn as nn

class M(nn.Module):
    def forward(self, x):
        y = x * 2.0
        return y * len(x)
""",
}


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def files(tmp_path):
    out = {}
    for name, text in {**BAD_FILES, "good.py": GOOD}.items():
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        out[name] = str(path)
    return out


def assert_one_line_error(result, *needles: str) -> str:
    """One error line (see cli_inputs.assert_one_line) and nothing on stdout."""
    assert result.stdout == ""
    return assert_one_line(result, *needles)


def test_missing_model_file(tmp_path):
    missing = str(tmp_path / "nope.py")
    assert_one_line_error(invoke("--model", missing, "--input-shape", "4,8"),
                          "model file not found", missing, "--model")


def test_syntax_error_names_file_and_line(files):
    assert_one_line_error(invoke("--model", files["syntax.py"], "--input-shape", "4,8"),
                          "syntax.py:4", "syntax error", "fix")


def test_import_error_names_the_missing_module(files):
    assert_one_line_error(invoke("--model", files["imports.py"], "--input-shape", "4,8"),
                          "imports.py:2", "fusion_advisor_missing_package_xyz", "install")


def test_no_module_in_file(files):
    assert_one_line_error(invoke("--model", files["no_module.py"], "--input-shape", "4,8"),
                          "no nn.Module subclass", "define one")


def test_several_classes_without_model_class(files):
    assert_one_line_error(invoke("--model", files["several.py"], "--input-shape", "4,8"),
                          "several nn.Module classes (A, B)", "--model-class")


def test_unknown_model_class(files):
    assert_one_line_error(
        invoke("--model", files["several.py"], "--model-class", "C", "--input-shape", "4,8"),
        "no nn.Module class 'C'", "classes found: A, B")


def test_constructor_needing_arguments(files):
    assert_one_line_error(invoke("--model", files["needs_args.py"], "--input-shape", "4,8"),
                          "M() needs arguments (width)", "give them defaults")


def test_constructor_that_raises(files):
    assert_one_line_error(invoke("--model", files["ctor_raises.py"], "--input-shape", "4,8"),
                          "M() raised ValueError: no weights file", "constructor")


def test_untraceable_forward_names_line_and_reason(files):
    # Default capture (auto): FX fails, then export; one line gives both reasons.
    line = assert_one_line_error(
        invoke("--model", files["data_dependent.py"], "--input-shape", "4,8"),
        "cannot capture M", "data_dependent.py:6", "if y.sum() > 0:", "control flow",
        "torch.where", "torch.compiler.is_compiling()")
    assert files["data_dependent.py"] in line and "--input-shape" not in line


def test_a_debug_print_of_a_value_is_captured_through_export(files):
    result = invoke("--model", files["debug_item.py"], "--input-shape", "4,8")
    assert result.exit_code == 0, result.output
    assert (f"FX could not capture it, so torch.export was used: {files['debug_item.py']}:6 "
            "(`print(y.max().item())`): `.item()` reads a tensor's value") in result.stdout
    # The model's own print still prints (what FX traces: `Proxy(item)`); the error is one line.
    line = assert_one_line(
        invoke("--model", files["debug_item.py"], "--input-shape", "4,8", "--capture", "fx"),
        "cannot capture M with FX at", "debug_item.py:6 (`print(y.max().item())`)",
        "reads a tensor's value", "try torch.export instead (--capture export)")
    assert "does not fit" not in line and "--input-shape" not in line


def test_untraceable_forward_with_fx_capture(files):
    assert_one_line_error(
        invoke("--model", files["data_dependent.py"], "--input-shape", "4,8", "--capture", "fx"),
        "cannot trace M.forward", "data_dependent.py:6", "if y.sum() > 0:", "control flow",
        "--capture export")


def test_untraceable_builtin_names_line_without_the_control_flow_hint(files):
    line = assert_one_line_error(
        invoke("--model", files["uses_len.py"], "--input-shape", "4,8", "--capture", "fx"),
        "cannot trace M.forward", "uses_len.py:6", "'len' is not supported", "fix that line")
    assert "control flow" not in line


def test_bug_in_forward_is_not_blamed_on_the_input(files):
    line = assert_one_line_error(
        invoke("--model", files["forward_bug.py"], "--input-shape", "4,8", "--capture", "fx"),
        "forward_bug.py:6", "AttributeError", "not_a_tensor_method", "fix that line")
    assert "input" not in line.replace("--input-shape", "")


@pytest.mark.parametrize("shape", ["16384x1024", "-1,3", "", "4,,8", "4.5,8", "a"])
def test_malformed_input_shape(shape):
    assert_one_line_error(invoke("--model", EXAMPLE, f"--input-shape={shape}"),
                          f"malformed input shape {shape!r}; give --input-shape positive integers",
                          "e.g. --input-shape 16384,1024")


def test_zero_dimension_input_shape():
    assert_one_line_error(invoke("--model", EXAMPLE, "--input-shape", "0,1024"),
                          "zero dimension", "at least 1")


def test_missing_input_shape():
    assert_one_line_error(invoke("--model", EXAMPLE), "missing --input-shape")


def test_wrong_number_of_input_shapes():
    assert_one_line_error(
        invoke("--model", EXAMPLE, "--input-shape", "4,1024", "--input-shape", "4,1024"),
        "takes 1 input (x) but 2 were given", "repeat --input-shape once per input")


def test_unknown_dtype():
    assert_one_line_error(
        invoke("--model", EXAMPLE, "--input-shape", "4,1024", "--dtype", "float64"),
        "unknown dtype 'float64'", "float32, float16, bfloat16, int64, int32, bool")


def test_dtype_count_mismatch(files):
    assert_one_line_error(
        invoke("--model", files["good.py"], "--input-shape", "4,8", "--dtype", "float16",
               "--dtype", "float32", "--dtype", "int64"),
        "3 --dtype for 1 --input-shape")


def test_input_the_model_rejects_names_the_layer():
    assert_one_line_error(invoke("--model", EXAMPLE, "--input-shape", "4,100"),
                          "does not fit the model", "layer `self.proj1`", "example_net.py:19",
                          "check --input-shape")


def test_a_layer_whose_weights_have_another_dtype_than_its_input_is_named():
    # The API does not cast the model to the input's dtype as the CLI does; fake kernels
    # ran the float32 Linear on float16 input, and every later real run failed.
    import torch
    import torch.nn as nn

    import fusion_core

    # `self[0]`, as a Sequential's layer is indexed (was `self.0`, no Python)
    want = r"layer `self\[0\]` rejected it \(its weights are float32 and its input float16"
    with pytest.raises(InputSpecError, match=want):
        fusion_core.analyze(nn.Sequential(nn.Linear(8, 8), nn.ReLU()),
                            InputSpec((4, 8), torch.float16), capture="fx")


def test_wrong_dtype_for_embedding_names_the_layer():
    microgpt = str(Path(EXAMPLE).with_name("microgpt.py"))
    assert_one_line_error(invoke("--model", microgpt, "--input-shape", "2,16"),
                          "layer `self.tok_emb`", "--dtype")


def test_json_path_in_missing_folder(tmp_path, files):
    target = str(tmp_path / "no" / "such" / "out.json")
    assert_one_line_error(
        invoke("--model", files["good.py"], "--input-shape", "4,8", "--json", target),
        f"cannot write --json {target}", "choose another path")


def test_json_path_is_a_directory(tmp_path, files):
    assert_one_line_error(
        invoke("--model", files["good.py"], "--input-shape", "4,8", "--json", str(tmp_path)),
        "cannot write --json")


def test_json_checked_before_the_analysis_runs(tmp_path, files):
    # A bad --json path is reported even when the model would also fail later.
    target = str(tmp_path / "missing" / "out.json")
    assert_one_line_error(
        invoke("--model", files["data_dependent.py"], "--input-shape", "4,8", "--json", target),
        "cannot write --json")


@pytest.mark.parametrize("name, exc", [
    ("syntax.py", ModelLoadError), ("several.py", ModelLoadError),
    ("data_dependent.py", CaptureError),
])
def test_debug_shows_the_exception(files, name, exc):
    result = invoke("--model", files[name], "--input-shape", "4,8", "--debug")
    assert isinstance(result.exception, exc)
    assert result.exception.__cause__ is not None or exc is ModelLoadError


def test_debug_shows_input_errors():
    result = invoke("--model", EXAMPLE, "--input-shape", "4x8", "--debug")
    assert isinstance(result.exception, InputSpecError)
    assert isinstance(result.exception, FusionAdvisorError)


def test_console_script_exit_code_and_stderr(tmp_path):
    # The real entry point, in a fresh interpreter: exit 2 and one line, no traceback.
    proc = subprocess.run(
        [sys.executable, "-c", "from fusion_core.cli import main; main()",
         "--model", str(tmp_path / "absent.py"), "--input-shape", "4,8"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: model file not found: {tmp_path / 'absent.py'}; pass --model PATH to a .py file "
        "(or FILE.py:NAME, or package.module:NAME)"]


def test_every_fix_is_worded_by_the_cli_and_the_plugin():
    from pytest_fusion.fixture import fixes

    plugin = fixes("fusion_advisor.analyze(...)")
    assert set(FIXES) == set(Fix) == set(plugin)
    assert not any("--" in text for text in plugin.values())
    with pytest.raises(InputSpecError) as err:
        InputSpec.parse("4x8")
    assert err.value.worded(FIXES) == (
        "malformed input shape '4x8'; give --input-shape positive integers separated by commas, "
        "e.g. --input-shape 16384,1024 (a memory order may follow a colon: "
        "8,64,56,56:channels_last)")
    assert err.value.worded(plugin) == ("malformed input shape '4x8'; give a shape as a tuple of "
                                        "positive ints, e.g. (16384, 1024), or as a string of them "
                                        "separated by commas, e.g. '16384,1024' (a memory order "
                                        "may follow a colon: '8,64,56,56:channels_last')")
