"""`--apply` on the common module-call patterns: each rewrite imports, matches the
original model's output and changes nothing but the fused statement and the import block.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py). The
convolutions next to a cluster take no bias: for a GPU target the analysis splits a conv's
bias off into the kernel after it (ir/conv_bias.py), and the edit calls the layer without
its bias (tests/test_apply_split_bias.py); these cases are about the statement patterns,
which must map the same for either target.
"""

from __future__ import annotations

import difflib
import textwrap

import pytest
import torch
from apply_checks import bn_args, same_outputs
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.fused import import_block

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# (class body, the statement the cluster covers, what replaces it)
CASES = {
    "bn_act_around_a_kept_conv": (
        """\
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
                self.bn = nn.BatchNorm2d(4)
                self.act = nn.ReLU(inplace=True)

            def forward(self, x):
                y = self.act(self.bn(self.conv(x)))
                return self.conv(y)
        """,
        "        y = self.act(self.bn(self.conv(x)))",
        # BatchNorm on its running statistics: the kernel runs in eval mode only, the line as
        # written otherwise (sourcemap/train_mode.py).
        "        if not self.bn.training:\n"
        f"            y = cluster0(self.conv(x), {bn_args('self.bn')})\n"
        "        else:\n"
        "            y = self.act(self.bn(self.conv(x)))",
    ),
    "functional_calls_around_a_kept_conv": (
        """\
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
                self.ln = nn.LayerNorm(8)

            def forward(self, x):
                y = F.gelu(F.layer_norm(self.conv(x), (8,), self.ln.weight, self.ln.bias)) * 2.0
                return self.conv(y)
        """,
        "        y = F.gelu(F.layer_norm(self.conv(x), (8,), self.ln.weight, self.ln.bias)) * 2.0",
        "        y = cluster0(self.conv(x), self.ln.weight, self.ln.bias)",
    ),
    "inplace_method_on_a_temporary": (
        """\
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)

            def forward(self, x):
                y = (self.conv(x) * 2.0).relu_()
                return self.conv(y)
        """,
        "        y = (self.conv(x) * 2.0).relu_()",
        "        y = cluster0(self.conv(x))",
    ),
    "unfused_call_around_the_cluster": (
        """\
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 1, bias=False)
                self.ln = nn.LayerNorm(8)

            def forward(self, x):
                y = self.conv(self.ln(x) * 2.0 + 1.0) - x
                return self.conv(y)
        """,
        "        y = self.conv(self.ln(x) * 2.0 + 1.0) - x",
        "        y = self.conv(cluster0(x, self.ln.weight, self.ln.bias)) - x",
    ),
    "kept_matmul_in_the_first_line_of_three": (
        """\
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 1)

            def forward(self, x):
                q = self.conv(x)
                att = (q @ q.transpose(-2, -1)) * 0.5
                att = att.masked_fill(att > 1.0, 0.0)
                att = F.softmax(att, dim=-1)
                return self.conv(att)
        """,
        "        att = (q @ q.transpose(-2, -1)) * 0.5\n"
        "        att = att.masked_fill(att > 1.0, 0.0)\n"
        "        att = F.softmax(att, dim=-1)",
        "        att = cluster0(q @ q.transpose(-2, -1))",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_apply_rewrites_only_the_fused_statement(tmp_path, case):
    body, statement, replacement = CASES[case]
    path = tmp_path / f"{case}.py"
    original = HEADER + textwrap.dedent(body)
    assert statement in original  # the case's own spelling, not the tool's
    path.write_text(original)
    result = CliRunner().invoke(
        cli,
        [
            "--model",
            str(path),
            "--model-class",
            "M",
            "--input-shape",
            "2,4,8,8",
            "--no-timing",
            "--apply",
            "--yes",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output, result.output
    rewritten = path.read_text()
    # Every difference is the fused statement or the import block of the fused package.
    diff = [
        d for d in difflib.ndiff(original.splitlines(), rewritten.splitlines()) if d[:1] in "+-"
    ]
    removed = [d[2:] for d in diff if d.startswith("-")]
    added = [d[2:] for d in diff if d.startswith("+")]
    assert removed == statement.splitlines()
    # The replacement's lines, in order and together (a guarded edit spans several lines).
    lines = replacement.splitlines()
    starts = [i for i in range(len(added)) if added[i:i + len(lines)] == lines]
    assert len(starts) == 1, added
    others = added[:starts[0]] + added[starts[0] + len(lines):]
    assert [a for a in others if a.strip()] == [
        line for line in import_block(path.stem, ["cluster0"], "\n").splitlines() if line.strip()
    ]
    # The rewritten model computes what the original did (its weights, a fresh input).
    same_outputs(tmp_path, path, original, "M", (2, 4, 8, 8), DEVICE, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_each_case_maps_to_its_edit_for_either_target(tmp_path, case, target):
    # The CLI analyses for the GPU it validates on; a CUDA target needs no GPU to analyse
    # (only the lowerings that differ by device change), so CPU runs check what the GPU's
    # --apply would propose.
    body, statement, replacement = CASES[case]
    path = tmp_path / f"{case}.py"
    path.write_text(HEADER + textwrap.dedent(body))
    analysis = analyze_file(path, [InputSpec((2, 4, 8, 8))], class_name="M", device=target)
    (m,) = map_clusters(analysis)
    assert m.exact, m.reason
    assert m.replacement == replacement
    assert m.original.rstrip("\n") == statement
