"""`torch.cat` inside a cluster: each operand read through its piece of the result's index
map (``ir/views.Piece``), masked loads, and the cat itself a `tl.where` over the coordinate
along the cat dim (codegen/indexing.py, loads.py, lower.py).

Each fusing case runs its kernel under the interpreter against the eager subgraph; each
refusal is checked for the barrier it leaves and the reason it names. Shapes stay tiny.
"""

import pytest
import torch
from codegen_harness import Lambda, check_model, on_device

from fusion_core.analysis.barriers import find_barriers
from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze


def _cats(checked) -> list[str]:
    a = checked.analysis
    return [n for c in a.clusters for n in c.nodes if a.graph[n].kind is OpKind.CONCAT]


def rotary_chunk(m, q, cos, sin):
    x1, x2 = q.chunk(2, dim=-1)
    return q * cos + torch.cat((-x2, x1), dim=-1) * sin


def rotary_slices(m, q, cos, sin):
    h = q.shape[-1] // 2
    return q * cos + torch.cat((-q[..., h:], q[..., :h]), dim=-1) * sin


def rotary_heads(m, qkv, cos, sin):
    # LLaMA's layout: (batch, tokens, heads, dim) read transposed, a tiled kernel
    q = qkv.transpose(1, 2)
    x1, x2 = q.chunk(2, dim=-1)
    return q * cos + torch.cat((-x2, x1), dim=-1) * sin


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("fn", [rotary_chunk, rotary_slices])
def test_rotary_embedding_is_one_kernel(tmp_path, fn, capture):
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 8), torch.randn(3, 8), torch.randn(3, 8))
    checked = check_model(Lambda(fn, 3), inputs, tmp_path, n_clusters=1, capture=capture)
    (c,) = checked.analysis.clusters
    g = checked.analysis.graph
    computed = tuple(g[n].op for n in c.nodes if g[n].kind is not OpKind.VIEW)
    assert computed == ("mul", "neg", "cat", "mul", "add"), c.ops
    if fn is rotary_slices:  # the slices of `q` are read through their maps: q is passed once
        assert c.inputs == ("a", "b", "c"), c.inputs
        assert [g[n].op for n in c.nodes if g[n].kind is OpKind.VIEW] == [
            "getitem" if capture == "fx" else "slice"] * 2
    assert len(_cats(checked)) == 1 and c.outputs == (c.nodes[-1],)  # the cat is not written
    assert not find_barriers(checked.analysis.graph, checked.analysis.clusters)
    # the second half is read at coordinate - 4 where the coordinate is 4 or more, masked
    assert ">= 4), other=0" in checked.kernels[0].source


def test_rotary_slices_read_in_the_kernel_run_at_other_tokens_not_another_head_dim(tmp_path):
    # The halves `q[..., h:]`, `q[..., :h]` are read from q through narrows of the last dim:
    # any batch and token count runs; another head dim, where h differs, is refused by name.
    a = analyze(Lambda(rotary_slices, 3), torch.randn(2, 3, 8), torch.randn(3, 8),
                torch.randn(3, 8))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = on_device(load_kernel(path).cluster0)
    q, cos, sin = torch.randn(5, 7, 8), torch.randn(7, 8), torch.randn(7, 8)
    torch.testing.assert_close(launch(q, cos, sin), rotary_slices(None, q, cos, sin))
    with pytest.raises(ValueError, match=r"^cluster0: `a` is 16 long in dim -1; this kernel "
                       "slices it as analysed, where it was 8 long; regenerate it at these "
                       "sizes or keep the original ops$"):
        launch(torch.randn(5, 7, 16), torch.randn(7, 16), torch.randn(7, 16))


def test_rotary_over_transposed_heads_fuses_in_a_tiled_kernel(tmp_path):
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 2, 8), torch.randn(3, 8), torch.randn(3, 8))
    checked = check_model(Lambda(rotary_heads, 3), inputs, tmp_path, n_clusters=1)
    assert len(_cats(checked)) == 1
    assert "(cols - 4)" in checked.kernels[0].source


@pytest.mark.parametrize("dim", [0, 1])
def test_cat_of_two_computed_values(tmp_path, dim):
    torch.manual_seed(0)
    a = torch.randn(2, 3, 8)
    b = torch.randn(3, 3, 8) if dim == 0 else torch.randn(2, 5, 8)
    fn = lambda m, a, b: torch.sigmoid(torch.cat((a * 2.0, b + 1.0), dim=dim)) * 3.0  # noqa: E731
    checked = check_model(Lambda(fn, 2), (a, b), tmp_path, n_clusters=1)
    assert checked.analysis.clusters[0].ops == ("mul", "add", "cat", "sigmoid", "mul")
    # the second piece read at the coordinate less where the first ends along the cat dim (a
    # parameter: the launcher reads it from `a`): from the flat index (dim 0), or from the
    # rows of a tile (dim 1, the pieces' rows are shorter)
    shift = "(offs - cat0_end0 * span1)" if dim == 0 else "(rows - cat0_end0)"
    assert shift in checked.kernels[0].source


def test_cat_of_three_unequal_pieces_with_a_broadcast_operand(tmp_path):
    torch.manual_seed(0)
    a, b, c = torch.randn(2, 3, 2), torch.randn(2, 3, 5), torch.randn(1, 3, 1)
    w = torch.randn(8)

    def fn(m, a, b, c):
        # `c` broadcast over the batch inside its branch; the cat result scaled by a row vector
        return torch.cat((a.exp(), b * 2.0, c.expand(2, 3, 1) - 1.0), dim=-1) * m.w

    checked = check_model(Lambda(fn, 3, w=w), (a, b, c), tmp_path, n_clusters=1)
    assert len(_cats(checked)) == 1
    source = checked.kernels[0].source
    assert "(cols - cat0_end0)" in source and "(cols - cat0_end1)" in source


@pytest.mark.parametrize("s_shape, dim, b_shape", [
    ((2, 3, 1), -1, (2, 3, 5)), ((1,), -1, (2, 3, 5)), ((2, 1, 4), 1, (2, 5, 4))],
    ids=["size-1-along-the-cat-dim", "one-element", "middle-dim"])
def test_an_operand_broadcast_along_the_cat_dim_inside_a_branch(tmp_path, s_shape, dim,
                                                                b_shape):
    # `s` is one element along the cat dim while its branch `a * s` is 4 long there: every
    # coordinate of the piece reads that element (once the kernel read `s` through the
    # piece's mask and stride: max abs err 6.16).
    torch.manual_seed(0)
    a, s, b = torch.randn(2, 3, 4), torch.randn(s_shape), torch.randn(b_shape)
    fn = lambda m, a, s, b: torch.cat((a * s, b + 1.0), dim) * 2.0  # noqa: E731
    checked = check_model(Lambda(fn, 3), (a, s, b), tmp_path, n_clusters=1)
    assert len(_cats(checked)) == 1
    # `a * s` is in the kernel (it was once left out: "`b` is broadcast along the cat dim of
    # `mul` before a reshape", where there is no reshape)
    assert checked.analysis.clusters[0].ops == ("mul", "add", "cat", "mul")


def test_an_operand_broadcast_before_a_reshape_in_a_branch(tmp_path):
    # `s` is one element along the cat dim before the branch's reshape: made full size first
    # (stride 0), it reads through the piece like `a` (once refused as broadcast along the
    # cat dim: the check read the operand's shape at the domain's dim).
    def fn(m, a, b):
        return torch.cat(((a * m.s).reshape(2, 3, 4), b), dim=-1) * 2.0

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 2, s=torch.randn(2, 1)),
                          (torch.randn(2, 12), torch.randn(2, 3, 5)), tmp_path, n_clusters=1)
    assert checked.analysis.clusters[0].ops == ("mul", "reshape", "cat", "mul")


def test_a_cat_result_also_written_is_a_cluster_output(tmp_path):
    torch.manual_seed(0)

    def fn(m, a, b):
        h = torch.cat((torch.relu(a), torch.sigmoid(b)), dim=-1)
        return h, torch.tanh(h) * 2.0

    checked = check_model(Lambda(fn, 2), (torch.randn(2, 3, 4), torch.randn(2, 3, 6)),
                          tmp_path, n_clusters=1)
    (c,) = checked.analysis.clusters
    cat = _cats(checked)[0]
    assert cat in c.outputs and len(c.outputs) == 2


def _softmax_of_cat(m, a, b):
    return torch.softmax(torch.cat((a * 2.0, b * 3.0), dim=-1), dim=-1)


def _softmax_of_batch_cat(m, a, b):  # the cat along the rows: the coordinate is per row
    return torch.softmax(torch.cat((a * 2.0, b * 3.0), dim=0), dim=-1)


def _sum_of_middle_cat(m, a, b):
    return torch.cat((a.exp(), b * 2.0), dim=1).sum(-1)


def _layer_norm_of_cat(m, a, b):
    return torch.nn.functional.layer_norm(torch.cat((a.exp(), b), dim=-1), (9,)) * 2.0


@pytest.mark.parametrize("looped", [False, True])
@pytest.mark.parametrize("fn, shapes", [
    (_softmax_of_cat, ((2, 3, 4), (2, 3, 5))), (_softmax_of_batch_cat, ((2, 3, 4), (1, 3, 4))),
    (_sum_of_middle_cat, ((2, 3, 4), (2, 2, 4))), (_layer_norm_of_cat, ((2, 3, 4), (2, 3, 5))),
    (_softmax_of_cat, ((2, 70), (2, 33)))])  # rows wide enough for aligned bodies when looped
def test_a_reduction_reads_the_cat_in_one_kernel(tmp_path, fn, shapes, looped):
    torch.manual_seed(0)
    inputs = tuple(torch.randn(*s) for s in shapes)
    checked = check_model(Lambda(fn, 2), inputs, tmp_path, n_clusters=1, looped=looped)
    assert len(_cats(checked)) == 1


def test_a_looped_rows_last_pass_lets_a_pieces_lines_go_first(tmp_path):
    # The L2 hint follows the row mask, not the piece's bounds joined to it: the last pass
    # over a looped row reads each piece with `evict_first`, as any other input's.
    torch.manual_seed(0)
    inputs = (torch.randn(2, 70), torch.randn(2, 33))
    checked = check_model(Lambda(_softmax_of_cat, 2), inputs, tmp_path, n_clusters=1,
                          looped=True)
    piece_loads = [line for line in checked.kernels[0].source.splitlines()
                   if "tl.load(" in line and "other=0" in line]
    assert piece_loads and any('eviction_policy="evict_first"' in line for line in piece_loads)


def test_a_reduction_in_a_cat_branch_is_left_out_and_says_why():
    def fn(m, a, b):
        return torch.cat((torch.softmax(a * 2.0, -1), b.exp()), dim=-1) * 2.0

    a = analyze(Lambda(fn, 2), torch.randn(2, 3, 4), torch.randn(2, 3, 5))
    assert [c.ops for c in a.clusters] == [("mul", "softmax"), ("exp", "cat", "mul")]
    reasons = [r.reason for r in a.rejections]
    assert any("`softmax` (" in r and "reduces one operand of `cat` (" in r
               and "a kernel reduces rows of the cat's whole result" in r for r in reasons), \
        reasons


def test_a_cat_along_a_dim_sized_at_run_time_stays_a_barrier_that_says_why():
    def fn(m, a, b):
        n, t = a.shape[0], a.shape[1]
        h = (a * 2.0).reshape(n, t * 2, -1)
        return torch.cat((h, b * 3.0), dim=1) + 1.0

    a = analyze(Lambda(fn, 2), torch.randn(2, 3, 4), torch.randn(2, 5, 2), capture="fx")
    (b,) = find_barriers(a.graph, a.clusters)
    assert b.target == "torch.cat"
    text = b.describe(a.graph)
    assert "concatenates along dim 1 values sized at run time there (by `reshape` (" in text
    assert "a kernel fixes each piece's size" in text


def test_a_run_time_size_behind_a_pointwise_op_still_keeps_the_cat_a_barrier():
    # `* 2.0` after the reshape once hid the size from the check: the cat fused, and the
    # kernel refused every other token count at run time.
    def fn(m, a, b):
        n, t = a.shape[0], a.shape[1]
        h = a.reshape(n, t * 2, -1) * 2.0
        return torch.cat((h, b * 3.0), dim=1) + 1.0

    a = analyze(Lambda(fn, 2), torch.randn(2, 3, 4), torch.randn(2, 5, 2), capture="fx")
    (b,) = find_barriers(a.graph, a.clusters)
    assert b.target == "torch.cat"
    assert "values sized at run time there (by `reshape` (" in b.describe(a.graph)


@pytest.mark.parametrize("fn, why", [
    # a cat of a cat: the inner one is read through the outer one's piece
    (lambda m, a, b: torch.cat((torch.cat((a, b), -1) * 2.0, b.exp()), -1) + 1.0,
     "is read through another cat's piece in the group")])
    # (group_norm's channel groups over a cat: tests/test_codegen_cat_norm.py)
def test_a_cat_read_through_other_steps_is_refused_by_name(fn, why):
    a = analyze(Lambda(fn, 2), torch.randn(2, 4, 3), torch.randn(2, 4, 3))
    assert any(why in r.reason for r in a.rejections), [r.reason for r in a.rejections]
