"""A model whose ops span several files: every line a quoted reason names says its file.

The plugin quotes fusion_core's reasons in runs over many files, beside its own
`at blocks.py:49`; a bare "(line 5)" there could be any of them. fusion_core names the file
of each line once a model's ops span several (`exp` (helpers.py:5)), and keeps the bare
line for a model written in one file (the CLI's spelling, tests/test_spelling.py).
"""

from __future__ import annotations

import textwrap

import pytest
from fusion_plugin_helpers import model_source, run

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file

pytestmark = pytest.mark.usefixtures("torch_warm")  # tests/conftest.py

HELPERS = textwrap.dedent("""\
    import torch


    def act(t):
        return torch.exp(t)
""")
# The base model, its result passed through helpers.py's `act` (line 5) and a roll.
ROLLED = model_source("base").replace(
    "as F\n", "as F\nfrom helpers import act\n", 1
).replace("        return y + self.b\n",
          "        y = act(y + self.b)\n        return torch.sigmoid(y) * torch.roll(y, 1, -1)\n")
CONVEXITY = ("path `exp` (helpers.py:5) → `torch.roll` (model.py:14) → `mul` (model.py:14) "
             "leaves the group and re-enters")


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_reason_names_the_file_of_each_line_when_the_model_spans_files(tmp_path, capture):
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "model.py").write_text(ROLLED)
    a = analyze_file(tmp_path / "model.py", [InputSpec((4, 8))], "Net", capture=capture)
    # was "path `exp` (line 5) → `torch.roll` (line 15) → …": line 5 of helpers.py
    assert [r.reason for r in a.rejections] == [CONVEXITY]


def test_the_plugin_quotes_a_new_rejection_with_the_file_of_each_line(proj):
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    proj.makepyfile(helpers=HELPERS, model=ROLLED)
    out = run(proj).stdout.str()
    # was "at model.py:11-14: …, path `exp` (line 5) → …", as if on model.py's line 5
    assert (f"new rejection at model.py:11-14: convexity on `mul → relu → add → … (6 ops)`, "
            f"{CONVEXITY}\n") in out


def test_a_rejection_about_a_barrier_in_another_file_names_it_where_it_is():
    from pytest_fusion.explain import Explainer
    from pytest_fusion.snapshot import BarrierRec, RejectionRec, Snapshot

    add_ = BarrierRec("add_", "add_", ".add_()", True, "blocks.py:9", (("sigmoid", "sigmoid"),),
                      (("mul", "mul"),))
    r = RejectionRec("aliasing", ("sigmoid", "mul"), "model.py:7-8", ("sigmoid", "mul"),
                     ("add_",), "`.add_()` (blocks.py:9) mutates its input in place; …")
    cur = Snapshot("t.py::t", "Net", ("4×8 float32",), (), (r,), barriers=(add_,))
    # the plugin's own spelling of a barrier, as for one in a model written in one file
    assert Explainer(cur).why({"sigmoid", "mul"}) == (
        ": aliasing, `.add_()` at blocks.py:9 mutates its input in place")


def test_the_compiled_record_names_ops_the_same_way(tmp_path):
    # Its reasons (`the matrix product … sits between them`) reach the plugin's gate too.
    from fusion_core.inductor import explain, separation

    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "model.py").write_text(ROLLED)
    g = analyze_file(tmp_path / "model.py", [InputSpec((4, 8))], "Net").graph
    (roll,) = [n for n in g.nodes if n.target == "torch.roll"]
    assert separation._where(g, roll) == explain._where(g, roll) == "`torch.roll` (model.py:14)"
