"""Issue 15 points 4-6 through pytester: identities that survive moved lines (keeping GPU
timings), one grouped message per change in a repeated block, and the op that now
separates a lost cluster's ops (an unknown call, an in-place write)."""

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from fusion_plugin_helpers import (
    HEAD,
    MEASURE_CONFTEST,
    PLUGIN_ARGS,
    TIMED_INI,
    baseline_notes,
    baselines,
    write_timings,
)

ROOT = Path(__file__).resolve().parents[1]
H200 = "NVIDIA H200 sm_90"
OTHER_GPU = {"name": "Test GPU 9000", "capability": [7, 5]}
OTHER_GPU_KEY = "Test GPU 9000 sm_75"
CHECKS = "checks=('clusters', 'rejections', 'traffic')"  # no timing noise on a CUDA machine


pytestmark = pytest.mark.usefixtures("torch_warm")  # tests/conftest.py


@pytest.fixture
def proj(pytester, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # model.py is rewritten between runs
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    for name in ("model", "microgpt", "test_examples_fusion"):  # import this project's copies
        monkeypatch.delitem(sys.modules, name, raising=False)
    pytester.makeini(TIMED_INI)
    return pytester


def run(p, *args):
    return p.runpytest("-p", "no:cacheprovider", "-p", "no:hypothesispytest", *PLUGIN_ARGS,
                       *args)


def edit(p: pytest.Pytester, source: str) -> None:
    p.makepyfile(model=source)
    sys.modules.pop("model", None)


# Two clusters: `mul → relu → add` on line 10 and `sigmoid → mul` on line 11.
TWO = HEAD + ("        y = F.relu(x * 2.0) + self.b\n"
              "        return torch.sigmoid(self.lin(y)) * 3.0\n")

TEST_TWO = f"""\
import pytest
import model

@pytest.mark.fusion_check(model.Net, (4, 8), {CHECKS})
def test_net():
    pass
"""


def test_a_comment_above_the_model_changes_nothing_and_keeps_gpu_timings(proj):
    proj.makeconftest(MEASURE_CONFTEST)
    # Timings of a GPU that is not this machine's (on an H200 the local key would be the
    # same as the fake one, and this machine's own entries follow other rules).
    write_timings(proj.path, [40.0, 40.3, 39.8, 40.1, 40.6], device=OTHER_GPU)
    proj.makepyfile(test_net=TEST_TWO.replace(f", {CHECKS}", ""))
    edit(proj, TWO.format(bias="8"))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    before = path.read_bytes()
    timings = yaml.safe_load(before)["measured"][OTHER_GPU_KEY]["clusters"]
    assert [t["in"] for t in timings] == ["", ""] and len(timings) == 2
    (proj.path / "timings.json").unlink()  # from now on a machine without a GPU
    edit(proj, "# a comment line above the model\n" + TWO.format(bias="8"))
    r = run(proj)
    r.assert_outcomes(passed=1)
    assert baseline_notes(r.stdout.str()) == []  # no "changed", no "moved"
    r = run(proj, "--fusion-update-baselines=all")
    r.assert_outcomes(passed=1)
    # Updating brings the lines up to date and changes nothing else.
    old, new = yaml.safe_load(before), yaml.safe_load(path.read_text())
    assert [c["lines"] for c in new["clusters"]] == ["model.py:11", "model.py:12"]
    for data in (old, new):
        data.pop("provenance")
        for c in data["clusters"]:
            c.pop("lines")
    assert new == old
    # A real change to one cluster, accepted on this machine: the file is rewritten with
    # the new lines, and both clusters keep their H200 timings.
    edit(proj, "# a comment line above the model\n" + TWO.format(bias="4, 8"))
    r = run(proj, "--fusion-update-baselines=all")
    r.stdout.fnmatch_lines(["updated fusion_baselines/*.yaml (test_net.py::test_net)"])
    data = yaml.safe_load(path.read_text())
    assert data["clusters"][0]["lines"] == "model.py:11"
    assert data["measured"][OTHER_GPU_KEY]["clusters"] == timings


def test_schema_1_baseline_loads_passes_and_is_rewritten_as_2_with_its_timings(proj):
    """The microgpt baseline as schema 1 wrote it (seven H200 entries) after a comment line
    above the model, on a machine without a GPU."""
    examples = proj.mkdir("examples")
    src = (ROOT / "examples" / "microgpt.py").read_text()
    (examples / "microgpt.py").write_text("# a comment line above the model\n" + src)
    (examples / "test_examples_fusion.py").write_text(
        "import pytest\nfrom microgpt import MicroGPT\n\n\n"
        f"@pytest.mark.fusion_check(MicroGPT, (2, 16), dtype='int64', {CHECKS})\n"
        "def test_microgpt_fuses_attention_softmax_and_norms():\n    pass\n")
    (committed,) = (ROOT / "tests" / "data").glob("*microgpt*.yaml")  # schema 1, as written
    folder = proj.mkdir("fusion_baselines")
    shutil.copy(committed, folder)
    path = folder / committed.name
    old = yaml.safe_load(path.read_text())
    assert old["schema_version"] == 1 and len(old["measured"][H200]["clusters"]) == 7
    r = run(proj)
    r.assert_outcomes(passed=1)
    assert baseline_notes(r.stdout.str()) == []
    assert yaml.safe_load(path.read_text()) == old  # checking writes nothing
    run(proj, "--fusion-update-baselines=all").assert_outcomes(passed=1)
    new = yaml.safe_load(path.read_text())
    assert new["schema_version"] == 4
    samples = [t["kernel_us"] for t in new["measured"][H200]["clusters"]]
    assert samples == [t["kernel_us"] for t in old["measured"][H200]["clusters"]]
    assert all("in" in t and "lines" not in t for t in new["measured"][H200]["clusters"])
    assert {c["in"] for c in new["clusters"]} >= {"blocks.{0,1}.attn", "blocks.{0,1}"}
    written = path.read_bytes()
    r = run(proj, "--fusion-update-baselines=all")
    r.assert_outcomes(passed=1)
    assert path.read_bytes() == written


LAYERS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.out = nn.Linear(8, 8)
    def forward(self, x):
        h = self.fc(x)
        g = F.silu(h)
        return self.out({use} * h)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = nn.ModuleList(Block() for _ in range(4))
    def forward(self, x):
        for block in self.h:
            x = block(x)
        return x
"""


def test_one_edit_in_a_repeated_block_is_one_message_naming_the_layers(proj):
    proj.makepyfile(test_net=TEST_TWO)
    edit(proj, LAYERS.format(use="g"))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    (entry,) = yaml.safe_load(path.read_text())["clusters"]
    assert entry["ops"] == ["silu", "mul"] and entry["in"] == "h.{0..3}"
    assert len(entry["nodes"]) == 4
    edit(proj, LAYERS.format(use="torch.roll(g, 1, -1)"))
    r = run(proj, "--fusion-report=rep")
    r.assert_outcomes(failed=1)
    bullet = ("`silu → mul` in h.0…h.3 (×4) at model.py:11-12 no longer fuses: `torch.roll` at "
              "model.py:12 now sits between `silu` (line 11) and `mul` (line 12): "
              "fusion-advisor cannot fuse through it (its op registry has no Triton lowering "
              "for this call)")
    # The failure section only: under CI=true pytest repeats whole messages in its summary.
    lines = r.stdout.lines
    end = next((i for i, line in enumerate(lines) if "short test summary info" in line),
               len(lines))
    bullets = [line for line in lines[:end] if line.startswith("  - ")]
    assert bullets == [f"  - {bullet}"]
    assert f"- {bullet}" in (proj.path / "rep.md").read_text()


HAZARD = """\
import torch
import torch.nn as nn
class Net(nn.Module):
    def forward(self, x):
        y = x * 2.0
        z = y + 1.0
{body}
"""


def test_an_in_place_write_that_later_reads_see_is_named(proj):
    """`y.relu_()` overwrites a value `z * y` reads afterwards: a real hazard, so the cluster
    that held `relu` is lost whatever the analyzer does with harmless in-place ops."""
    proj.makepyfile(test_net=TEST_TWO)
    edit(proj, HAZARD.format(body="        return z * y.relu()"))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    edit(proj, HAZARD.format(body="        y.relu_()\n        return z * y"))
    r = run(proj)
    r.assert_outcomes(failed=1)
    # The lost cluster first; the mutation check's new rejection may follow it.
    bullet = next(line for line in r.stdout.lines if line.startswith("  - "))
    # The lines where the ops are now (the edit moved the last `mul` down one line).
    assert bullet.startswith("  - `mul → add → relu → mul` at model.py:5-8 ")
    assert "`.relu_()`" in bullet  # named, whichever check now rejects the group


# `mul → view → relu → reshape → add` on lines 10-13; the edits change the view on line 11.
VIEWED = HEAD + ("        y = x * 2.0\n"
                 "        y = {view}\n"
                 "        y = F.relu(y)\n"
                 "        return y.reshape(4, 8) + self.b\n")


# A permute, or a chunk of a transpose, before the reshape fuses too (the kernel reads the
# merged dims through div/mod, ``ir/view_factors.py``); an `as_strided` is no view the code
# generator can index.
@pytest.mark.parametrize(("view", "became"), [
    ("y.as_strided((4, 8), (1, 4))", "`.as_strided()` at model.py:11) shrank to `relu → "
                                     "reshape → add`, without `mul`: lowering, the code "
                                     "generator cannot lower it: `as_strided` (line 11) is a "
                                     "view the code generator cannot express as an index map"),
])
def test_a_view_the_user_changed_is_named_at_its_line(proj, view, became):
    """A view has no site of its own: it is found again between the ops around it, so the
    regression names what it became and its line is among the cluster's."""
    proj.makepyfile(test_net=TEST_TWO)
    edit(proj, VIEWED.format(bias="8", view="y.view(4, 2, 4)"))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    (path,) = baselines(proj.path).values()
    (entry,) = yaml.safe_load(path.read_text())["clusters"]
    assert entry["ops"] == ["mul", "view", "relu", "reshape", "add"]
    edit(proj, VIEWED.format(bias="8", view=view))
    r = run(proj)
    r.assert_outcomes(failed=1)
    bullet = next(line for line in r.stdout.lines if line.startswith("  - "))
    assert bullet.startswith("  - `mul → view → relu → reshape → add` at model.py:10-13 (its "
                             f"`view` is now {became}"), bullet


def test_a_piece_of_a_value_read_whole_through_it_keeps_the_fusion(proj):
    # Was lost ("`y.chunk(1, dim=0)[0]` (line 11) selects part of a value computed in the
    # group"): `mul` took its index map from `x` before the piece's readers gave theirs. A
    # computed value now takes its readers' map first (codegen/indexing.py).
    proj.makepyfile(test_net=TEST_TWO)
    edit(proj, VIEWED.format(bias="8", view="y.view(4, 2, 4)"))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    edit(proj, VIEWED.format(bias="8", view="y.chunk(1, dim=0)[0]"))
    run(proj).assert_outcomes(passed=1)
