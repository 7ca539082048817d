"""Which frames locate a cluster (torch's and ours do not) and which files may be edited."""

from __future__ import annotations

import textwrap

from fusion_core.ir.normalize import parse_stack_trace
from fusion_core.ir.trace import is_library_file, is_user_frame, trace_fx
from fusion_core.load import load_model
from fusion_core.pipeline import analyze
from fusion_core.sourcemap.mapping import map_clusters

SITE = "/opt/py/lib/python3.12/site-packages/"
INTERNAL = (SITE + "torch/", "/home/me/fusion-advisor/fusion_core/")


def test_torch_dir_is_matched_with_its_separator():
    assert not is_user_frame(SITE + "torch/nn/functional.py", INTERNAL)
    assert not is_user_frame(SITE + "torch/__init__.py", INTERNAL)
    # The same prefix without the separator: another package.
    assert is_user_frame(SITE + "torchvision/models/resnet.py", INTERNAL)
    assert is_user_frame(SITE + "torch_geometric/nn/conv.py", INTERNAL)
    assert not is_user_frame("/home/me/fusion-advisor/fusion_core/ir/trace.py", INTERNAL)
    assert is_user_frame("/home/me/fusion-advisor/fusion_core_extras/x.py", INTERNAL)
    assert not is_user_frame("<eval_with_key>.3", INTERNAL)


def test_installed_library_files_are_not_the_users():
    roots = (SITE, "/usr/lib/python3.12/")
    assert is_library_file(SITE + "torchvision/models/resnet.py", roots)
    assert is_library_file(SITE + "transformers/masking_utils.py", roots)
    assert is_library_file("/usr/lib/python3.12/functools.py", roots)
    # Another environment's install is still an install.
    assert is_library_file("/srv/venv/lib/python3.11/dist-packages/timm/layers/mlp.py", roots)
    assert not is_library_file("/home/me/project/model.py", roots)
    assert not is_library_file("/home/me/site-packages-notes/model.py", roots)


def test_a_cluster_in_library_code_has_lines_but_no_edit(tmp_path):
    lib = tmp_path / "site-packages" / "visionlib"
    lib.mkdir(parents=True)
    (lib / "blocks.py").write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class Block(nn.Module):
            def forward(self, x):
                y = x * 2.0
                return torch.sigmoid(y)
        """))
    a = analyze(load_model(lib / "blocks.py", "Block"), (4, 8))
    (cluster,) = a.clusters
    assert cluster.lines is not None and cluster.lines.file == str(lib / "blocks.py")
    (mapping,) = map_clusters(a)
    assert not mapping.exact and mapping.replacement is None
    assert "installed library" in mapping.reason


def test_stack_traces_quote_the_lines_of_a_file_edited_since_its_first_read(tmp_path):
    """linecache keeps a file's first read; a model edited in the same process (a notebook,
    pytest's in-process runs) must not be quoted from its old text."""
    path = tmp_path / "net.py"
    head = "import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n"
    path.write_text(head + "    def forward(self, x):\n        return torch.relu(x) * 2.0\n")
    analyze(load_model(path), (4, 8))
    path.write_text(head + "    def forward(self, x):\n        y = x + 1.0\n"
                           "        return torch.relu(y) * 2.0\n")
    gm = trace_fx(load_model(path))
    (add,) = [n for n in gm.graph.nodes if n.name == "add"]
    assert parse_stack_trace(add.stack_trace).code == "y = x + 1.0"


def test_each_node_keeps_its_callers_user_frames_with_both_frontends(tmp_path):
    path = tmp_path / "nested.py"
    path.write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn


        def double(x):
            return x * 2.0


        class Inner(nn.Module):
            def forward(self, x):
                return double(x) + 1.0


        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = nn.Sequential(Inner())

            def forward(self, x):
                return self.inner(x).relu()
        """))
    for capture in ("fx", "export"):
        a = analyze(load_model(path), (4, 8), capture=capture)
        assert a.graph.frontend == capture
        mul = next(n for n in a.graph.nodes if n.op == "mul")
        # Outermost first; torch's Sequential between Outer and Inner is no user frame.
        assert [(s.function, s.code) for s in mul.source.chain] == [
            ("forward", "return self.inner(x).relu()"),
            ("forward", "return double(x) + 1.0"),
            ("double", "return x * 2.0")], capture
        relu = next(n for n in a.graph.nodes if n.op == "relu")
        assert relu.source.caller is None
        # The callers are not part of where a node is: the same line from two call sites.
        assert mul.source == type(mul.source)(mul.source.file, mul.source.line, "double",
                                              "return x * 2.0")
