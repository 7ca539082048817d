"""Every message names ops the way the user wrote them, at their line: `add` (line 61),
`torch.cat` (line 40); never the graph's node names (`add_3`, `getitem_1`, `output`) nor
torch.export's overloads (`cat.default`).

Each test drives one path that used to leak such a name; ``leaked`` is the common check.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import torch

from fusion_core.analysis.barriers import find_barriers
from fusion_core.errors import InputSpecError
from fusion_core.ir.graph import FusionGraph, OpKind
from fusion_core.ir.shapes import InputSpec
from fusion_core.ir.spelling import aten_call, spelled_op
from fusion_core.pipeline import analyze_file
from fusion_core.report.json_report import to_document
from fusion_core.sourcemap import map_clusters

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CAPTURES = ["fx", "export"]

SOURCE = textwrap.dedent('''\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Returned(nn.Module):
        def forward(self, x):
            e = torch.exp(x[0])
            y = x * e
            return y, e


    class Cat(nn.Module):
        def forward(self, x):
            a = torch.relu(x)
            h = torch.cat([a, a * 2.0], dim=-1).flatten()
            return torch.sigmoid(h) * 2.0


    class Chunked(nn.Module):
        def forward(self, x):
            h = x * 2.0
            hs = h.chunk(2, dim=-1)
            g = torch.sigmoid(hs[0]) + torch.tanh(hs[1])
            return g * hs[1], h  # `h` whole too: stored, its pieces are read back


    class Swapped(nn.Module):
        def forward(self, x):
            a = (x - x.amax(-1, keepdim=True)).exp()
            s = a.sum(-1, keepdim=True)
            t = a.amax(-1, keepdim=True)
            return a / s, t


    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mask", torch.tril(torch.ones(8, 8, dtype=torch.bool)))

        def forward(self, x):
            h = torch.where(x > 0, x, x * 0.1)
            h = h.masked_fill(~self.mask[:h.shape[-1], :h.shape[-1]], float("-inf"))
            return torch.softmax(h, dim=-1) * 2.0


    class BadSecondAdd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.ones(5))

        def forward(self, x):
            a = x + 1.0
            return a + self.w


    class Special(nn.Module):
        def forward(self, x):
            a = torch.relu(x)
            h = torch.special.erfinv(a.clamp(max=0.5))
            return torch.sigmoid(h) * 2.0


    class Listed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))

        def forward(self, x):
            return torch.tanh(self.layers[1](torch.relu(x)))
''')


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE.splitlines(), 1) if text in line)


def leaked(g: FusionGraph, text: str) -> list[str]:
    """Graph words in `text`: a quoted node name that is not also what the user wrote
    (`add_3`, `getitem_1`), an overload (`.default`), the output node (`output`)."""
    spelled = {spelled_op(n) for n in g.nodes}
    names = {n.name for n in g.nodes if n.kind not in (OpKind.INPUT, OpKind.CONSTANT)}
    out = [t for t in re.findall(r"`([^`]+)`", text) if t in names - spelled]
    out += re.findall(r"\w+\.default\b|`output`", text)
    return out


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("spelling") / "models.py"
    path.write_text(SOURCE)
    return path


def analysed(path: Path, cls: str, capture: str, shape=(8, 8)):
    return analyze_file(path, [InputSpec(shape)], cls, capture=capture)


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_value_also_returned_is_named_by_its_return_line(model_file, capture):
    # Was: "`exp` (line 7) is also used by `output` outside the group".
    a = analysed(model_file, "Returned", capture)
    (r,) = [r for r in a.rejections if r.check == "fan-out"]
    assert r.reason.startswith(f"`exp` (line {line_of('torch.exp(x[0])')}) is also one of the "
                               f"model's results, returned at line {line_of('return y, e')}; ")
    assert leaked(a.graph, r.reason) == []


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_barrier_is_the_call_on_its_line_between_ops_at_their_lines(model_file, capture):
    # Was, under export: "`cat.default` at models.py:15 sits between `relu` and `sigmoid`".
    a = analysed(model_file, "Cat", capture)
    (b,) = find_barriers(a.graph, a.clusters)
    assert b.target == "torch.cat"
    text = b.describe(a.graph)
    # A cat read through a flatten stays out of the kernels, named as the user wrote it.
    assert text == (f"`torch.cat` at {model_file}:{line_of('torch.cat')} sits between `relu` "
                    f"(line {line_of('torch.relu')}) / `mul` (line {line_of('torch.cat')}) and "
                    f"`sigmoid` (line {line_of('torch.sigmoid(h)')}): no kernel could hold it "
                    "with its neighbours (--explain-rejections says why for each candidate)")
    assert leaked(a.graph, text) == []


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_call_from_a_torch_namespace_is_named_as_written(model_file, capture):
    # Was, under FX: "`special_erfinv` at models.py:…", the builtin's own name.
    a = analysed(model_file, "Special", capture)
    (b,) = find_barriers(a.graph, a.clusters)
    assert b.target == "torch.special.erfinv"


def test_a_module_list_item_is_named_as_the_source_indexes_it(model_file):
    # Was: "`self.layers.1` at models.py:… sits between …", a path no one can write.
    a = analysed(model_file, "Listed", "fx")
    (b,) = find_barriers(a.graph, a.clusters)
    assert b.describe(a.graph).startswith(f"`self.layers[1]` at {model_file}:"
                                          f"{line_of('self.layers[1](')} sits between `relu`")


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_lowering_reason_names_the_subscript_by_op_and_line(model_file, capture):
    # Was: "`getitem_1` reads `chunk`, a Python value computed at run time"; then "`chunk`
    # (line 23) is a view ...". A chunk's piece is a view of `h` now, which the group computes.
    a = analysed(model_file, "Chunked", capture)
    reasons = [r.reason for r in a.rejections if r.check == "lowering"]
    # FX puts the subscripts on their own line (two there: "a slice"), export on the chunk's
    # line, which has none: the piece is said by what it is a piece of.
    piece = (f"a slice (line {line_of('torch.sigmoid(hs[0])')})" if capture == "fx" else
             f"a piece of `mul` (line {line_of('h = x * 2.0')})")
    assert f"{piece} selects part of a value computed in the group" in reasons[0]
    assert [w for r in reasons for w in leaked(a.graph, r)] == []


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_source_map_mismatch_names_the_result_by_op_and_line(model_file, capture):
    # Was: "… `a / s` at line 33 does not compute the graph's `amax_1` there".
    a = analysed(model_file, "Swapped", capture)
    (m,) = map_clusters(a)
    (c,) = a.clusters
    assert re.fullmatch(r"amax_\d+", c.outputs[0])  # the name the reason used to quote
    line = line_of("t = a.amax")
    assert m.reason.endswith(f"(`amax` (line {line}), then `div` (line {line + 1})): `a / s` "
                             f"at line {line + 1} does not compute `amax` (line {line}) "
                             "there"), m.reason
    assert leaked(a.graph, m.reason) == []


def test_aten_ops_are_named_by_the_call_on_their_line():
    assert aten_call("cat", "h = torch.cat([a, a], dim=-1)") == "torch.cat"
    assert aten_call("silu", "y = torch.nn.functional.silu(x)") == "F.silu"
    assert aten_call("gelu", "y = nn.functional.gelu(x)") == "F.gelu"
    assert aten_call("add_", "a.add_(1.0)") == ".add_()"
    assert aten_call("cat", "h = cat([a, b])") == "cat"
    assert aten_call("add", "return a + b") == "add"  # an operator: the op itself
    assert aten_call("concat", "h = torch.cat([a, b])") == "concat"  # not `torch.cat`'s


@pytest.mark.parametrize("capture", CAPTURES)
def test_examples_say_no_graph_names(capture):
    """The example models' rejections, barriers and source-map reasons, swept."""
    for file, cls, spec in [("microgpt.py", "MicroGPT", InputSpec((2, 16), torch.int64)),
                            ("llama_block.py", "LlamaBlock", InputSpec((2, 16, 128)))]:
        a = analyze_file(EXAMPLES / file, [spec], cls, capture=capture)
        texts = [r.reason for r in a.rejections]
        texts += [b.describe(a.graph) for b in find_barriers(a.graph, a.clusters)]
        texts += [m.reason for m in map_clusters(a) if m.reason]
        if file == "microgpt.py":  # llama_block's (`add_3`, line 84) is now one joint edit
            assert any("computed by two kernels" in t for t in texts)
        assert [(t, w) for t in texts for w in leaked(a.graph, t)] == []


def test_json_lists_the_shape_reads_a_cluster_answers(model_file):
    # FX only: export bakes the static size into the graph, leaving no read to list.
    a = analysed(model_file, "Masked", "fx")
    (c,) = to_document(a)["clusters"]
    reads = c["shape_reads"]
    assert reads and {r["line"] for r in reads} == {line_of("h.shape[-1]")}
    assert all("h.shape[-1]" in r["code"] and r["of"] in c["nodes"] for r in reads)
    assert all(set(r["sources"]) <= set(c["inputs"]) and r["sources"] for r in reads)


def test_an_input_the_model_rejects_is_blamed_on_the_call_not_its_node(model_file):
    # Was: "the example input does not fit the model: `add_1` at models.py:52 rejected it".
    with pytest.raises(InputSpecError) as e:
        analysed(model_file, "BadSecondAdd", "fx")
    assert f"`add` at {model_file}:{line_of('return a + self.w')} rejected it" in str(e.value)
    assert "add_1" not in str(e.value)


def test_the_return_line_is_read_from_the_file_as_it_is_now(tmp_path):
    # A plugin session outlives an edit of the model file: the parse must follow it.
    import os

    from fusion_core.ir.spelling import _tree

    path = tmp_path / "model.py"
    path.write_text("def forward(x):\n    return x\n")
    assert _tree(str(path)).body[0].body[0].lineno == 2
    path.write_text("def forward(x):\n    y = x\n\n    return y\n")
    os.utime(path, (1, 1))  # another mtime even within the filesystem's clock resolution
    assert _tree(str(path)).body[0].body[-1].lineno == 4


SLICES = '''\
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        a = x[:, :4] * 2.0
        b = torch.cat((x[:, 4:], x[:, :4]), dim=1)
        return a, b
'''


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_slice_is_said_as_the_line_writes_it(tmp_path, capture):
    # Was `getitem` / `slice`: one subscript on the line is quoted; of two, neither can be
    # told from the other (the graph records lines, not columns), so "a slice".
    from fusion_core.ir.spelling import said

    path = tmp_path / "slices.py"
    path.write_text(SLICES)
    g = analyze_file(path, [InputSpec((2, 8))], capture=capture).graph
    phrases = {said(g, n.name) for n in g.nodes
               if n.kind is OpKind.VIEW and n.op in ("getitem", "slice")}
    assert "`x[:, :4]` (line 7)" in phrases
    assert "a slice (line 8)" in phrases
