"""ir/views.py and ir/view_recognition.py: each view op is recognised as index steps that
reproduce it exactly, on contiguous and strided inputs, and the invertible ones map back."""

import pytest
import torch
from codegen_harness import Lambda

from fusion_core.ir.graph import OpKind
from fusion_core.ir.view_recognition import describe
from fusion_core.ir.views import (
    INDEX_STEPS,
    Merge,
    Narrow,
    Permute,
    Reshape,
    Split,
    Squeeze,
    Strided,
    Unflatten,
    Unsqueeze,
    ViewError,
    apply,
    inverse,
    plain,
    shape_after,
)
from fusion_core.pipeline import analyze

SHAPE = (3, 4, 5)

CASES = [
    ("permute", lambda t: t.permute(2, 0, 1), Permute),
    ("transpose", lambda t: t.transpose(0, 2), Permute),
    ("movedim", lambda t: t.movedim(0, -1), Permute),
    ("view", lambda t: t.view(12, 5), Merge),
    ("flatten", lambda t: t.flatten(1), Merge),
    ("unflatten", lambda t: t.unflatten(1, (2, 2)), Unflatten),
    ("reshape", lambda t: t.reshape(4, 15), Reshape),
    ("unsqueeze", lambda t: t.unsqueeze(1), Unsqueeze),
    ("getitem", lambda t: t[:, 1:4:2], Strided),
    ("select", lambda t: t.select(1, 2), Strided),
    ("narrow", lambda t: t.narrow(2, 1, 3), Strided),
    ("expand", lambda t: t[:, :1].expand(3, 4, 5), Strided),
    ("as_strided", lambda t: t.as_strided((3, 2), (20, 2), 1), Strided),
]


@pytest.mark.parametrize("name, view, kind", CASES, ids=[c[0] for c in CASES])
def test_recognised_steps_reproduce_the_view(name, view, kind):
    steps = describe(name, view, SHAPE, tuple(view(torch.empty(SHAPE, device="meta")).shape))
    assert steps is not None and len(steps) == 1 and isinstance(steps[0], kind)
    # Replayed on real data, contiguous and strided (every other element of a wider buffer),
    # the elements agree. as_strided addresses its operand's storage: contiguous only.
    bases = [torch.randn(SHAPE)]
    if name != "as_strided":
        bases.append(torch.randn(3, 4, 10)[:, :, ::2])
    for t in bases:
        torch.testing.assert_close(apply(steps, t), view(t), rtol=0, atol=0)


def test_squeeze_of_a_size_one_dim_is_a_squeeze_step():
    steps = describe("squeeze", lambda t: t.squeeze(1), (3, 1, 5), (3, 5))
    assert steps == (Squeeze((1,)),)


def test_invertible_steps_map_back():
    x = torch.randn(SHAPE)
    for steps in ((Permute((2, 0, 1)),), (Merge(0, 2),), (Unsqueeze((0, 3)),),
                  (Permute((2, 0, 1)), Merge(1, 3))):
        back = inverse(steps, SHAPE)
        assert back is not None
        torch.testing.assert_close(apply(back, apply(steps, x)), x, rtol=0, atol=0)
    assert inverse((Strided((3, 2), ((0, 1), (1, 1)), (0, 0, 0)),), SHAPE) is None


def test_positions_from_the_end_hold_for_any_leading_dims():
    """A reduction's dims put back count from the end: the same step serves a value with
    fewer leading dims (a launcher called on 2-d inputs after a 3-d analysis)."""
    step = Unsqueeze((-3, -1))
    for shape in ((2, 3, 4), (3, 4)):
        x = torch.randn(shape)
        want = x.unsqueeze(-2).unsqueeze(-1)  # (..., 3, 1, 4, 1)
        assert torch.equal(apply((step,), x), want)
        assert step.shape(shape) == tuple(want.shape)
        assert torch.equal(eval(step.source("x"), {"x": x}), want)  # noqa: S307
        assert torch.equal(apply(inverse((step,), shape), want), x)
        assert Squeeze((-3, -1)).shape(tuple(want.shape)) == shape


def test_split_gives_each_group_its_channels_and_merges_back():
    """group_norm's channel split: (N, C, H) -> (N, G, C/G, H), a view of any strides; the
    launcher's text does the same; a size-1 dim stays broadcast along both parts."""
    step = Split(1, 2)
    x = torch.randn(2, 6, 10)[:, :, ::2]  # strided
    v = apply((step,), x)
    assert v.shape == (2, 2, 3, 5) == shape_after((step,), (2, 6, 5))
    assert v.data_ptr() == x.data_ptr()
    torch.testing.assert_close(v[:, 1, 2], x[:, 5], rtol=0, atol=0)
    assert torch.equal(eval(step.source("x"), {"x": x}), v)  # noqa: S307 - our own text
    torch.testing.assert_close(apply(inverse((step,), (2, 6, 5)), v), x, rtol=0, atol=0)
    one = torch.randn(2, 1, 5)
    assert apply((step,), one).shape == (2, 1, 1, 5) == shape_after((step,), (2, 1, 5))
    assert plain((step,), (2, 1, 5)) == (Unsqueeze((1,)),)  # what a launcher writes there
    assert plain((step,), (2, 6, 5)) == (step,)
    with pytest.raises(ViewError, match="a split of 5 channels into 2 groups"):
        apply((step,), torch.randn(2, 5, 3))


def test_a_reshape_no_strides_express_raises_a_view_error():
    with pytest.raises(ViewError, match="a reshape of shape"):
        apply((Reshape((60,)),), torch.randn(3, 20).t())


def test_views_with_several_results_get_no_steps():
    assert describe("split", lambda t: t.split(2), SHAPE, (2, 4, 5)) is None


def test_as_strided_of_a_strided_operand_gets_no_steps():
    """Its result depends on the operand's memory layout, which a kernel does not keep."""
    view = lambda t: t.as_strided((3, 2), (20, 2), 1)  # noqa: E731
    assert describe("as_strided", view, SHAPE, (3, 2), contiguous=False) is None


def test_normalize_stores_the_steps_in_view_nodes():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 2.0).permute(0, 2, 1).reshape(3, 20) + 1.0

    a = analyze(M(), torch.randn(SHAPE))
    views = {n.op: n.param(INDEX_STEPS) for n in a.graph.nodes if n.kind is OpKind.VIEW}
    assert views == {"permute": (Permute((0, 2, 1)),), "reshape": (Merge(1, 3),)}


def test_a_merge_or_split_of_dims_leaves_the_batch_free():
    """`flatten(1)` and `unflatten` recognised at batch 1 hold at batch 2: the steps name
    dims, not the analysed shape, and map back to each other."""
    merge = describe("flatten", lambda t: t.flatten(1), (1, 4, 3, 5), (1, 60))
    split = describe("view", lambda t: t.view(1, 4, 15), (1, 60), (1, 4, 15))
    assert merge == (Merge(1, 4),) and split == (Unflatten(1, (4, 15)),)
    x = torch.randn(2, 4, 3, 5)
    assert torch.equal(apply(merge, x), x.flatten(1))
    assert torch.equal(eval(merge[0].source("x"), {"x": x}), x.flatten(1))  # noqa: S307
    y = x.flatten(1)
    assert torch.equal(apply(split, y), y.view(2, 4, 15))
    assert torch.equal(eval(split[0].source("y"), {"y": y}), y.view(2, 4, 15))  # noqa: S307
    assert inverse(merge, (1, 4, 3, 5)) == (Unflatten(1, (4, 3, 5)),)
    assert torch.equal(apply(inverse(merge, (2, 4, 3, 5)), y), x)


def _slice_steps(fn, *inputs) -> dict[str, tuple]:
    """The steps of every slice `fn`'s graph holds (by graph name)."""
    a = analyze(Lambda(fn, len(inputs)), *inputs, capture="fx")
    return {n.name: (n.param(INDEX_STEPS), n.refs) for n in a.graph.nodes
            if n.kind is OpKind.VIEW and n.op in ("getitem", "narrow", "slice")}


def test_a_slice_of_one_dim_is_a_narrow_free_in_the_others():
    # `x[..., 2:]` and `x.narrow`: any size elsewhere; `x[:2, :4]`, though dim 0 is 2 long
    # here, slices it too: a selection of the analysed shape.
    steps = _slice_steps(lambda m, x: (x[..., 2:] * 2.0, x.narrow(1, 1, 2) * 2.0,
                                    x[:3, :2] * 2.0), torch.randn(SHAPE))
    found = [s for s, _ in steps.values()]
    assert found == [(Narrow(-1, 2, 3, 5),), (Narrow(-2, 1, 2, 4),),
                     (Strided((3, 2, 5), ((0, 1), (1, 1), (2, 1)), (0, 0, 0)),)], found
    x = torch.randn(7, 4, 5)
    assert torch.equal(apply((Narrow(-1, 2, 3, 5),), x), x[..., 2:])
    with pytest.raises(ViewError, match="where dim -1 is 5 long, of a tensor 6 long"):
        apply((Narrow(-1, 2, 3, 5),), torch.randn(3, 4, 6))


def test_slice_bounds_of_the_source_own_sizes_are_no_operand():
    # `h = x.shape[-1] // 2` bounds `x[..., h:]` (rotary's rotate_half): steps, no data edge.
    # A bound of another tensor's size (`self.cos[:T]`, T from the input) keeps no steps.
    own = _slice_steps(lambda m, x: x[..., x.shape[-1] // 2:] * 2.0, torch.randn(SHAPE))
    assert list(own.values()) == [((Narrow(-1, 2, 3, 5),), ("a",))], own
    other = _slice_steps(lambda m, x, c: x * c[:x.shape[1]], torch.randn(SHAPE),
                         torch.randn(9, 5))
    ((steps, refs),) = other.values()
    assert steps is None and len(refs) == 2
