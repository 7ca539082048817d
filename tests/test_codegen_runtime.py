"""The launcher's runtime helpers, tested directly (each generated file holds a copy)."""

import random

import pytest
import torch

from fusion_core.codegen import runtime
from fusion_core.codegen.launcher import arg_names


@pytest.fixture
def rank3(monkeypatch):
    monkeypatch.setattr(runtime, "RANK", 3)
    monkeypatch.setattr(runtime, "NAME", "clusterX")
    monkeypatch.setattr(runtime, "INT64_INDEX", False)


def test_iteration_shape_pads_leading_dims_and_refuses_extra_ones(rank3):
    assert runtime._iteration_shape((4, 5), (5,)) == ((1, 4, 5), 1)
    assert runtime._iteration_shape((2, 4, 5), (1, 5)) == ((2, 4, 5), 0)
    with pytest.raises(ValueError, match="clusterX: inputs broadcast to .* 3-d shapes"):
        runtime._iteration_shape((2, 2, 4, 5))


def test_spans_are_suffix_products_and_32_bit_overflow_is_named(rank3, monkeypatch):
    assert runtime._spans((2, 3, 4)) == [24, 12, 4, 1]
    with pytest.raises(ValueError, match="overflow this kernel's 32-bit index"):
        runtime._spans((2**16, 2**16, 1))
    monkeypatch.setattr(runtime, "INT64_INDEX", True)
    assert runtime._spans((2**16, 2**16, 1))[0] == 2**32


def test_powers_of_two_names_every_bad_size():
    runtime._powers_of_two(BLOCK=1024, NUM_WARPS=4)
    with pytest.raises(ValueError, match=r"BLOCK = 1000, NUM_WARPS = 0"):
        runtime._powers_of_two(BLOCK=1000, NUM_WARPS=0, MAX_ROWS=16)


def test_multiple_of_is_the_largest_power_of_two_up_to_16_dividing_the_size():
    assert [runtime._multiple_of(n) for n in (3001000, 2994998, 2997999, 48, 0)] == [
        8, 2, 1, 16, 16]


def test_dense_strides_follow_the_memory_order():
    assert runtime._dense_strides((2, 3, 4), (0, 1, 2)) == (12, 4, 1)
    assert runtime._dense_strides((2, 3, 4), (0, 2, 1)) == (12, 1, 3)
    # fewer dims than analysed keep the analysed order of the dims they have
    assert runtime._dense_strides((3, 4), (0, 2, 1)) == (1, 3)
    relaid = runtime._relaid(torch.arange(12.0).reshape(3, 4), (1, 0), torch.device("cpu"))
    assert relaid.stride() == (1, 3) and torch.equal(relaid, torch.arange(12.0).reshape(3, 4))


def test_layout_reads_in_place_copies_or_refuses(rank3):
    shape = (2, 3, 4)
    contiguous = ((0, 3, True),)
    t = torch.randn(2, 3, 4)
    assert runtime._layout(t, shape, contiguous, (0, 1, 2)) == (False, [])
    # a transposed view does not fit one unit-stride group: copied into the analysed layout
    assert runtime._layout(t.transpose(1, 2).contiguous().transpose(1, 2), shape,
                           contiguous, (0, 1, 2)) == (True, [])
    # a strided group reports its stride; a row vector broadcasts over the other dims
    per_dim = ((0, 1, False), (1, 2, False), (2, 3, True))
    assert runtime._layout(t.transpose(0, 1).contiguous().transpose(0, 1), shape, per_dim,
                           (1, 0, 2)) == (False, [4, 8])
    assert runtime._layout(torch.randn(4), shape, ((2, 3, True),), (0,)) == (False, [])
    # varying along a dim the kernel broadcasts it over: refused with the layout named
    with pytest.raises(ValueError, match=r"clusterX: an input of shape \(3, 4\)"):
        runtime._layout(torch.randn(3, 4), shape, ((2, 3, True),), (0, 1))


def test_helpers_source_is_what_generated_files_hold():
    text = runtime.source()
    for fn in runtime.HELPERS:
        assert f"def {fn.__name__}(" in text
    scope = {"torch": torch, "NAME": "k", "RANK": 2, "INT64_INDEX": False}
    exec(compile(text, "<runtime>", "exec"), scope)  # noqa: S102 - our own module's text
    assert scope["_dense_strides"]((2, 3), (1, 0)) == (1, 2)


class _Traced(int):
    """Not exactly an int, as a size torch.compile traces (a SymInt) is not: the helpers take
    their doubling path, which Dynamo keeps symbolic (guards on ranges)."""


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 1000, 1024, 1025, 3001, 2**20 + 1, 2**30 - 1])
def test_the_traced_path_of_the_shape_bucket_and_the_divisor_gives_the_same(n):
    from fusion_core.codegen import tuning

    assert tuning._pow2(_Traced(n)) == tuning._pow2(n)
    if n >= 1:
        assert runtime._divisor(_Traced(n)) == runtime._divisor(n)


def test_arrival_counters_off_the_gpu_are_fresh_zeros(monkeypatch):
    """Off the GPU nothing is kept: an interrupted interpreted launch leaves nothing behind."""
    monkeypatch.setattr(runtime, "ARRIVALS", {})
    cpu = torch.device("cpu")
    first = runtime._arrivals(6, cpu)
    assert first.dtype == torch.int32 and first.tolist() == [0] * 6
    assert runtime._arrivals(6, cpu) is not first and not runtime.ARRIVALS


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="streams and graphs need CUDA")
def test_arrival_counters_are_kept_per_stream_and_a_graph_takes_its_own(monkeypatch):
    """Eager launches on a stream share one zeroed set (grown for more rows), another stream
    gets another; a capture takes the spare made before it, kept, and the next capture
    another (made by the eager launch between them), never a stream's set."""
    monkeypatch.setattr(runtime, "ARRIVALS", {})
    gpu = torch.device("cuda", torch.cuda.current_device())
    here = runtime._arrivals(6, gpu)
    assert here.tolist() == [0] * 6 and runtime._arrivals(4, gpu) is here
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        assert runtime._arrivals(6, gpu) is not here
    grown = runtime._arrivals(10, gpu)
    assert grown is not here and grown.tolist() == [0] * 10
    taken = []
    for _ in range(2):
        runtime._arrivals(10, gpu)  # eager, as a warm-up before a capture: a spare made
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            taken.append(runtime._arrivals(10, gpu))
    assert taken[0] is not taken[1] and all(t is not grown for t in taken)
    assert [t.tolist() for t in taken] == [[0] * 10] * 2
    kept = [v for k, v in runtime.ARRIVALS.items() if k[1] == "captured"]
    assert all(any(t is v for v in kept) for t in taken)


def test_inputs_named_like_runtime_globals_or_helpers_get_a_prefix():
    class _Arg:
        def __init__(self, value):
            self.value = value

    class _Plan:
        inputs = tuple(_Arg(v) for v in ("RANK", "_layout", "x", "in0"))

    assert arg_names(_Plan()) == ["in_RANK", "in__layout", "x", "in_in0"]


def test_index_terms_render_and_know_their_axes():
    from fusion_core.codegen.signature import Family, KernelParams
    from fusion_core.codegen.writer import COLS, ROWS, Index, Term, zero_term

    params = KernelParams()
    term = Term(ROWS, modulo=params.span(Family.RSPAN, 1), stride=params.stride("in", 0, 0))
    idx = Index((term, Term(COLS)))
    assert str(idx) == "(rows % rspan1) * in0_stride0 + cols"
    assert idx.offset("in_ptr0") == "in_ptr0 + ((rows % rspan1) * in0_stride0 + cols)"
    assert idx.varies("rows") and idx.varies("cols")
    assert Index((Term(COLS),)).offset("p") == "p + cols"
    padded = Index((Term(COLS),)).plus(before=(zero_term(ROWS),))
    assert str(padded) == "rows * 0 + cols"
    assert padded.shaped("rows") and not padded.varies("rows")
    assert params.names == ["rspan1", "in0_stride0"]
    assert [(p.family, p.owner, p.launch) for p in params] == [
        (Family.RSPAN, None, "rspan[1]"), (Family.STRIDE, ("in", 0), "in0_strides[0]")]


def _umulhi(a: int, b: int) -> int:
    return (a * b) >> 32


@pytest.mark.parametrize("d", [1, 2, 3, 7, 37, 768, 3001, 4096, 50257, 65535, 65537,
                               (1 << 20) + 1, 1_000_003, (1 << 29) + 1, (1 << 30) - 1,
                               1 << 30])
def test_a_spans_multiplier_and_shift_divide_every_index_under_2_to_the_30_exactly(d):
    """x // d as the kernel's `_index_div` computes it (umulhi(4x, m) >> l on unsigned 32-bit
    numbers), for indices at the ends of the range and around multiples of d."""
    m, shift = runtime._divisor(d)
    assert (1 << 30) <= m < (1 << 31) and 0 <= shift <= 30  # a positive int32 and a shift
    top = 1 << 30
    xs = {0, 1, d - 1, d, d + 1, top - 1, top - 2, top // 2}
    for q in (1, 2, 3, top // d - 1, top // d):
        xs |= {q * d - 1, q * d, q * d + 1}
    xs |= set(random.Random(d).sample(range(top), 2000))
    for x in sorted(v for v in xs if 0 <= v < top):
        assert _umulhi(4 * x, m) >> shift == x // d, x
