"""The input shape the whole-model numerics check runs at under the interpreter (issue 29):
every input dim the model allows is cut, a dim the model fixes keeps its size, a size that
changes the graph is not used, and the console and JSON reports say which shape was used."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
import torch.nn as nn
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze
from fusion_core.validate import validate
from fusion_core.validate.model_shape import search, smallest_matching
from fusion_core.validate.prepare import graph_difference
from fusion_core.validate.shrink import resized, shrink_steps, smaller_sizes


class FreeLength(nn.Module):
    """Self-attention scores with a softmax in plain ops: the hidden size (32) is fixed by
    the Linear, the sequence length is free."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        h = self.proj(x)
        scores = h @ h.transpose(1, 2)
        e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)


class FixedLength(nn.Module):
    """A learned positional table of 48 rows: the sequence length is fixed too."""

    def __init__(self, tokens: int = 48, hidden: int = 32):
        super().__init__()
        self.positions = nn.Parameter(torch.randn(tokens, hidden))
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        return torch.relu(self.proj(x + self.positions) * 2.0)


class LengthBranch(nn.Module):
    """Takes any length, but from 32 tokens on runs one more op: a length below that is
    another graph."""

    def forward(self, x):
        y = torch.sigmoid(x) * 3.0
        if x.shape[1] >= 32:
            y = y + 1.0
        return torch.relu(y)


def test_each_dim_tries_sizes_down_to_about_sixteen():
    assert smaller_sizes(512) == (16, 32, 64, 128, 256)
    assert smaller_sizes(197) == (21,)  # 16 plus the remainder mod 16; odd: no halves
    assert smaller_sizes(100) == (20, 25, 50)
    assert smaller_sizes(16) == () and smaller_sizes(3) == ()


def test_the_search_keeps_what_the_model_takes_and_shrinks_shared_dims_together():
    specs = (InputSpec((8, 512, 256)), InputSpec((8, 512), torch.bool))

    def takes(candidate):  # hidden fixed at 256; the two sequence dims must agree
        x, mask = candidate
        return x.shape[2] == 256 and x.shape[1] == mask.shape[1]

    steps = shrink_steps(specs)
    assert [positions for positions, _ in steps] == [((0, 0), (1, 0)), ((0, 1), (1, 1)), ((0, 2),)]
    assert search(specs, takes) == (InputSpec((1, 16, 256)), InputSpec((1, 16), torch.bool))
    # A size the model refuses in between is skipped: the first one it takes is kept.
    assert search(specs, lambda c: takes(c) and c[0].shape[1] % 64 == 0) == (
        InputSpec((1, 64, 256)),
        InputSpec((1, 64), torch.bool),
    )
    assert resized(specs, ((1, 1),), 32)[1] == InputSpec((8, 32), torch.bool)


@pytest.mark.cpu  # with CUDA the model check runs at the analysed shape
@pytest.mark.parametrize(
    "model, capture, analysed, used",
    [
        (FreeLength(), "fx", (4, 64, 32), (1, 16, 32)),  # batch and sequence cut; hidden kept
        # torch.export reads the TF32 flags the numerics set: it must capture outside them
        (FreeLength(), "export", (4, 64, 32), (1, 16, 32)),
        (FixedLength(), "fx", (4, 48, 32), (1, 48, 32)),  # only the batch: the table fixes 48
    ],
)
def test_model_numerics_runs_at_the_smallest_shape_the_model_takes(model, capture, analysed, used):
    torch.manual_seed(0)
    analysis = analyze(model.eval(), InputSpec(analysed), capture=capture)
    assert analysis.graph.frontend == capture
    report = validate(analysis)
    assert all(r.usable for r in report.results), [r.status for r in report.results]
    assert report.model.passed, report.model.detail
    assert report.model.inputs == (used,) and report.model.analysed_inputs == (analysed,)
    assert report.model.shrunk


def test_a_length_that_changes_the_graph_is_not_used():
    analysis = analyze(LengthBranch(), InputSpec((4, 128, 8)))
    assert graph_difference(analysis, analyze(LengthBranch(), InputSpec((1, 16, 8)))).startswith(
        "its ops differ from `add` (line"
    )
    assert graph_difference(analysis, analyze(LengthBranch(), InputSpec((1, 32, 8)))) == ""
    # The model runs at 16 tokens, but only 32 or more give the analysed graph.
    found, pairs = smallest_matching(analysis)
    assert found.inputs == (InputSpec((1, 32, 8)),)
    assert set(pairs) == {c.index for c in analysis.clusters}


def test_a_dim_collapsed_to_one_is_another_graph():
    analysis = analyze(FreeLength(), InputSpec((4, 64, 32)))
    # The batch may go to 1 (its size was 4); a sequence of 1 makes 64-wide rows 1 wide.
    assert graph_difference(analysis, analyze(FreeLength(), InputSpec((1, 16, 32)))) == ""
    assert "down to 1" in graph_difference(analysis, analyze(FreeLength(), InputSpec((1, 1, 32))))


MODEL_FILE = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Scores(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(32, 32)

        def forward(self, x):
            h = self.proj(x)
            s = h @ h.transpose(1, 2)
            e = torch.exp(s - s.amax(dim=-1, keepdim=True))
            return e / e.sum(dim=-1, keepdim=True)
    """)


@pytest.mark.cpu
def test_the_reports_name_the_input_size_model_numerics_used(tmp_path):
    path = tmp_path / "scores.py"
    path.write_text(MODEL_FILE)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli, ["--model", str(path), "--input-shape", "4,64,32", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("model numerics"))
    assert line.startswith("model numerics: pass (")
    # Which dims were cut and why (was "at input 1×16×32 of 4×64×32").
    assert ("patched into the traced graph at input 1×16×32, cut from 4×64×32 in dim 0 (4→1) "
            "and dim 1 (64→16) so Triton's interpreter runs it faster, max abs err") in line
    model = json.loads(out.read_text())["validation"]["model"]
    assert model["inputs"] == [[1, 16, 32]] and model["analysed_inputs"] == [[4, 64, 32]]


def test_the_careful_search_spends_a_bounded_number_of_captures(monkeypatch):
    from fusion_core.validate import model_shape

    # 1 + 5 + 5 + 5 sizes to try (batch; both 512s together, then each alone): over budget
    analysis = analyze(FreeLength(hidden=512), InputSpec((4, 512, 512)))
    captures = []
    monkeypatch.setattr(model_shape, "model_runs", lambda module, specs, seed: True)
    monkeypatch.setattr(
        model_shape, "matched", lambda analysis, specs, keep_rows: captures.append(specs)
    )
    found, _ = smallest_matching(analysis)
    assert found is analysis  # nothing matched: the analysed shape
    assert len(captures) == 1 + model_shape.MAX_CAPTURES  # the quick result, then the budget


def test_the_model_line_names_each_cut_dim_of_several_inputs():
    from fusion_core.validate.report import _model_line
    from fusion_core.validate.types import ModelCheck, ValidationReport

    check = ModelCheck(True, 1e-7, (0,), inputs=((1, 21), (1, 16)),
                       analysed_inputs=((5, 37), (5, 16)))
    report = ValidationReport(results=(), model=check, mode="interpreter", device="cpu")
    line = _model_line(report)
    assert ("at input 1×21, 1×16, cut from 5×37, 5×16 in input 0 dim 0 (5→1), input 0 dim 1 "
            "(37→21) and input 1 dim 0 (5→1) so Triton's interpreter runs it faster") in line
    assert " of 5×37" not in line
