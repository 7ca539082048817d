"""`--apply` on clusters whose layers run inside an `nn.Sequential` called in the user's file.

The edit spells the call layer by layer (`sourcemap/sequential.py`): layers before the
cluster by index (`self.stem[0](x)`, `self.stem[:2](x)`), the cluster's as the kernel call,
layers after it around the result (`self.stem[4:](...)`). A Sequential subclass with a
forward of its own stays a pointer. Kernels run under the Triton interpreter on CPU at tiny shapes.
"""

from __future__ import annotations

from apply_checks import apply_net, bn_args, conv_apart, same_outputs

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters

# The CNN pattern: conv → bn → act layers in Sequentials, called one per line.
SEQ = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), \
nn.ReLU(inplace=True))
        self.body = nn.Sequential(
            nn.Conv2d(8, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.SiLU(),
        )
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = self.stem(x)
        y = self.body(x) + x
        return self.head(y.mean((2, 3)))
"""  # the backslash joins the stem's line: /tmp/rep/seq.py as reported


def test_both_clusters_inside_sequential_calls_are_written(tmp_path, apply_target):
    path = tmp_path / "seq.py"
    path.write_text(SEQ)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 2 edits" in result.output, result.output
    rewritten = path.read_text()
    # Was a pointer: "`self.stem(...)` at line 17 is not `relu` (line 17)". For the GPU the
    # conv's bias add joins the kernel. The ReLU, read by `self.body` and by the add, ends
    # the kernel on both (on the GPU it was a layer of its own before detect.py gave a
    # fan-out's value back to the piece computing it).
    bn = bn_args("self.stem[1]")
    stem = {"cpu": f"cluster0(self.stem[0](x), {bn})",
            "cuda": f"cluster0({conv_apart('self.stem[0]')}, {bn})"}
    # Each kernel computes its BatchNorm as eval mode does: it runs only while that layer is
    # in eval mode; in train mode the lines run as written.
    assert ("        if not self.stem[1].training:\n"
            f"            x = {stem[apply_target]}\n"
            "        else:\n"
            "            x = self.stem(x)\n") in rewritten, rewritten
    # bn → silu → add and the mean of line 19: line 18's `y` has no other reader, and is
    # computed only in the lines as written.
    body = {"cpu": "self.body[0](x)", "cuda": conv_apart("self.body[0]")}[apply_target]
    assert ("        if not self.body[1].training:\n"
            f"            return self.head(cluster1({body}, {bn_args('self.body[1]')}, x))\n"
            "        else:\n"
            "            y = self.body(x) + x\n"
            "            return self.head(y.mean((2, 3)))\n") in rewritten, rewritten
    assert rewritten.count("y = self.body(x) + x") == 1, rewritten
    same_outputs(tmp_path, path, SEQ)


# Several layers before the cluster and after it; a Sequential inside a Sequential, whose
# last layer is a module of this file.
AROUND = """\
import torch
from torch import nn


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1),
                                  nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 1),
                                  nn.Conv2d(8, 8, 1))
        self.block = nn.Sequential(
            nn.Sequential(nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8), Swish()),
            nn.Conv2d(8, 8, 3, padding=1, bias=False),
        )

    def forward(self, x):
        x = self.stem(x)
        return self.block(x)
"""


def test_layers_around_the_cluster_stay_as_slices_and_nested_sequentials_unroll(
        tmp_path, apply_target):
    path = tmp_path / "around.py"
    path.write_text(AROUND)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 2 edits" in result.output, result.output
    rewritten = path.read_text()
    stem = bn_args("self.stem[2]")
    # For the GPU the kernel adds the bias of the conv before the norm: that layer is
    # called without it, on the layers before it.
    conv = {"cpu": "self.stem[:2](x)",
            "cuda": conv_apart("self.stem[1]", "self.stem[0](x)")}[apply_target]
    assert ("        if not self.stem[2].training:\n"
            f"            x = self.stem[4:](cluster0({conv}, {stem}))\n"
            "        else:\n"
            "            x = self.stem(x)\n") in rewritten, rewritten
    block = bn_args("self.block[0][1]")
    assert ("        if not self.block[0][1].training:\n"
            f"            return self.block[1](cluster1(self.block[0][0](x), {block}))\n"
            "        else:\n"
            "            return self.block(x)\n") in rewritten, rewritten
    same_outputs(tmp_path, path, AROUND)


# torchvision's Conv2dNormActivation: a Sequential subclass of an installed library.
LIBRARY = """\
from torch import nn


class ConvBNAct(nn.Sequential):
    def __init__(self, cin, cout, tail=False):
        layers = [nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, cout, 1)] if tail else [
            nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
        super().__init__(*layers)


class IndexedConvBNAct(ConvBNAct):  # indexing may not give the layers forward runs
    def __getitem__(self, idx):
        return super().__getitem__(idx)
"""

USER = """\
import torch
from torch import nn
from seq_convlib import ConvBNAct, IndexedConvBNAct


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = CLS(3, 8, tail=TAIL)

    def forward(self, x):
        x = self.stem(x)
        return x.sum((2, 3))
"""


def _library_mapping(tmp_path, monkeypatch, tail: bool, cls: str = "ConvBNAct"):
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "seq_convlib.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.delitem(__import__("sys").modules, "seq_convlib", raising=False)
    path = tmp_path / "user.py"
    path.write_text(USER.replace("TAIL", str(tail)).replace("CLS", cls))
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))])
    return path, [m for m in map_clusters(analysis) if "batch_norm" in
                  analysis.clusters[m.cluster_index].ops]


def test_a_library_sequential_without_a_forward_of_its_own_is_spelled_by_index(
        tmp_path, monkeypatch):
    path, (m,) = _library_mapping(tmp_path, monkeypatch, tail=False)
    # Was a pointer: "... `self.stem` is a `ConvBNAct` (defined in …seq_convlib.py, not in
    # this file), which no edit here unrolls": its forward, indexing and length are
    # nn.Sequential's, so `self.stem[0]` is the conv the call runs first.
    assert m.exact, m.reason
    assert m.replacement == ("        if not self.stem[1].training:\n"
                             "            return cluster0(self.stem[0](x), "
                             f"{bn_args('self.stem[1]')})\n"
                             "        else:\n"
                             "            x = self.stem(x)\n"
                             "            return x.sum((2, 3))"), m.replacement


def test_a_library_sequential_with_a_layer_after_the_cluster_keeps_it_around_the_call(
        tmp_path, monkeypatch):
    path, (m,) = _library_mapping(tmp_path, monkeypatch, tail=True)
    assert m.exact, m.reason
    bn = bn_args("self.stem[0]")
    assert m.replacement == ("        if not self.stem[0].training:\n"
                             f"            x = self.stem[2](cluster0(x, {bn}))\n"
                             "        else:\n"
                             "            x = self.stem(x)"), m.replacement


def test_a_library_sequential_with_its_own_indexing_names_it(tmp_path, monkeypatch):
    path, (m,) = _library_mapping(tmp_path, monkeypatch, tail=False, cls="IndexedConvBNAct")
    assert not m.exact
    assert m.reason.startswith(
        "`self.stem(...)` (line 12) runs `self.stem[0]` (Conv2d) before the cluster's layers, "
        "outside the cluster, and an edit of the line replaces the whole call; `self.stem` is "
        "a `IndexedConvBNAct` (defined in "), m.reason
    assert m.reason.endswith(
        "seq_convlib.py) with its own `__getitem__`, which no edit here unrolls. To apply, call "
        "its layers one per line in this forward"), m.reason
