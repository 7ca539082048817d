"""One CLI run parses the user's model file once (source_trees.py): the loader, the class
lookup, the analysis, the source map and the --apply preview share that tree."""

from __future__ import annotations

import ast
import builtins
import textwrap

from click.testing import CliRunner

from fusion_core.cli import cli

MODEL = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Helper(nn.Module):
        def forward(self, x):
            return x


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.helper = Helper()

        def forward(self, x):
            y = torch.relu(x) * 2.0 + 1.0
            return self.helper(y)
    ''')


def test_a_cli_run_parses_the_model_file_once(tmp_path, monkeypatch):
    model = tmp_path / "net.py"
    model.write_text(MODEL)
    parses: list[str] = []
    real_parse, real_compile = ast.parse, builtins.compile

    def counting_parse(source, *args, **kwargs):
        text = source.decode() if isinstance(source, bytes) else source
        if text == MODEL:
            parses.append("ast.parse")
        return real_parse(source, *args, **kwargs)

    def counting_compile(source, filename, mode, flags=0, *args, **kwargs):
        # ast.parse compiles with PyCF_ONLY_AST (counted above); a tree is no parse.
        if isinstance(source, (str, bytes)) and not flags & ast.PyCF_ONLY_AST and (
                source.decode() if isinstance(source, bytes) else source) == MODEL:
            parses.append("compile")
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting_parse)
    monkeypatch.setattr(builtins, "compile", counting_compile)
    result = CliRunner().invoke(cli, ["--model", f"{model}:Net", "--input-shape", "4,8",
                                      "--out-dir", str(tmp_path / "out"), "--no-timing"])
    assert result.exit_code == 0, result.output
    assert "import cluster0" in result.output  # the source edits preview ran too
    assert parses == ["ast.parse"]
