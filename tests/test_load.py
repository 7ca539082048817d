"""Loading a model file: import by path, pick the root class, build it in eval mode."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch.nn as nn

from fusion_core.errors import ModelLoadError
from fusion_core.load import import_model_file, load_model, module_classes, pick_class

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

NESTED = """
import torch.nn as nn
from torch.nn import Linear, LayerNorm

class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = Linear(4, 4)

    def forward(self, x):
        return self.lin(x)

class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.norm = LayerNorm(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.norm(self.inner(x)))
"""

TWO_ROOTS = NESTED + """
class Other(nn.Module):
    def forward(self, x):
        return x * 2.0
"""


def write(tmp_path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_microgpt_picks_the_root_class():
    module = import_model_file(EXAMPLES / "microgpt.py")
    names = [c.__name__ for c in module_classes(module)]
    assert names == ["CausalSelfAttention", "MLP", "Block", "MicroGPT"]  # file order
    assert pick_class(module, "microgpt.py", None).__name__ == "MicroGPT"


def test_root_class_is_picked_and_imported_classes_ignored(tmp_path):
    module = import_model_file(write(tmp_path, "nested.py", NESTED))
    assert [c.__name__ for c in module_classes(module)] == ["Inner", "Outer"]
    assert pick_class(module, "nested.py", None).__name__ == "Outer"


def test_model_class_selects_a_submodule(tmp_path):
    model = load_model(write(tmp_path, "nested.py", NESTED), "Inner")
    assert type(model).__name__ == "Inner"


def test_two_roots_need_model_class(tmp_path):
    path = write(tmp_path, "two.py", TWO_ROOTS)
    with pytest.raises(ModelLoadError, match=r"several nn.Module classes \(Outer, Other\)"):
        load_model(path)
    assert type(load_model(path, "Other")).__name__ == "Other"


def test_model_is_in_eval_mode(tmp_path):
    model = load_model(write(tmp_path, "nested.py", NESTED))
    assert not model.training
    assert all(not m.training for m in model.modules())


def test_defaults_only_constructor_is_fine(tmp_path):
    path = write(tmp_path, "defaults.py", """
        import torch.nn as nn

        class M(nn.Module):
            def __init__(self, width=4, *args, **kwargs):
                super().__init__()
                self.lin = nn.Linear(width, width)
    """)
    assert isinstance(load_model(path).lin, nn.Linear)


def test_non_python_file_is_rejected(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\x00\x01")
    with pytest.raises(ModelLoadError):
        load_model(path)


def test_error_in_import_points_at_the_user_line(tmp_path):
    path = write(tmp_path, "boom.py", """
        import torch.nn as nn
        SIZE = 1 // 0
    """)
    with pytest.raises(ModelLoadError, match=r"boom.py:2: .*ZeroDivisionError"):
        load_model(path)
