"""A `torch.cat` that repeats one value (`cat((f, f), -1)`: LLaMA's rotary `emb`) in a kernel.

``ir/cat_repeats.py`` reads the second occurrence through an alias: an input is loaded once
more at the piece's shifted coordinate, a value computed in the group is recomputed for it
from its own copy of the pointwise producers (``analysis/slice_recompute.py``). Each case runs
its kernel under the interpreter against the eager subgraph. Shapes stay tiny.
"""

import pytest
import torch
from codegen_harness import Lambda, check_model, compile_for_gpu

from fusion_core.analysis.barriers import find_barriers
from fusion_core.codegen import generate
from fusion_core.codegen.reference import capture_values, cluster_inputs
from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze


def computed(m, x):
    f = x * 3
    return torch.cat((f, f), -1).cos() * 2


def given(m, x):
    return torch.cat((x, x), -1).cos() * 2


def three(m, x, y):
    f = x * 3
    return torch.cat((f, y, f), -1).sin() + 1


def along_rows(m, x):
    f = x.exp()
    return torch.cat((f, f), 1) * 2  # not the last dim


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(m, q, pos, inv_freq):
    # LLaMA's rotary embedding: the angles computed in the kernel, repeated for both halves
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = (emb.cos() * 1.0).to(q.dtype), (emb.sin() * 1.0).to(q.dtype)
    return q * cos + rotate_half(q) * sin


def _rotary_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    b, h, t, d = 2, 2, 4, 8
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    return torch.randn(b, h, t, d).to(dtype), torch.arange(t).float(), inv_freq


def _single(checked) -> tuple[str, ...]:
    """The computed ops of the one cluster; no barrier is left."""
    (c,) = checked.analysis.clusters
    g = checked.analysis.graph
    assert not find_barriers(g, checked.analysis.clusters)
    assert sum(g[n].kind is OpKind.CONCAT for n in c.nodes) >= 1
    return tuple(g[n].op for n in c.nodes if g[n].kind is not OpKind.VIEW)


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_repeat_of_a_computed_value(tmp_path, capture):
    torch.manual_seed(0)
    checked = check_model(Lambda(computed, 1), (torch.randn(2, 3, 4),), tmp_path,
                          n_clusters=1, capture=capture)
    # `x * 3` is computed once per piece: the second piece from its own copy
    assert _single(checked) == ("mul", "mul", "cat", "cos", "mul")
    (c,) = checked.analysis.clusters
    assert len(c.inputs) == 1 and not checked.analysis.rejections


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_repeat_of_an_input(tmp_path, capture):
    torch.manual_seed(0)
    checked = check_model(Lambda(given, 1), (torch.randn(2, 3, 4),), tmp_path,
                          n_clusters=1, capture=capture)
    assert _single(checked) == ("cat", "cos", "mul")
    (c,) = checked.analysis.clusters
    assert len(c.inputs) == 1, c.inputs  # passed once, loaded once per piece
    # the second load: at the coordinate less the first piece's end, past that end
    src = checked.kernels[0].source
    assert src.count("tl.load(") == 2
    assert "(cols - cat0_end0)), mask=mask & (cols >= cat0_end0)" in src


def test_repeat_around_another_operand(tmp_path):
    torch.manual_seed(0)
    checked = check_model(Lambda(three, 2), (torch.randn(2, 3, 4), torch.randn(2, 3, 2)),
                          tmp_path, n_clusters=1)
    assert _single(checked) == ("mul", "mul", "cat", "sin", "add")


def test_repeat_along_another_dim(tmp_path):
    torch.manual_seed(0)
    checked = check_model(Lambda(along_rows, 1), (torch.randn(2, 3, 4),), tmp_path,
                          n_clusters=1)
    assert _single(checked) == ("exp", "exp", "cat", "mul")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("capture", ["fx", "export"])
def test_rotary_embedding_with_computed_angles(tmp_path, dtype, capture):
    torch.manual_seed(0)
    checked = check_model(Lambda(rotary, 3), _rotary_inputs(dtype), tmp_path, n_clusters=1,
                          capture=capture)
    ops = _single(checked)
    assert ops.count("cat") == 2 and ops.count("neg") == 1, ops
    assert not checked.analysis.rejections


def test_repeat_kernels_compile_for_sm90(tmp_path):
    # The interpreter accepts code the compiler rejects: the repeated input's second load,
    # the recomputed piece, and the rotary kernel in fp32 and fp16.
    cases = [("computed", Lambda(computed, 1), (torch.randn(2, 3, 4),)),
             ("given", Lambda(given, 1), (torch.randn(2, 3, 4),)),
             ("rows", Lambda(along_rows, 1), (torch.randn(2, 3, 4),)),
             *((f"rotary-{dt}", Lambda(rotary, 3), _rotary_inputs(dt))
               for dt in (torch.float32, torch.float16))]
    jobs = []
    for name, model, inputs in cases:
        a = analyze(model, *inputs)
        (cluster,) = a.clusters
        args = cluster_inputs(a, cluster, capture_values(a, *inputs))
        jobs.append((generate(a, cluster), tmp_path / name, args))
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled


ROPE_NET = """\
import torch
from torch import nn


class Net(nn.Module):
    def forward(self, x):
        f = x * 3.0
        return torch.cat((f, f), -1).cos() * 2.0
"""


def test_a_repeated_operand_is_one_value_to_the_edit_and_named_as_written(tmp_path):
    """The alias reading the second `f` is the source's one `f`: `--apply` writes the
    cluster over both lines (it was a pointer, "`f` does not hold what the graph reads"), and
    the ops list names it `alias`, not torch's overload `alias.default`."""
    from apply_checks import apply_net, same_outputs

    path = tmp_path / "net.py"
    path.write_text(ROPE_NET)
    result = apply_net(path, "2,4")
    assert result.exit_code == 0, result.output
    assert "mul → mul → alias → cat → cos → mul" in result.output, result.output
    assert "Applied 1 edit" in result.output, result.output
    assert path.read_text().endswith("        return cluster0(x)\n"), path.read_text()
    same_outputs(tmp_path, path, ROPE_NET, shape=(2, 4))
