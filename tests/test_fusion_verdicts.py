"""What a failing (or passing) fusion test says after an ordinary edit, through pytester.

Each test records baselines for ``verdict_project`` (a conv/squeeze-excite block and two
transformer blocks), makes one edit a developer makes, and reads the verdict: the lines
the ops are on now, the named cause, improvements said as improvements, an equivalent
spelling said as a change.
"""

import sys

import pytest
import yaml
from fusion_plugin_helpers import PLUGIN_ARGS, baseline_notes, baselines
from verdict_project import edited, project

pytestmark = pytest.mark.usefixtures("torch_warm")  # tests/conftest.py

ROLL_BEFORE_SOFTMAX = ("        att = F.softmax(att, dim=-1)\n",
                       "        att = torch.roll(att, 1, -1)\n"
                       "        att = F.softmax(att, dim=-1)\n")
THREE_COMMENTS = ("import torch\n", "# one\n# two\n# three\nimport torch\n")
SDPA = ("""\
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
""", """\
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, d)
""")
ROLL_IN_SE = ("        return x * s\n", "        s = torch.roll(s, 1, 1)\n        return x * s\n")


@pytest.fixture
def proj(pytester, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # blocks.py is rewritten between runs
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    project(pytester)
    return pytester


def run(p, *args):
    for name in ("blocks", "test_blocks", "embed", "test_embed"):  # this edit's copies
        sys.modules.pop(name, None)
    return p.runpytest("-p", "no:cacheprovider", "-p", "no:hypothesispytest", *PLUGIN_ARGS,
                       *args)


# The baseline files of each project recorded so far, by the project's files: most tests
# record the same project before their edit, and a second recording writes the same files.
_RECORDED: dict[tuple, dict[str, str]] = {}


def record(p, *edits: tuple[str, str]) -> None:
    edited(p, *edits)
    key = tuple(sorted((f.name, f.read_text()) for f in p.path.iterdir() if f.is_file()))
    folder = p.path / "fusion_baselines"
    if key not in _RECORDED:
        run(p, "--fusion-update-baselines=new").assert_outcomes(passed=3)
        _RECORDED[key] = {f.name: f.read_text() for f in folder.iterdir()}
        return
    folder.mkdir()
    for name, text in _RECORDED[key].items():
        (folder / name).write_text(text)


def bullets(r) -> list[str]:
    """The failure messages' bullets, each once: with CI set, pytest repeats whole messages
    in its short summary, which this stops before."""
    lines = r.stdout.lines
    end = next((i for i, line in enumerate(lines) if "short test summary info" in line),
               len(lines))
    return [line[4:] for line in lines[:end] if line.startswith("  - ")]


def test_a_failure_quotes_the_lines_where_the_ops_are_now_and_the_op_between(proj):
    record(proj)
    edited(proj, THREE_COMMENTS, ROLL_BEFORE_SOFTMAX)
    r = run(proj)
    r.assert_outcomes(passed=1, failed=2)
    # mul and the mask on 47-48 (3 lines down), softmax on 50 below the roll on 49.
    assert bullets(r) == 2 * [
        "`mul → eq → masked_fill → softmax` in blocks.0.attn…blocks.1.attn (×2) at "
        "blocks.py:47-48, 50 shrank to `mul → eq → masked_fill`, without `softmax`: "
        "`torch.roll` at blocks.py:49 now sits between `masked_fill` (line 48) and `softmax` "
        "(line 50): fusion-advisor cannot fuse through it (its op registry has no Triton "
        "lowering for this call)"]
    assert "blocks.py:44" not in r.stdout.str()  # recorded lines are never quoted as current


def test_updating_refreshes_moved_lines_and_nothing_else(proj):
    record(proj)
    (path,) = [p for p in baselines(proj.path).values() if "test_conv" in p.name]
    before = yaml.safe_load(path.read_text())
    edited(proj, THREE_COMMENTS)
    r = run(proj)
    r.assert_outcomes(passed=3)
    assert baseline_notes(r.stdout.str()) == []  # moved lines are no change
    r = run(proj, "--fusion-update-baselines=new")
    r.stdout.fnmatch_lines(["refreshed lines of fusion_baselines/*test_conv*.yaml "
                            "(test_blocks.py::test_conv)"])
    after = yaml.safe_load(path.read_text())
    assert [c["lines"] for c in after["clusters"]] == ["blocks.py:16, 31", "blocks.py:18-19, 32"]
    for data in (before, after):
        for entry in data["clusters"] + data["rejections"]:
            entry.pop("lines")
    assert after == before  # provenance included: nothing re-baselined


def test_a_custom_op_that_took_an_ops_place_is_named_at_its_line(proj):
    record(proj)
    edited(proj, ("import torch.nn.functional as F\n", """\
import torch.nn.functional as F


@torch.library.custom_op("verdicts::gate", mutates_args=())
def gate(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x)


@gate.register_fake
def _(x):
    return torch.empty_like(x)
"""), ("s = torch.sigmoid(self.expand(s))", "s = gate(self.expand(s))"))
    r = run(proj)
    r.assert_outcomes(passed=2, failed=1)
    (msg,) = bullets(r)
    assert msg.startswith("`sigmoid → mul → add` in block at blocks.py:26, 39: `sigmoid` was "
                          "replaced by `verdicts::gate` at blocks.py:25, which fusion-advisor "
                          "cannot fuse through; ")
    assert msg.endswith("the rest fuses as `mul → add` (blocks.py:26, 39) (the model as a whole "
                        "runs 6 → 7 kernels)")


def test_an_op_inserted_inside_the_squeeze_excite_is_named(proj):
    record(proj)
    edited(proj, ROLL_IN_SE)
    r = run(proj)
    r.assert_outcomes(passed=2, failed=1)
    (msg,) = bullets(r)
    assert msg.startswith("`sigmoid → mul → add` in block at blocks.py:15, 17, 30 shrank to "
                          "`mul → add`, without `sigmoid`: `torch.roll` at blocks.py:16 now sits "
                          "between `sigmoid` (line 15) and `mul` (line 17)")


@pytest.mark.parametrize("setting", ["pass", "fail"])
def test_attention_moved_into_sdpa_is_an_improvement_under_both_settings(proj, setting):
    proj.makeini(f"[pytest]\nfusion_improvements = {setting}\n")
    record(proj)
    edited(proj, SDPA)
    r = run(proj)
    said = ("`mul → eq → masked_fill → softmax` in blocks.0.attn…blocks.1.attn (×2): its ops "
            "left the model (at blocks.py:44-46 when the baseline was recorded); "
            "`F.scaled_dot_product_attention` at blocks.py:44 now computes them (the model as a "
            "whole runs 23 → 17 kernels and moves 83.5 KB → 67.0 KB)")
    out = r.stdout.str()
    assert "regression" not in out and "no longer fuses" not in out
    if setting == "pass":
        r.assert_outcomes(passed=3)
        r.stdout.fnmatch_lines(["test_blocks.py::test_transformer: improved", f"    {said}",
                                "accept with: pytest --fusion-update-baselines=all "
                                "test_blocks.py::test_transformer "
                                "test_blocks.py::test_transformer_fixture"])
    else:
        r.assert_outcomes(passed=1, failed=2)
        r.stdout.fnmatch_lines([
            "fusion improved against fusion_baselines/*test_transformer*.yaml (fusion_"
            "improvements = fail: an improvement fails until the baseline records it):",
            f"  - {said}",
            "Record it with: pytest --fusion-update-baselines=failing "
            "test_blocks.py::test_transformer"])
        run(proj, "--fusion-update-baselines=failing").assert_outcomes(passed=3)
    run(proj, "--fusion-update-baselines=all").assert_outcomes(passed=3)
    assert baseline_notes(run(proj).stdout.str()) == []  # accepted: nothing left to say


def test_the_marker_keyword_overrides_the_improvements_setting(proj):
    record(proj)
    edited(proj, SDPA)
    tests = proj.path / "test_blocks.py"
    tests.write_text(tests.read_text().replace(
        "(blocks.Transformer, (2, 8, 32), checks=CHECKS)",
        "(blocks.Transformer, (2, 8, 32), checks=CHECKS, improvements='fail')"))
    r = run(proj)
    r.assert_outcomes(passed=2, failed=1)
    r.stdout.fnmatch_lines(["*test_blocks.py::test_transformer - Failed: fusion improved*"])
    tests.write_text(tests.read_text().replace("improvements='fail'", "improvements='always'"))
    r = run(proj)
    r.stdout.fnmatch_lines(["fusion_check(improvements=...) must be one of pass, fail, got "
                            "'always'"])


def test_clusters_that_merge_once_a_debug_op_is_removed_are_an_improvement(proj):
    record(proj, ROLL_IN_SE)
    edited(proj, ROLL_IN_SE[::-1])
    r = run(proj)
    r.assert_outcomes(passed=3)
    r.stdout.fnmatch_lines(["test_blocks.py::test_conv: improved",
                            "    `mul → add` in block at blocks.py:16, 29 now fuses into the "
                            "larger `sigmoid → mul → add` at blocks.py:15-16, 29"])


@pytest.mark.parametrize(("old", "new", "was", "now"), [
    ('att = att.masked_fill(self.mask[:t, :t] == 0, float("-inf"))',
     'att = torch.where(self.mask[:t, :t] == 0, float("-inf"), att)',
     "`mul → eq → masked_fill → softmax`", "`mul → eq → where → softmax`"),
    ("s = F.adaptive_avg_pool2d(x, 1)", "s = x.mean((2, 3), keepdim=True)",
     "`batch_norm → relu → adaptive_avg_pool2d`", "`batch_norm → relu → mean`"),
], ids=["mask", "pool"])
def test_an_equivalent_spelling_that_stays_one_kernel_is_a_change(proj, old, new, was, now):
    record(proj)
    edited(proj, (old, new))
    r = run(proj)
    r.assert_outcomes(passed=3)
    r.stdout.fnmatch_lines(["*: changed (not a regression)",
                            f"    {was} in * is still one kernel, now {now} (*spelled another "
                            "way)"])


def test_a_removed_layer_is_said_where_it_was_not_paired_with_another_module(proj):
    record(proj)
    edited(proj, ("h = F.gelu(self.fc(self.ln2(x)))", "h = F.gelu(self.fc(x))"))
    r = run(proj)
    r.assert_outcomes(passed=3)  # the model as a whole moves fewer bytes
    out = r.stdout.str()
    assert "regression" not in out
    r.stdout.fnmatch_lines(["    `add → layer_norm` in blocks.0 at blocks.py:61: `layer_norm` "
                            "(`self.ln2` no longer runs) left the model; *"])


EMBED = """\
import torch.nn as nn
import torch.nn.functional as F


class PatchEmbed(nn.Module):
    def __init__(self, c=8, d=32):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 4, stride=4)
        self.embed = nn.Linear(c, d)

    def forward(self, x):
        y = self.conv(x).permute(0, 2, 3, 1)
        return F.gelu(self.embed(y))
"""


def test_a_split_off_bias_is_named_after_its_layer(pytester):
    """A Linear on a permuted input adds its bias in our graph as a separate `add`; once the
    input is contiguous the layer adds it itself and the add is gone."""
    pytester.makepyfile(embed=EMBED, test_embed="""\
import pytest
import embed

@pytest.mark.fusion_check(embed.PatchEmbed, (2, 3, 16, 16), checks=("clusters", "traffic"))
def test_embed():
    pass
""")
    run(pytester, "--fusion-update-baselines=new").assert_outcomes(passed=1)
    source = pytester.path / "embed.py"
    source.write_text(source.read_text().replace(".permute(0, 2, 3, 1)",
                                                 ".permute(0, 2, 3, 1).contiguous()"))
    r = run(pytester)
    r.assert_outcomes(failed=1)
    assert bullets(r) == [
        "`add → gelu` at embed.py:13: the bias add of `self.embed` (Linear), which the layer "
        "now adds itself, left the model; the rest no longer fuses (the model as a whole runs "
        "3 → 4 kernels and moves 8.1 KB → 10.0 KB)"]


def test_a_renamed_submodule_is_one_move_for_every_block(proj):
    record(proj)
    edited(proj, ("self.attn = Attention(d, heads)", "self.attention = Attention(d, heads)"),
           ("self.attn(self.ln1(x))", "self.attention(self.ln1(x))"))
    r = run(proj)
    r.assert_outcomes(passed=3)
    r.stdout.fnmatch_lines(["test_blocks.py::test_transformer: changed (not a regression)",
                            "    `mul → eq → masked_fill → softmax` in blocks.0…blocks.1 (×2) "
                            "moved from attn.forward to attention.forward",
                            "test_blocks.py::test_transformer_fixture: *"])


GATED = """\
import torch
import torch.nn as nn


class Gated(nn.Module):
    def forward(self, x):
        d = torch.roll(x, 1, -1)
        h = (d * 2.0).cumsum(-1)
        return h * torch.sigmoid(x) * d
"""


def gated_run(p: pytest.Pytester, old: str, new: str):
    """Record `GATED`'s baseline, replace `old` by `new` in it, and run the check again."""
    p.makepyfile(gated=GATED, test_gated="""\
import pytest
import gated


@pytest.mark.fusion_check(gated.Gated, (4, 32), checks=("clusters",))
def test_gated():
    pass
""")
    sys.modules.pop("gated", None)
    p.runpytest("-p", "no:cacheprovider", *PLUGIN_ARGS,
                "--fusion-update-baselines=new").assert_outcomes(passed=1)
    (p.path / "gated.py").write_text(GATED.replace(old, new))
    sys.modules.pop("gated", None)
    return p.runpytest("-p", "no:cacheprovider", *PLUGIN_ARGS)


def test_an_unknown_call_that_was_there_before_is_not_named_as_the_replacement(pytester):
    # `torch.roll` fed the cluster when it was recorded; only `torch.special.expit` is new.
    r = gated_run(pytester, "torch.sigmoid", "torch.special.expit")
    r.assert_outcomes(failed=1)
    (msg,) = bullets(r)
    assert "`sigmoid` was replaced by `torch.special.expit` at gated.py:9, which" in msg
    assert "torch.roll" not in msg


def test_an_op_respelled_through_an_unknown_call_is_a_regression(pytester):
    # `* 2.0` is a new op in the kernel, but `sigmoid` went to a call of its own: one kernel
    # more. Was: "changed (not a regression) … (`sigmoid` spelled another way)", passing.
    r = gated_run(pytester, "torch.sigmoid(x)", "(torch.special.expit(x) * 2.0)")
    r.assert_outcomes(failed=1)
    (msg,) = bullets(r)
    assert msg.startswith("`mul → cumsum → sigmoid → mul → mul` at gated.py:8-9: `sigmoid` was "
                          "replaced by `torch.special.expit` at gated.py:9, which "
                          "fusion-advisor cannot fuse through; the rest fuses as "), msg
    assert msg.endswith("(the model as a whole runs 2 → 3 kernels)"), msg
