"""Reductions over any set of dims: the reduction's own order (view steps from
``ir/iteration.py``), index terms over several column dims, and end-to-end runs under the
interpreter (or the GPU) against eager."""

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import Lambda, check_model, ttgir_load_layouts_of

from fusion_core.codegen import Tuning, runtime
from fusion_core.codegen.loads import index_of
from fusion_core.codegen.lower import plan
from fusion_core.codegen.signature import Family, KernelParams, fast_name
from fusion_core.ir.graph import OpKind
from fusion_core.ir.iteration import reduction_order
from fusion_core.ir.reductions import RULES
from fusion_core.ir.views import Permute, Split, Unsqueeze, apply, shape_after
from fusion_core.pipeline import analyze

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

X4 = (2, 6, 3, 5)
CASES = {
    # name: (function of (module, x), input shape, reduction op in the cluster)
    "mean over (H, W), keepdim": (lambda m, x: (x * 2.0).mean((2, 3), keepdim=True) + 1.0,
                                  X4, "mean"),
    "mean over (H, W)": (lambda m, x: torch.sigmoid((x * 2.0).mean(dim=(-1, -2))), X4, "mean"),
    "sum over channels": (lambda m, x: (x - 1.0).sum(1), X4, "sum"),
    "softmax over channels": (lambda m, x: torch.softmax(x * 2.0, dim=1), X4, "softmax"),
    "log_softmax over dim 0": (lambda m, x: F.log_softmax(x * 2.0, dim=0), (4, 3, 5),
                               "log_softmax"),
    "batch statistics": (lambda m, x: (x * 2.0).mean((0, 2, 3)), X4, "mean"),
    "batch variance": (lambda m, x: (x + 1.0).var((0, 2, 3), unbiased=False), X4, "var"),
    "std with correction": (lambda m, x: (x * 2.0).std(dim=(1, 3), keepdim=True,
                                                       correction=2) * 3.0, X4, "std"),
    "var of one dim": (lambda m, x: torch.var(x * 2.0, 1), (3, 7, 4), "var"),
    "amax over dim 0": (lambda m, x: (x * 2.0).amax(0), (3, 4, 5), "amax"),
    "amin over (0, 2), keepdim": (lambda m, x: (x * 2.0).amin((0, 2), keepdim=True) - x,
                                  (3, 4, 5), "amin"),
    "cumsum over dim 1": (lambda m, x: torch.cumsum(x * 2.0, 1), (3, 5, 4), "cumsum"),
    "squeeze-excite pool": (lambda m, x: F.adaptive_avg_pool2d(F.silu(x), (1, 1)), X4,
                            "adaptive_avg_pool2d"),
    "group_norm, affine": (lambda m, x: F.silu(F.group_norm(x * 1.5, 3, m.w, m.b)), X4,
                           "group_norm"),
    "group_norm of a 3-d input": (lambda m, x: F.group_norm(x + 1.0, 2, eps=1e-3) * 2.0,
                                  (2, 4, 7), "group_norm"),
}
PARAMS = {"w": torch.randn(6), "b": torch.randn(6)}
LOOP_8 = Tuning(loop_block=8, max_loop_block=8)  # a looped row takes several column blocks


@pytest.mark.parametrize("looped", [False, True], ids=["one block", "column loop"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_reduction_over_other_dims_matches_eager(tmp_path, name, looped):
    fn, shape, op = CASES[name]
    torch.manual_seed(0)
    checked = check_model(Lambda(fn, arity=1, **PARAMS), (torch.randn(*shape),), tmp_path,
                          n_clusters=1, looped=looped, tuning=LOOP_8)
    (cluster,) = checked.analysis.clusters
    (kernel,) = checked.kernels
    assert op in cluster.ops and kernel.skeleton == "reduction"
    assert kernel.looped == looped


OTHER_INPUTS = {
    # name: (function, input): dtypes, layouts and a reduction over every dim
    "integer sum over dim 0": (lambda m, a: (a + 1).sum(0),
                               lambda: torch.randint(-5, 5, (3, 4, 5))),
    "bf16 variance over (1, 2)": (lambda m, x: (x * 2).var((1, 2)),
                                  lambda: torch.randn(3, 4, 5, dtype=torch.bfloat16)),
    "sum of every element": (lambda m, x: (x * 2).sum(), lambda: torch.randn(3, 4, 5)),
    "mean of every element, keepdim": (lambda m, x: (x * 2).mean((0, 1, 2), keepdim=True) + x,
                                       lambda: torch.randn(3, 4, 5)),
    "channel softmax of a channels-last input": (
        lambda m, x: torch.softmax(x * 2, 1), lambda: torch.randn(2, 5, 4, 3).permute(0, 3, 1, 2)),
}


@pytest.mark.parametrize("looped", [False, True], ids=["one block", "column loop"])
@pytest.mark.parametrize("name", sorted(OTHER_INPUTS))
def test_reduction_over_other_dims_of_other_inputs_matches_eager(tmp_path, name, looped):
    fn, make = OTHER_INPUTS[name]
    torch.manual_seed(0)
    checked = check_model(Lambda(fn, arity=1), (make(),), tmp_path, n_clusters=1,
                          looped=looped, tuning=LOOP_8)
    assert checked.kernels[0].skeleton == "reduction" and checked.kernels[0].looped == looped


def test_mean_and_variance_over_the_batch_statistics_dims_share_one_kernel(tmp_path):
    def fn(m, x):
        h = x * 2.0
        centered = h - h.mean((0, 2, 3), keepdim=True)
        return centered * torch.rsqrt(h.var((0, 2, 3), keepdim=True, unbiased=False) + 1e-5)

    checked = check_model(Lambda(fn, arity=1), (torch.randn(*X4),), tmp_path, n_clusters=1)
    (cluster,) = checked.analysis.clusters
    assert {"mean", "var"} <= set(cluster.ops)
    assert checked.kernels[0].skeleton == "reduction"


class _BatchStatisticsNorm(torch.nn.Module):
    """A BatchNorm without running statistics: it always normalizes by the batch's own."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(6, track_running_stats=False)
        torch.nn.init.uniform_(self.bn.weight, 0.5, 1.5)
        torch.nn.init.uniform_(self.bn.bias, -0.5, 0.5)

    def forward(self, x):
        return F.relu(self.bn(x * 2.0))


@pytest.mark.parametrize("looped", [False, True], ids=["one block", "column loop"])
def test_batch_norm_on_batch_statistics_is_a_reduction_over_all_but_the_channels(tmp_path,
                                                                                 looped):
    checked = check_model(_BatchStatisticsNorm(), (torch.randn(*X4),), tmp_path, n_clusters=1,
                          looped=looped, tuning=LOOP_8)
    assert checked.analysis.clusters[0].chain == "mul → batch_norm_train → relu"
    p = plan(checked.analysis.graph, checked.analysis.clusters[0])
    assert p.domain == (6, 2, 3, 5) and p.reduced == 3  # rows: channels


def test_batch_norm_updating_running_statistics_stays_opaque():
    g = analyze(Lambda(lambda m, x: F.batch_norm(x * 2.0, m.rm, m.rv, training=True) + 1.0,
                       arity=1, rm=torch.zeros(6), rv=torch.ones(6)), torch.randn(*X4)).graph
    (bn,) = [n for n in g.nodes if n.target == "F.batch_norm"]
    assert bn.kind is OpKind.OPAQUE  # it writes new running statistics: not ours to fuse


def test_the_order_puts_the_reduced_dims_last_in_their_own_order():
    assert reduction_order(RULES["mean"], {"dim": (0, 2, 3)}, X4) == (
        (Permute((1, 0, 2, 3)),), 3)
    assert reduction_order(RULES["softmax"], {"dim": 1}, X4) == ((Permute((0, 2, 3, 1)),), 1)
    assert reduction_order(RULES["sum"], {"dim": -1}, X4) == ((), 1)
    assert reduction_order(RULES["sum"], {"dim": 0}, (7,)) == ((Unsqueeze((0,)),), 1)
    assert reduction_order(RULES["softmax"], {}, X4) is None  # no dim named
    steps, reduced = reduction_order(RULES["group_norm"], {"num_groups": 3}, X4)
    assert (steps, reduced) == ((Split(1, 3),), 3)
    assert shape_after(steps, X4) == (2, 3, 2, 3, 5)
    # a per-channel operand (C, 1, 1), right-aligned: each group gets its C/G channels
    w = apply((Unsqueeze((0,)), *steps), torch.empty_strided((6, 1, 1), (1, 1, 1)))
    assert (tuple(w.shape), w.stride()) == ((1, 3, 2, 1, 1), (6, 2, 1, 1, 1))
    # an operand broadcast over the channels stays broadcast along both parts
    assert apply(steps, torch.empty(2, 1, 3, 5)).shape == (2, 1, 1, 3, 5)


def _index_div(x: torch.Tensor, d: int, m: int, shift: int, fast: bool) -> torch.Tensor:
    """The kernel's `_index_div` on int64 tensors: with `fast`, umulhi(4x, m) >> l in
    unsigned 32 bits (the product split in 16-bit halves of m, to stay within int64)."""
    if not fast:
        return x // d
    a = (x * 4) & 0xFFFFFFFF
    return ((a * (m >> 16) + ((a * (m & 0xFFFF)) >> 16)) >> 16) >> shift


def _index_mod(x: torch.Tensor, d: int, m: int, shift: int, fast: bool) -> torch.Tensor:
    return x - _index_div(x, d, m, shift, fast) * d if fast else x % d


def _offsets(arg, p, idx: str, params: KernelParams) -> torch.Tensor:
    """The offsets an index expression gives for every (row, column) of the plan's domain."""
    n_cols = p.n_cols
    n_rows = math.prod(p.domain) // n_cols
    span = [math.prod(p.domain[k:]) for k in range(p.rank + 1)]
    values = {"rows": torch.arange(n_rows)[:, None], "cols": torch.arange(n_cols)[None, :],
              "n_cols": n_cols, "span": span, "rspan": [s // n_cols for s in span]}
    strides = [s for g in arg.access.groups if not g.unit
               for s in [next(arg.stride[k] for k in reversed(range(g.first, g.last))
                              if p.domain[k] != 1)]]
    values.update({f"{arg.role}{arg.index}_strides": strides})
    scope, span0 = dict(values), span[0]
    for param in params:
        scope[param.name] = eval(param.launch, {"_divisor": runtime._divisor},  # noqa: S307
                                 values)  # our own text; `_divisor`: the launcher's helper
        if param.family == Family.DIVISOR:  # its span's constexpr, as the launcher passes it
            span = param.name[:-2]
            scope[fast_name(span)] = scope[span] % 16 != 0 and scope[span] != 1 and span0 < 2**30
    return eval(idx, {"_index_div": _index_div, "_index_mod": _index_mod}, scope)  # noqa: S307


@pytest.mark.parametrize("name", ["batch statistics", "group_norm, affine",
                                  "softmax over channels", "std with correction"])
def test_index_terms_address_each_element_of_the_kernel_order(name):
    """Every input's offset at (row, col) is where its element of the kernel's order lies."""
    fn, shape, _ = CASES[name]
    analysis = analyze(Lambda(fn, arity=1, **PARAMS), torch.randn(*shape))
    p = plan(analysis.graph, analysis.clusters[0])
    assert any(arg.view for arg in p.inputs)  # a permute or split: not the user's order
    for arg in p.inputs:
        params = KernelParams()
        idx = str(index_of(arg, p, params))
        got = _offsets(arg, p, idx, params).expand(-1, p.n_cols) if idx != "0" else None
        # a buffer laid out with the value's strides, each element holding its own offset
        base = torch.arange(1 + sum((d - 1) * s for d, s in zip(
            arg.value_shape, _value_stride(analysis, arg), strict=True)))
        value = base.as_strided(arg.value_shape, _value_stride(analysis, arg))
        view = apply(arg.view, value) if arg.view else value
        want = view.expand(p.domain).reshape(-1, p.n_cols)
        if got is None:
            assert (want == 0).all()
        else:
            assert torch.equal(got, want), (arg.value, idx)


def _value_stride(analysis, arg) -> tuple[int, ...]:
    return tuple(analysis.graph[arg.value].meta.stride)


def test_group_norm_rows_are_sample_group_pairs_and_columns_three_dims():
    fn, shape, _ = CASES["group_norm, affine"]
    analysis = analyze(Lambda(fn, arity=1, **PARAMS), torch.randn(*shape))
    p = plan(analysis.graph, analysis.clusters[0])
    assert p.domain == (2, 3, 2, 3, 5) and p.reduced == 3 and p.n_cols == 30
    weight = next(a for a in p.inputs if a.value_shape == (6, 1, 1))
    # straddles rows (the group) and columns (the channel in it): a per-element load
    assert str(index_of(weight, p, KernelParams())) == (
        "_index_div((rows % rspan1) * n_cols + cols, span3, span3_m, span3_l, SPAN3_FAST)")


def test_pool_to_another_size_stays_opaque():
    analysis = analyze(Lambda(lambda m, x: F.adaptive_avg_pool2d(F.silu(x), 2) * 2.0,
                              arity=1), torch.randn(*X4))
    for cluster in analysis.clusters:
        assert "adaptive_avg_pool2d" not in cluster.ops


def test_mbconv_example_fuses_the_squeeze_into_the_batch_norm_chain(tmp_path):
    from mbconv_se import MBConv

    torch.manual_seed(0)
    checked = check_model(MBConv().eval(), (torch.randn(2, 16, 8, 8),), tmp_path)
    chains = [c.chain for c in checked.analysis.clusters]
    assert "batch_norm → silu → adaptive_avg_pool2d" in chains, chains
    assert "sigmoid → mul" in chains and "batch_norm → add" in chains


def test_groupnorm_example_fuses_each_norm_with_its_silu(tmp_path):
    from groupnorm_silu import ResBlock

    torch.manual_seed(0)
    checked = check_model(ResBlock().eval(), (torch.randn(2, 32, 8, 8),), tmp_path,
                          n_clusters=2)
    assert [c.chain for c in checked.analysis.clusters] == ["group_norm → silu"] * 2
    assert all(k.skeleton == "reduction" for k in checked.kernels)


STRIDED = [("2,512,32,32", "channel sum", 16),  # 512 columns: one row per program before
           ("2,64,32,32", "channel softmax", 16)]  # 32 before row buckets went by powers of 2
FLAT = [("1000,3001", "ld.global.v4.b32"), ("998,3001", "ld.global.v2.b32")]
LAYOUTS = [*((shape, case) for shape, case, _ in STRIDED), ("2048,64", "row softmax"),
           *((shape, "flat chain") for shape, _ in FLAT), ("64,1000", "row softmax")]


@pytest.fixture(scope="module")
def layouts() -> dict[tuple[str, str], dict]:
    """Each LAYOUTS kernel compiled for sm_90 (`ttgir_load_layouts`), in one process."""
    return dict(zip(LAYOUTS, ttgir_load_layouts_of(LAYOUTS), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("shape, case, rows", STRIDED)
def test_a_reduction_over_strided_channels_loads_along_the_contiguous_rows(shape, case, rows,
                                                                          layouts):
    """Compiled for sm_90 (no GPU needed): the strided input's tile is read fastest along the
    rows, several rows a thread, with many rows per program."""
    found = layouts[shape, case]
    assert found["rows_per_program"] == rows
    (load,) = found["loads"]
    assert load["order"] == [0, 1] and load["sizePerThread"][0] > 1, load


@pytest.mark.slow
def test_a_reduction_over_contiguous_rows_loads_along_the_columns(layouts):
    (load,) = layouts["2048,64", "row softmax"]["loads"]
    assert load["order"] == [1, 0] and load["sizePerThread"][1] > 1, load


@pytest.mark.slow
@pytest.mark.parametrize("shape, loads", FLAT)
def test_a_flat_kernel_vectorizes_its_loads_when_the_size_is_no_multiple_of_16(shape, loads,
                                                                              layouts):
    """3001000 elements (a multiple of 8) and 2994998 (of 2): Triton only marks integer
    arguments divisible by 16, so a plain `offs < n_elements` mask kept every load scalar
    (`ld.global.b32`); written as a multiple of the size's alignment, the loads move as many
    floats at once as that alignment allows."""
    found = layouts[shape, "flat chain"]
    assert found["ptx_loads"] == [loads], found


@pytest.mark.slow
def test_rows_of_1000_columns_load_four_floats_at_once(layouts):
    """1000 is a multiple of 8, not of 16: told so through COLS_ALIGN, Triton vectorizes the
    row loads (they were `ld.global.b32`, one float each, before)."""
    found = layouts["64,1000", "row softmax"]
    assert found["ptx_loads"] == ["ld.global.v4.b32"], found
