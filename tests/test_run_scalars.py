"""A Python number computed at run time from sizes alone (`math.sqrt(c)`, `c ** -0.5`, `c`
with `b, t, c = q.shape`) fuses with the ops that read it, under FX as under export: the
kernel takes it as a scalar argument, so one generated kernel serves every input size.
A number read from a tensor's values (`.item()`), or computed by a call the analysis does
not model, stays a reason naming its line (``ir/run_scalars.py``)."""

from __future__ import annotations

import math
import textwrap

import pytest
import sympy
import torch
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.ir.run_scalars import Apply, Dim, Num, run_scalar, spelled, symbolic
from fusion_core.pipeline import analyze
from fusion_core.validate import validate
from fusion_core.validate.subgraph import patch

SOURCE = textwrap.dedent('''\
    import math
    import torch
    import torch.nn as nn


    class Attention(nn.Module):
        def __init__(self, scale: str = "sqrt") -> None:
            super().__init__()
            self.scale = scale

        def forward(self, q, k):
            b, t, c = q.shape
            if self.scale == "sqrt":
                att = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(c)
            elif self.scale == "pow":
                att = torch.bmm(q, k.transpose(1, 2)) * (c ** -0.5)
            elif self.scale == "int":
                att = torch.bmm(q, k.transpose(1, 2)) / c
            elif self.scale == "log2":  # a size function the analysis does not model
                att = torch.bmm(q, k.transpose(1, 2)) / math.log2(c)
            else:  # a tensor's value
                att = torch.bmm(q, k.transpose(1, 2)) / q.abs().amax().item()
            att = att.softmax(-1)
            return att
''')
namespace: dict = {}
exec(compile(SOURCE, "attention.py", "exec"), namespace)  # noqa: S102 - the model under test
Attention = namespace["Attention"]
SCALE_LINE = {"sqrt": 14, "pow": 16, "int": 18, "log2": 20, "item": 22}
SHAPE = (2, 8, 16)

CASES = [("sqrt", "div", Apply("sqrt", (Dim("q", 2),)), "math.sqrt(q.shape[2])"),
         ("pow", "mul", Apply("pow", (Dim("q", 2), Num(-0.5))), "q.shape[2] ** -0.5"),
         ("int", "div", Dim("q", 2), "q.shape[2]")]


@pytest.mark.parametrize("scale,op,expr,text", CASES, ids=[c[0] for c in CASES])
def test_a_scale_of_sizes_fuses_with_the_softmax(scale, op, expr, text):
    a = analyze(Attention(scale), SHAPE, SHAPE, capture="fx")
    assert [c.chain for c in a.clusters] == [f"{op} → softmax"] and not a.rejections
    (c,) = a.clusters
    tensor, number = c.inputs
    assert tensor == "bmm" and run_scalar(a.graph, number) == expr
    assert spelled(expr) == text
    # The same cluster where export records the size as a constant.
    assert [c.chain for c in analyze(Attention(scale), SHAPE, SHAPE,
                                     capture="export").clusters] == [f"{op} → softmax"]


def test_the_expression_is_a_function_of_dims_only():
    c = sympy.Symbol("q.shape[2]", integer=True, positive=True)
    assert symbolic(Apply("pow", (Dim("q", 2), Num(-0.5)))) == c ** sympy.Rational(-1, 2)
    assert symbolic(Apply("sqrt", (Dim("q", 2),))).free_symbols == {c}


def _eager(q, k, scale):
    return Attention(scale)(q, k)


@pytest.mark.cpu
@pytest.mark.parametrize("scale", ["sqrt", "pow", "int"])
def test_one_kernel_matches_eager_at_other_lengths_and_widths(scale, tmp_path):
    """Generated once at (2, 8, 16): the scalar is an argument, not the analysed 4.0."""
    a = analyze(Attention(scale), SHAPE, SHAPE, capture="fx")
    kernel = generate(a, a.clusters[0])
    assert "scalar0" in kernel.source and "v0 / 4.0" not in kernel.source
    (path,) = write_kernels([kernel], tmp_path)
    launch = getattr(load_kernel(path), kernel.name)
    gen = torch.Generator().manual_seed(0)
    for t, c in ((8, 16), (5, 16), (12, 24)):  # sequence lengths, and a scale 16 is not
        q, k = (torch.randn(2, t, c, generator=gen) for _ in range(2))
        number = {"sqrt": math.sqrt(c), "pow": c ** -0.5, "int": c}[scale]
        got = launch(torch.bmm(q, k.transpose(1, 2)), number)
        assert torch.allclose(got, _eager(q, k, scale), atol=1e-6, rtol=1e-5), (t, c)


@pytest.mark.cpu
def test_the_scalar_rounds_as_the_constant_export_records(tmp_path):
    """Eager rounds a Python float to fp32 beside fp32 tensors; a Triton float argument is
    fp32 too: bit for bit the kernel export's constant (`v0 / 4.898979485566356`) gives."""
    shape = (2, 8, 24)
    launchers = []
    for capture in ("fx", "export"):
        a = analyze(Attention(), shape, shape, capture=capture)
        kernel = generate(a, a.clusters[0])
        (path,) = write_kernels([kernel], tmp_path / capture)
        launchers.append(getattr(load_kernel(path), kernel.name))
    scores = torch.randn(2, 8, 8, generator=torch.Generator().manual_seed(0))
    by_argument, by_constant = launchers[0](scores, math.sqrt(24)), launchers[1](scores)
    assert torch.equal(by_argument, by_constant)
    assert torch.allclose(by_argument, (scores / math.sqrt(24)).softmax(-1), atol=1e-6)


@pytest.mark.cpu
def test_the_patched_model_computes_the_scale_at_each_input_size(tmp_path):
    a = analyze(Attention(), SHAPE, SHAPE, capture="fx")
    (c,) = a.clusters
    kernel = generate(a, c)
    (path,) = write_kernels([kernel], tmp_path)
    launch = getattr(load_kernel(path), kernel.name)
    patched = patch(a.graph_module, {c.index: (c, launch)})
    for shape in ((1, 8, 16), (3, 7, 24), (2, 4, 9)):
        q, k = torch.randn(shape), torch.randn(shape)
        assert torch.allclose(patched(q, k), _eager(q, k, "sqrt"), atol=1e-6), shape
    report = validate(a, timing=False)
    assert [r.usable for r in report.results] == [True] and report.model.passed


@pytest.mark.parametrize("scale,fix", [
    ("log2", "compute it once in `__init__`"),
    ("item", "keep it a tensor (it depends on a tensor's values: drop `.item()`)"),
])
def test_a_number_not_provably_of_sizes_is_named_at_its_line(scale, fix):
    a = analyze(Attention(scale), SHAPE, SHAPE)  # `.item()`: FX fails, export captures
    assert not any("softmax" in c.ops and len(c.ops) > 1 for c in a.clusters)
    (r,) = [r for r in a.rejections if "softmax" in r.ops]
    line = SCALE_LINE[scale]
    assert (f"`div` (line {line}) reads a Python value computed at run time at line {line}"
            in r.reason), r.reason
    assert fix in r.reason


PLAIN = textwrap.dedent('''\
    import math
    import torch
    import torch.nn as nn


    class Attention(nn.Module):
        def forward(self, q, k):
            b, t, c = q.shape
            att = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(c)
            att = att.softmax(-1)
            return att
''')


@pytest.mark.cpu
@pytest.mark.parametrize("edit,call", [
    ("", "att = cluster0(torch.bmm(q, k.transpose(1, 2)), math.sqrt(c))"),
    # computed on a line of its own, above the cluster's: the call reads its name
    ("scale", "att = cluster0(torch.bmm(q, k.transpose(1, 2)), scale)"),
])
def test_apply_passes_the_scale_the_users_line_computes(tmp_path, edit, call):
    path = tmp_path / "attention.py"
    text = PLAIN if not edit else PLAIN.replace(
        "        att = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(c)",
        "        scale = c ** -0.5\n        att = torch.bmm(q, k.transpose(1, 2)) * scale")
    path.write_text(text)
    result = CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "2,8,16",
                                      "--input-shape", "2,8,16", "--apply", "--yes"])
    assert "rewritten model matches the original" in result.output, result.output
    assert call in path.read_text(), path.read_text()
    package = (tmp_path / "attention_fused" / "__init__.py").read_text()
    assert "scalars=('float',)" in package


@pytest.mark.cpu
def test_the_applied_model_compiles_whole_and_follows_the_width(tmp_path):
    """The package's operator takes the scale as a `float`: torch.compile traces the
    rewritten model without a graph break, and it matches eager at two widths."""
    from test_apply import load

    path = tmp_path / "attention.py"
    path.write_text(PLAIN)
    result = CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "2,8,16",
                                      "--input-shape", "2,8,16", "--apply", "--yes"])
    assert "rewritten model matches the original" in result.output, result.output
    compiled = torch.compile(load(path, "Attention").eval(), fullgraph=True)
    with torch.no_grad():
        for shape in ((2, 8, 16), (3, 5, 40)):
            q, k = torch.randn(shape), torch.randn(shape)
            assert torch.allclose(compiled(q, k), _eager(q, k, "sqrt"), atol=1e-6), shape


@pytest.mark.cpu
def test_the_harness_checks_each_cluster_with_its_scalar(tmp_path):
    """`cluster_inputs` draws fresh tensors and keeps the number as it was computed."""
    from codegen_harness import check_model

    shape = (2, 8, 24)
    checked = check_model(Attention("pow"), (torch.randn(shape), torch.randn(shape)),
                          tmp_path, n_clusters=1, capture="fx")
    assert checked.max_err < 1e-5
