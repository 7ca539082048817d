"""`--apply` on blocks whose Sequentials hold other numbers of layers before the fused ones
(issue 26.5): torchvision's MobileNetV3 `InvertedResidual` builds `self.block` with an
expand layer and squeeze-excitation in some blocks only, so the last conv's BatchNorm,
fused with the residual add under `if self.use_res_connect:`, is `self.block[2][1]` in one
block and `self.block[3][1]` in another. Counted from the end it is `self.block[-1][1]` in
every block: one edit serves them all (`sourcemap/from_end.py`). Kernels run under the
Triton interpreter.
"""

from __future__ import annotations

import ast

import torch
from apply_checks import DEVICE, apply_net, bn_args, original_and_rewritten, same_outputs
from torch import nn

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.from_end import counted_from_end, layer_positions, resolved
from fusion_core.sourcemap.pyexpr import module_attr_text, module_chain

BN = bn_args("self.block[-1][1]")

# MobileNetV3 in miniature: an expand conv in some blocks only, the projection's conv → bn
# last in every block, the residual where the block keeps its width.
RESIDUAL = """\
import torch
from torch import nn


class ConvNorm(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))


class Block(nn.Module):
    def __init__(self, cin, cout, expand):
        super().__init__()
        self.use_res_connect = cin == cout
        layers = [nn.Conv2d(cin, cin, 1)] if expand else []
        layers.append(nn.Conv2d(cin, cin, 3, padding=1, groups=cin))
        layers.append(ConvNorm(cin, cout))
        self.block = nn.Sequential(*layers)

    def forward(self, input):
        result = self.block(input)
        if self.use_res_connect:
            result += input
        return result


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(Block(3, 3, False), Block(3, 3, True),
                                      Block(3, 4, True), Block(4, 4, False))

    def forward(self, x):
        return self.features(x)
"""


def _blocks_match(tmp_path, path, original: str) -> None:
    """Every block of the rewritten model computes what the original's does, on the
    original's weights (BatchNorm's statistics away from 0 and 1)."""
    before, after = original_and_rewritten(tmp_path, path, original)
    before, after = before.to(DEVICE), after.to(DEVICE)  # a GPU's kernels need its memory
    for k, block in enumerate(before.features):
        x = torch.randn(2, block.block[0].in_channels, 8, 8, device=DEVICE)
        with torch.no_grad():
            torch.testing.assert_close(after.features[k](x), block(x), atol=1e-5, rtol=1e-4)


def test_the_fused_last_layers_are_spelled_from_the_end_in_one_edit(tmp_path):
    path = tmp_path / "blocks.py"
    path.write_text(RESIDUAL)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    # Was a pointer: "line 20 runs `self.block(input)` in 3 calls whose Sequentials differ
    # (`self.features[0].block`: clusters in layer 1 of 2; `self.features[1].block`:
    # clusters in layer 2 of 3)".
    assert "Applied 1 edit to" in result.output, result.output
    rewritten = path.read_text()
    # The kernel computes the BatchNorm as eval mode does: it runs only while that BatchNorm
    # is in eval mode. It is `self.block[1][1]` in some blocks and `self.block[2][1]` in
    # others: counted from the end, `self.block[-1][-1]` in all; in train mode the lines run
    # as written.
    assert ("        if not self.block[-1][-1].training:\n"
            "            if self.use_res_connect:\n"
            "                result = cluster0(self.block[-1][0](self.block[:-1](input)), "
            f"{BN}, input)\n"
            "            else:\n"
            "                result = self.block(input)\n"
            "        else:\n"
            "            result = self.block(input)\n"
            "            if self.use_res_connect:\n"
            "                result += input\n"
            "        return result\n" in rewritten), rewritten
    same_outputs(tmp_path, path, RESIDUAL)
    _blocks_match(tmp_path, path, RESIDUAL)


# The same blocks, the last one with a conv after its conv → bn → ReLU: there the clusters'
# layers are not the last ones, and counting from the end serves no more than counting from
# the start.
TAILED = """\
import torch
from torch import nn


class ConvNormAct(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class Block(nn.Module):
    def __init__(self, c, expand, tail):
        super().__init__()
        layers = [nn.Conv2d(c, c, 1)] if expand else []
        layers += [nn.Conv2d(c, c, 3, padding=1, groups=c), ConvNormAct(c, c)]
        self.block = nn.Sequential(*layers, *([nn.Conv2d(c, c, 1)] if tail else []))

    def forward(self, input):
        result = self.block(input)
        return result


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(Block(3, False, False), Block(3, True, False),
                                      Block(3, True, True))

    def forward(self, x):
        return self.features(x)
"""


def test_layers_not_last_in_one_block_are_refused_naming_it(tmp_path):
    path = tmp_path / "tailed.py"
    path.write_text(TAILED)
    mappings = map_clusters(analyze_file(path, [InputSpec((2, 3, 8, 8))]))
    assert len(mappings) == 3 and not any(m.exact for m in mappings)
    assert {m.reason for m in mappings} == {
        "line 18 runs `self.block(input)` in 3 calls whose Sequentials differ "
        "(`self.features[0].block`: clusters in layer 1 of 2; `self.features[1].block`: "
        "clusters in layer 2 of 3; `self.features[2].block`: clusters in layer 2 of 4): one "
        "edit of the line, spelled layer by layer, cannot serve them all, counted from the "
        "start or from the end (the clusters' layers are the last ones in "
        "`self.features[0].block` but not in `self.features[2].block`). To apply, give each "
        "arrangement of layers a module class of its own"}, mappings[0].reason
    result = apply_net(path)
    assert result.exit_code == 0 and "Applied" not in result.output, result.output
    assert path.read_text() == TAILED


def test_a_negative_index_names_each_modules_own_layer():
    model = nn.Sequential(nn.Sequential(nn.ReLU(), nn.Conv2d(2, 2, 1)),
                          nn.Sequential(nn.Conv2d(2, 2, 1), nn.ReLU(), nn.Conv2d(2, 2, 1)))
    chain = module_chain(ast.parse("self.block[-1][0]", mode="eval").body)
    assert chain == ["self", "block", "-1", "0"]
    assert resolved(model, ["0", "-1", "weight"]) == "0.1.weight"
    assert resolved(model, ["1", "-1"]) == "1.2"
    assert resolved(model, ["1", "-4"]) is None  # past its first layer
    assert resolved(None, ["1", "0"]) == "1.0"
    # A parameter's path as the edit spells it where the lines index `self[1]` from the end.
    assert counted_from_end(model, "", "1.2.weight", {"1"}) == "1.-1.weight"
    assert counted_from_end(model, "", "0.1.weight", {"1"}) == "0.1.weight"
    assert module_attr_text("self", "", "1.-1.weight") == "self[1][-1].weight"
    assert list(layer_positions(model, "1", slice(None, -1))) == [0, 1]
    assert 7 in layer_positions(None, "1", slice(3, None))  # an open end: any length


def test_a_sequential_subclass_of_other_lengths_is_not_sliced_from_the_end(tmp_path):
    # Its slice (`self.block[:-1]`) would call the subclass's constructor with the layers.
    text = RESIDUAL.replace("self.block = nn.Sequential(*layers)", "self.block = Layers(*layers)")
    text = text.replace("class Block(", "class Layers(nn.Sequential):\n    pass\n\n\nclass Block(")
    path = tmp_path / "subclass.py"
    path.write_text(text)
    mappings = map_clusters(analyze_file(path, [InputSpec((2, 3, 8, 8))]))
    assert mappings and not any(m.exact for m in mappings)
    assert {m.reason for m in mappings} == {
        "line 24 runs `self.block(input)` in 3 calls whose Sequentials differ "
        "(`self.features[0].block`: clusters in layer 1 of 2; `self.features[1].block`: "
        "clusters in layer 2 of 3): one edit of the line, spelled layer by layer, cannot "
        "serve them all. To apply, give each arrangement of layers a module class of its "
        "own"}, mappings[0].reason
