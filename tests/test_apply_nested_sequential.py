"""`--apply` on several clusters inside one call of nested Sequentials (issue 26.5).

torchvision's MobileNet/EfficientNet blocks call `self.block(input)`, an `nn.Sequential`
of `Conv2dNormActivation`s (a Sequential subclass without a forward of its own), and
ShuffleNet's `self.branch2(x2)` runs two conv → bn → relu groups: one call holds several
clusters, one layer's result feeding the next's. The edit spells the call layer by layer
(`sourcemap/sequential.py`) and writes each cluster's kernel call as the argument of the
next layer (`self.block[1][0](cluster0(...))`). Kernels run under the Triton interpreter.
"""

from __future__ import annotations

from apply_checks import apply_net, bn_args, conv_apart, same_outputs

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters

# The model file's own Conv2dNormActivation, three of them in one nn.Sequential.
NESTED = """\
import torch
from torch import nn


class ConvNormAct(nn.Sequential):
    def __init__(self, cin, cout, k=1, act=nn.ReLU):
        super().__init__(nn.Conv2d(cin, cout, k, padding=k // 2, bias=False),
                         nn.BatchNorm2d(cout), act())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(
            ConvNormAct(3, 8, 1, nn.ReLU),
            ConvNormAct(8, 8, 3, nn.Hardswish),
            ConvNormAct(8, 4, 1, nn.SiLU),
        )
        self.head = nn.Conv2d(4, 4, 1)

    def forward(self, input):
        result = self.block(input)
        return self.head(result)
"""


def test_each_nested_sequentials_cluster_feeds_the_next_layer_in_one_edit(tmp_path):
    path = tmp_path / "nested.py"
    path.write_text(NESTED)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    # Was three pointers: "line 22 calls `self.block(input)`, a `Sequential` whose forward
    # ... runs the cluster's layers ... and also `self.block[1][0]` (Conv2d)".
    assert "Applied 1 edit to" in result.output, result.output
    bn = [bn_args(f"self.block[{i}][1]") for i in range(3)]
    # The kernels compute the three BatchNorms as eval mode does: they run only while each
    # of those layers is in eval mode; otherwise the line as written.
    assert ("        if not self.block[0][1].training and not self.block[1][1].training and "
            "not self.block[2][1].training:\n"
            "            result = cluster2(self.block[2][0](cluster1(self.block[1][0](cluster0("
            f"self.block[0][0](input), {bn[0]})), {bn[1]})), {bn[2]})\n"
            "        else:\n"
            "            result = self.block(input)\n"
            "        return self.head(result)\n" in path.read_text()), path.read_text()
    same_outputs(tmp_path, path, NESTED)


# MBConv: the block's last bn → act adds the residual on the next line; the other clusters
# are inside the call on the first: one edit of both lines.
RESIDUAL = NESTED.replace("ConvNormAct(8, 4, 1, nn.SiLU)", "ConvNormAct(8, 3, 1, nn.SiLU)").replace(
    "        return self.head(result)\n", "        return result + input\n")


def test_a_residual_after_the_nested_sequential_joins_the_edit_of_its_call(tmp_path):
    path = tmp_path / "residual.py"
    path.write_text(RESIDUAL)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    # Was (with the clusters inside the call written alone) "its lines overlap cluster 2's
    # edit (one keeps code the other fuses); one edit cannot rewrite both", for all three.
    assert "Applied 1 edit to" in result.output, result.output
    bn = [bn_args(f"self.block[{i}][1]") for i in range(3)]
    rewritten = path.read_text()
    # `result = ` only in the lines as written, run while a BatchNorm is in train mode.
    assert ("        if not self.block[0][1].training and not self.block[1][1].training and "
            "not self.block[2][1].training:\n"
            "            return cluster2(self.block[2][0](cluster1(self.block[1][0](cluster0("
            f"self.block[0][0](input), {bn[0]})), {bn[1]})), {bn[2]}, input)\n"
            "        else:\n"
            "            result = self.block(input)\n"
            "            return result + input\n" in rewritten), rewritten
    assert rewritten.count("result = ") == 1, rewritten
    same_outputs(tmp_path, path, RESIDUAL)


# A cluster across two nested Sequentials: bn, the last layer of `ConvNorm` (torchvision's
# Conv2dNormActivation without activation), then the activation that starts `ActConv`;
# another cluster ends the first layer.
SPANNING = """\
import torch
from torch import nn


class ConvNormAct(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class ConvNorm(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout))


class ActConv(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.Hardswish(), nn.Conv2d(cin, cout, 1))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(ConvNormAct(3, 8), ConvNorm(8, 8), ActConv(8, 4))

    def forward(self, x):
        return self.block(x)
"""


def test_a_cluster_across_the_end_of_one_nested_sequential_and_the_next(tmp_path):
    path = tmp_path / "spanning.py"
    path.write_text(SPANNING)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit to" in result.output, result.output
    bn = [bn_args(f"self.block[{i}][1]") for i in range(2)]
    assert ("        if not self.block[0][1].training and not self.block[1][1].training:\n"
            "            return self.block[2][1](cluster1(self.block[1][0](cluster0("
            f"self.block[0][0](x), {bn[0]})), {bn[1]}))\n"
            "        else:\n"
            "            return self.block(x)\n" in path.read_text()), path.read_text()
    same_outputs(tmp_path, path, SPANNING)


# A Sequential subclass whose constructor takes its own arguments: slicing it
# (`self.stem[:2]`) would call `Stem(OrderedDict(...))`, so its layers go one by one.
SUBCLASS = """\
import torch
from torch import nn


class Stem(nn.Sequential):
    def __init__(self, c):
        super().__init__(nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, c, 1), nn.BatchNorm2d(c),
                         nn.ReLU(), nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = Stem(8)

    def forward(self, x):
        return self.stem(x)
"""


def test_a_sequential_subclass_is_never_sliced(tmp_path, apply_target):
    path = tmp_path / "stem.py"
    path.write_text(SUBCLASS)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit to" in result.output, result.output
    bn = bn_args("self.stem[2]")
    # For the GPU the conv before the norm is called without its bias, which the kernel adds.
    conv = {"cpu": "self.stem[1](self.stem[0](x))",
            "cuda": conv_apart("self.stem[1]", "self.stem[0](x)")}[apply_target]
    # Was `self.stem[4:](cluster0(self.stem[:2](x), ...))`: TypeError when run.
    assert ("        if not self.stem[2].training:\n"
            f"            return self.stem[5](self.stem[4](cluster0({conv}, {bn})))\n"
            "        else:\n"
            "            return self.stem(x)\n" in path.read_text()), path.read_text()
    same_outputs(tmp_path, path, SUBCLASS)


# ShuffleNet's block: two conv → bn → relu groups in one flat nn.Sequential, the block used
# at two widths (one kernel serves both calls of the line). ShuffleNet's own line,
# `torch.cat((x1, self.branch2(x2)), dim=1)`, fuses the cat, whose kernel reads one width.
SHUFFLE = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.branch2 = nn.Sequential(
            nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
            nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), nn.BatchNorm2d(c),
            nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
        )

    def forward(self, x):
        out = x + self.branch2(x)
        return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.one = Block(4)
        self.wide = nn.Conv2d(4, 8, 1)
        self.two = Block(8)

    def forward(self, x):
        return self.two(self.wide(self.one(self.stem(x))))
"""


def test_two_clusters_of_one_flat_sequential_in_blocks_of_two_widths(tmp_path):
    path = tmp_path / "shuffle.py"
    path.write_text(SHUFFLE)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit to" in result.output, result.output
    rewritten = path.read_text()
    b1, b6 = bn_args("self.branch2[1]"), bn_args("self.branch2[6]")
    assert ("        if not self.branch2[1].training and not self.branch2[6].training:\n"
            f"            out = cluster1(self.branch2[3:6](cluster0(self.branch2[0](x), {b1})), "
            f"{b6}, x)\n"
            "        else:\n"
            "            out = x + self.branch2(x)\n"
            "        return out\n" in rewritten), rewritten
    same_outputs(tmp_path, path, SHUFFLE)


# MobileNet's blocks: one class whose `self.block` has an expand layer in some blocks only;
# the line `result = self.block(input)` runs in both.
ARRANGED = """\
import torch
from torch import nn


class ConvNormAct(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class Block(nn.Module):
    def __init__(self, c, expand):
        super().__init__()
        layers = [ConvNormAct(c, 2 * c)] if expand else []
        self.block = nn.Sequential(*layers, ConvNormAct(2 * c if expand else c, c))

    def forward(self, input):
        result = self.block(input)
        return result


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.one = Block(3, expand=False)
        self.two = Block(3, expand=True)

    def forward(self, x):
        return self.two(self.one(x))
"""


def test_blocks_whose_sequentials_hold_the_clusters_in_other_layers_say_where(tmp_path):
    path = tmp_path / "arranged.py"
    path.write_text(ARRANGED)
    analysis = analyze_file(path, [InputSpec((2, 3, 8, 8))])
    mappings = map_clusters(analysis)
    assert len(mappings) == 3 and not any(m.exact for m in mappings)
    # Was "line 17 calls `self.block(input)`, a `Sequential` whose forward ... To apply, make
    # `self.block[0]` (`ConvNormAct`) a module of your file whose forward calls its layers
    # one per line", which unrolling it already does.
    assert {m.reason for m in mappings} == {
        "line 17 runs `self.block(input)` in 2 calls whose Sequentials differ (`self.one.block`"
        ": clusters in layer 0 of 1; `self.two.block`: clusters in layers 0, 1 of 2): one edit "
        "of the line, spelled layer by layer, cannot serve them all. To apply, give each "
        "arrangement of layers a module class of its own"}, mappings[0].reason


# Two blocks of one class whose Sequentials differ only in the activation: `one`'s layers fuse,
# `two`'s (Identity) hold no cluster, yet run the same line.
BARE = """\
import torch
from torch import nn


class ConvNormAct(nn.Sequential):
    def __init__(self, c, act):
        super().__init__(nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), act())


class Block(nn.Module):
    def __init__(self, c, act):
        super().__init__()
        self.block = nn.Sequential(ConvNormAct(c, act), ConvNormAct(c, act))

    def forward(self, x):
        return self.block(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.one = Block(3, nn.SiLU)
        self.two = Block(3, nn.Identity)

    def forward(self, x):
        return self.two(self.one(x)) * 2.0
"""


def test_a_block_running_the_line_without_the_clusters_keeps_the_line(tmp_path):
    # Was an exact edit: `two`'s calls would have run `one`'s BatchNorm → SiLU kernels
    # (--apply's check against the original then restored the file).
    path = tmp_path / "bare.py"
    path.write_text(BARE)
    mappings = map_clusters(analyze_file(path, [InputSpec((2, 3, 8, 8))]))
    line = BARE.splitlines().index("        return self.block(x)") + 1
    inner = [m for m in mappings if m.start == m.end == line]
    assert len(inner) == 2 and not any(m.exact for m in inner), [m.reason for m in mappings]
    assert all("(`self.one.block`: clusters in layers 0, 1 of 2; `self.two.block`: no cluster "
               "in 2 layers): one edit of the line" in m.reason for m in inner), inner[0].reason


# EfficientNet's first block has no expand layer: the line runs in Sequentials of other
# lengths, the clusters in the same layers of each. The layers after them go as one open
# slice (`self.block[3:]`, empty in the shorter one); a subclass, indexed layer by layer,
# cannot serve both.
LENGTHS = """\
import torch
from torch import nn


class Tail(nn.Sequential):
    pass


class Block(nn.Module):
    def __init__(self, c, extra):
        super().__init__()
        layers = [nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
        self.block = SEQ(*layers, *([nn.Conv2d(c, c, 1)] if extra else []))

    def forward(self, x):
        return self.block(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.one = Block(3, extra=False)
        self.two = Block(3, extra=True)

    def forward(self, x):
        return self.two(self.one(x))
"""


def test_sequentials_of_other_lengths_end_in_an_open_slice(tmp_path):
    path = tmp_path / "lengths.py"
    text = LENGTHS.replace("SEQ", "nn.Sequential")
    path.write_text(text)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit to" in result.output, result.output
    assert ("        if not self.block[1].training:\n"
            "            return self.block[3:](cluster0(self.block[0](x), "
            f"{bn_args('self.block[1]')}))\n"
            "        else:\n"
            "            return self.block(x)\n" in path.read_text()), path.read_text()
    same_outputs(tmp_path, path, text)


def test_a_subclass_of_other_lengths_is_no_edit(tmp_path):
    path = tmp_path / "lengths.py"
    path.write_text(LENGTHS.replace("SEQ", "Tail"))
    (m, n) = map_clusters(analyze_file(path, [InputSpec((2, 3, 8, 8))]))
    assert not m.exact and m.reason == n.reason == (
        "line 16 runs `self.block(x)` in 2 calls whose Sequentials differ (`self.one.block`: "
        "clusters in layers 1, 2 of 3; `self.two.block`: clusters in layers 1, 2 of 4): one "
        "edit of the line, spelled layer by layer, cannot serve them all. To apply, give each "
        "arrangement of layers a module class of its own"), m.reason


# ShuffleNet's blocks of stride 1 hold an empty `self.branch1` and never call it: the line
# calling it is spelled for the blocks that run it.
BRANCHES = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c, down):
        super().__init__()
        self.down = down
        self.branch1 = nn.Sequential(
            nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c, 1),
        ) if down else nn.Sequential()
        self.branch2 = nn.Conv2d(c, c, 1)

    def forward(self, x):
        if self.down:
            return self.branch1(x)
        return self.branch2(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.one = Block(3, down=True)
        self.two = Block(3, down=False)

    def forward(self, x):
        return self.two(self.one(x))
"""


def test_a_module_that_never_runs_the_line_does_not_constrain_its_spelling(tmp_path):
    path = tmp_path / "branches.py"
    path.write_text(BRANCHES)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    assert ("        if self.down:\n"
            "            if not self.branch1[1].training:\n"
            "                return self.branch1[3](cluster0(self.branch1[0](x), "
            f"{bn_args('self.branch1[1]')}))\n"
            "            else:\n"
            "                return self.branch1(x)\n"
            "        return self.branch2(x)\n" in path.read_text()), result.output
    same_outputs(tmp_path, path, BRANCHES)


# EfficientNet in miniature: a block without the expand layer runs the same line, and its
# first layer's bn → SiLU fuses into the squeeze-excitation's mean instead (no cluster of
# this line there), but that layer is built as the expand block's layer 0 is: the edit's
# kernel computes it too, and the rest of the shorter block runs as an open slice.
ALIKE = """\
import torch
from torch import nn


class ConvNormAct(nn.Sequential):
    def __init__(self, cin, cout, k=1):
        super().__init__(nn.Conv2d(cin, cout, k, padding=k // 2, bias=False),
                         nn.BatchNorm2d(cout), nn.SiLU())


class Excite(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = nn.Conv2d(c, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.fc(x.mean((2, 3), keepdim=True)))


class Block(nn.Module):
    def __init__(self, c, expand):
        super().__init__()
        layers = [ConvNormAct(c, c)] if expand else []
        self.block = nn.Sequential(*layers, ConvNormAct(c, c, 3), Excite(c))

    def forward(self, input):
        result = self.block(input)
        return result


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Block(3, expand=False)
        self.second = Block(3, expand=True)

    def forward(self, x):
        return self.second(self.first(x))
"""


def test_a_block_whose_layers_are_built_alike_is_served_without_a_cluster_of_its_own(
        tmp_path):
    path = tmp_path / "alike.py"
    path.write_text(ALIKE)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    # Was a pointer: "`self.first.block`: no cluster in 2 layers".
    assert "no cluster in" not in result.output, result.output
    # `self.block[0][1]` is the BatchNorm the kernel computes in both blocks.
    assert ("        if not self.block[0][1].training:\n"
            "            result = self.block[1:](cluster2(self.block[0][0](input), "
            f"{bn_args('self.block[0][1]')}))\n"
            "        else:\n"
            "            result = self.block(input)\n"
            "        return result\n") in path.read_text(), path.read_text()
    same_outputs(tmp_path, path, ALIKE)


HOOKED = NESTED.replace(
    "        self.head = nn.Conv2d(4, 4, 1)\n",
    "        self.head = nn.Conv2d(4, 4, 1)\n"
    "        self.block.register_forward_hook(lambda module, args, out: out * 2.0)\n")


def test_a_sequential_with_a_hook_of_its_own_is_not_unrolled(tmp_path):
    path = tmp_path / "hooked.py"
    path.write_text(HOOKED)
    result = apply_net(path)
    assert result.exit_code == 0, result.output
    # Unrolled, `self.block[2][0](...)` and the kernels would run without the hook's `* 2.0`.
    assert "Applied" not in result.output, result.output
    said = " ".join(result.output.split())
    assert ("`self.block` has forward hooks registered, which would not run if its layers "
            "were called one by one. To apply, register the hooks on its layers instead"
            ) in said, said
    assert path.read_text() == HOOKED
