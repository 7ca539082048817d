"""`--apply` refuses a file only for the import block an earlier `--apply` wrote there: a
comment or docstring that merely mentions `fusion-advisor --apply` is applied as any file,
and the Source edits preview says the same as `--apply` in both cases.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_apply import ONE_CLUSTER
from test_apply_preview import checked, run_cli

from fusion_core.sourcemap.apply import forget_package
from fusion_core.sourcemap.fused import import_block
from fusion_core.sourcemap.insert import refusal

REFUSED = ("tiny.py already calls kernels from an earlier --apply: restore its backup (.bak) "
           "before applying again")

MENTIONS = {
    "comment": ONE_CLUSTER.replace("import torch\n", "import torch  # run fusion-advisor "
                                   "--apply to speed this up\n", 1),
    "docstring": ONE_CLUSTER.replace("class Tiny(nn.Module):\n", 'class Tiny(nn.Module):\n'
                                     '    """Try `fusion-advisor --apply` on this."""\n\n', 1),
    # The very line --apply writes, quoted in a docstring: text, not an import.
    "quoted block": '"""Once applied, the file reads:\n\n' + import_block("tiny", ["cluster0"])
                    + '"""\n\n' + ONE_CLUSTER,
}


@pytest.mark.parametrize("text", MENTIONS.values(), ids=MENTIONS.keys())
def test_refusal_ignores_a_mention_of_apply(text):
    assert refusal(text) is None


@pytest.mark.parametrize("newline, head", [("\n", ""), ("\r\n", ""), ("\n", "\f\n")],
                         ids=["LF", "CRLF", "form feed"])
def test_refusal_names_the_block_an_earlier_apply_wrote(newline, head):
    # A form feed ends a line for str.splitlines, not for Python: the block's line is found.
    lines = ONE_CLUSTER.splitlines(keepends=True)
    text = "".join([head, *lines[:2], import_block("tiny", ["cluster0"]), *lines[2:]])
    assert refusal(text.replace("\n", newline)) == REFUSED.removeprefix("tiny.py ")


@pytest.mark.parametrize("kind", ["comment", "docstring"])
def test_a_file_mentioning_apply_is_applied_and_previewed(tmp_path, kind):
    path = tmp_path / "tiny.py"
    path.write_text(MENTIONS[kind])
    result = run_cli(str(path), "4,8", tmp_path / "r.json", "--apply", "--yes")
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit to " in result.output, result.output
    assert "y = cluster0(x)" in path.read_text()
    assert path.with_name("tiny.py.bak").read_text() == MENTIONS[kind]
    # The preview promised these imports, not a refusal.
    assert "--apply would write nothing" not in result.output
    assert "imports --apply adds" in result.output
    doc = checked(tmp_path / "r.json")
    assert doc["refused"] is None and "    from .tiny_fused import cluster0" in doc["imports"]


def applied_then_edited(tmp_path: Path) -> Path:
    """tiny.py rewritten by --apply, then given a new cluster by its user."""
    path = tmp_path / "tiny.py"
    path.write_text(ONE_CLUSTER)
    forget_package("tiny_fused")  # another test's package of that name
    first = run_cli(str(path), "4,8", tmp_path / "first.json", "--apply", "--yes")
    assert first.exit_code == 0 and "Applied 1 edit" in first.output, first.output
    text = path.read_text()
    path.write_text(text.replace("return self.proj(y)", "return torch.sigmoid(self.proj(y)) * 3"))
    forget_package("tiny_fused")
    return path


def test_a_file_an_earlier_apply_rewrote_is_still_refused(tmp_path):
    path = applied_then_edited(tmp_path)
    before = path.read_text()
    result = run_cli(str(path), "4,8", tmp_path / "r.json", "--apply", "--yes")
    output = result.output.replace(str(tmp_path) + "/", "")
    assert result.exit_code == 2, result.output
    assert output.strip().splitlines()[-1] == f"error: {REFUSED}"
    assert f"--apply would write nothing: {REFUSED}" in " ".join(output.split())
    assert "imports --apply adds" not in output
    doc = checked(tmp_path / "r.json")
    assert doc["refused"] == REFUSED.removeprefix("tiny.py ") and doc["imports"] == []
    assert path.read_text() == before and not path.with_name("tiny.py.bak1").exists()
