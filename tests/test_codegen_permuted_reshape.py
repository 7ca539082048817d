"""Reshapes of permuted values inside a kernel (codegen/regroup_space.py, ir/view_factors.py).

A reshape that merges dims a permute moved apart has no strides; the kernel iterates over
the merged dim split again and reads the source through the permute alone (Inductor's
div/mod of the flat index, done once in the iteration space). Each case runs under the
interpreter against eager; each refusal is checked for the reason it names.
"""

import itertools
import random

import pytest
import torch
from codegen_harness import Lambda, check_model, on_device

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.codegen.lower import dry_run
from fusion_core.ir.graph import OpKind
from fusion_core.ir.view_factors import regrouped, result_factors
from fusion_core.ir.views import (
    Merge,
    Permute,
    Reshape,
    Squeeze,
    Unflatten,
    Unsqueeze,
    ViewError,
    apply,
)
from fusion_core.pipeline import analyze

B, H, T, D = 2, 3, 4, 5


def _heads_merged(m, x, b):
    y = (x * 2.0).permute(0, 2, 1, 3)
    return torch.relu(y).reshape(B, T, H * D) + b


def _attention_out(m, o, r):
    """An attention block's heads merged back, then an elementwise op and the residual."""
    return torch.nn.functional.gelu(o.transpose(1, 2).reshape(B, T, H * D)) + r


def _attention_out_copied(m, o, r):
    """The same merge written as GPT ports often do: eager's copy spelled `.contiguous()`."""
    return o.transpose(1, 2).contiguous().view(B, T, H * D) * 2.0 + r


WIN = 2


def _partition(m, x):
    """Swin's window partition of a computed value, an op on the windows."""
    b, h, w, c = 2, 4, 6, 3
    y = x * 2.0
    win = y.view(b, h // WIN, WIN, w // WIN, WIN, c).permute(0, 1, 3, 2, 4, 5)
    return torch.sigmoid(win.reshape(-1, WIN * WIN, c)) + 1.0


def _reverse(m, windows, shortcut):
    """Swin's window reverse of the attention's windows, then the residual add."""
    b, h, w, c = 2, 4, 6, 3
    x = windows.view(b, h // WIN, w // WIN, WIN, WIN, c).permute(0, 1, 3, 2, 4, 5)
    return shortcut + torch.tanh(x.reshape(b, h, w, c)) * 0.5


CASES = {
    "mul-permute-relu-reshape-add": (_heads_merged, [(B, H, T, D), (H * D,)]),
    "attention-head-merge": (_attention_out, [(B, H, T, D), (B, T, H * D)]),
    "attention-head-merge-contiguous": (_attention_out_copied, [(B, H, T, D), (B, T, H * D)]),
    "swin-window-partition": (_partition, [(2, 4, 6, 3)]),
    "swin-window-reverse": (_reverse, [(12, WIN * WIN, 3), (2, 4, 6, 3)]),
}


def _one_cluster_with_a_reshape(checked) -> None:
    (cluster,) = checked.analysis.clusters
    ops = [checked.analysis.graph[n].op for n in cluster.nodes]
    assert {"reshape", "contiguous"} & set(ops), cluster.chain


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_reshape_of_a_permuted_value_fuses_and_verifies(tmp_path, case):
    fn, shapes = CASES[case]
    torch.manual_seed(0)
    checked = check_model(Lambda(fn, len(shapes)), tuple(torch.randn(s) for s in shapes),
                          tmp_path, n_clusters=1)
    _one_cluster_with_a_reshape(checked)


@pytest.mark.parametrize("case", ["attention-head-merge", "swin-window-reverse"])
def test_a_reshape_of_a_permuted_value_verifies_in_fp16(tmp_path, case):
    fn, shapes = CASES[case]
    torch.manual_seed(1)
    model = Lambda(fn, len(shapes)).half()
    checked = check_model(model, tuple(torch.randn(s).half() for s in shapes), tmp_path,
                          n_clusters=1)
    _one_cluster_with_a_reshape(checked)


def test_the_kernel_iterates_over_the_merged_dims_split_and_reads_the_permute_alone(tmp_path):
    torch.manual_seed(0)
    fn, shapes = CASES["mul-permute-relu-reshape-add"]
    checked = check_model(Lambda(fn, 2), tuple(torch.randn(s) for s in shapes), tmp_path)
    (kernel,) = checked.kernels
    assert f"Iteration shape at analysis time: ({B}, {T}, {H}, {D})." in kernel.source
    # the launcher views the input through the permute alone: no reshape, so no copy
    assert "a = a.permute(0, 2, 1, 3)\n" in kernel.source


def test_a_contiguous_merge_keeps_its_one_dim(tmp_path):
    """The fast path: a merge strides express is no split of the iteration space."""
    torch.manual_seed(0)
    fn = lambda m, x, b: torch.relu(x * 2.0).reshape(B, T, H * D) + b  # noqa: E731
    checked = check_model(Lambda(fn, 2), (torch.randn(B, T, H, D), torch.randn(H * D)),
                          tmp_path, n_clusters=1)
    assert f"Iteration shape at analysis time: ({B}, {T}, {H * D})." in checked.kernels[0].source


def test_a_layer_norm_after_the_window_reverse_fuses_and_verifies(tmp_path):
    """Swin's residual add and norm2 after the window reverse: the split dims are rows."""
    def fn(m, windows, shortcut):
        b, h, w, c = 2, 4, 6, 8
        x = windows.view(b, h // WIN, w // WIN, WIN, WIN, c).permute(0, 1, 3, 2, 4, 5)
        return torch.nn.functional.layer_norm(shortcut + x.reshape(b, h, w, c), (c,))

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 2), (torch.randn(12, 4, 8), torch.randn(2, 4, 6, 8)),
                          tmp_path, n_clusters=1)
    _one_cluster_with_a_reshape(checked)


def _group_error(fn, shapes):
    a = analyze(Lambda(fn, len(shapes)), *(torch.randn(s) for s in shapes))
    group = [n.name for n in a.graph.nodes if n.kind.is_compute or n.kind is OpKind.VIEW]
    return dry_run(a.graph, group)


def test_a_reshape_cutting_a_permuted_dim_unevenly_is_refused_by_name():
    """(2, 3) transposed and read as (2, 3) again: no split of 3 gives 2, so no iteration
    space reads it without div/mod per load."""
    error = _group_error(lambda m, x: torch.relu(x * 2.0).t().reshape(2, 3) + 1.0, [(2, 3)])
    assert error is not None
    assert "cuts dims a permute moved apart at sizes that do not divide them" in str(error)


@pytest.mark.parametrize("looped", [False, True])
@pytest.mark.parametrize("fn, shapes", [
    # the reduced dim split: the columns cover both parts
    (lambda m, x: torch.softmax((x * 2.0).transpose(1, 2).reshape(2, 12), -1), [(2, 3, 4)]),
    # a post-norm block after the heads merge: rows and columns both reach the input permuted
    (lambda m, x, r: torch.nn.functional.layer_norm(x.transpose(1, 2).reshape(B, T, H * D) + r,
                                                    (H * D,)), [(B, H, T, D), (B, T, H * D)]),
])
def test_a_reduction_over_merged_heads_fuses_and_verifies(tmp_path, fn, shapes, looped):
    torch.manual_seed(0)
    checked = check_model(Lambda(fn, len(shapes)), tuple(torch.randn(s) for s in shapes),
                          tmp_path, n_clusters=1, looped=looped)
    _one_cluster_with_a_reshape(checked)


def test_a_merge_into_a_dim_a_sum_collapses_is_refused_by_name():
    error = _group_error(lambda m, x: (x * 2.0).transpose(1, 2).reshape(2, 12).sum(-1),
                         [(2, 3, 4)])
    assert error is not None
    assert "merges dims that are not adjacent in memory into dim 1, which `sum`" in str(error)
    assert "reduces to one element" in str(error)


# -- the factoring itself, against torch ---------------------------------------------------

def _random_chain(rng: random.Random, shape: tuple[int, ...]):
    """Permutes and reshapes of a small tensor, as a model's views would chain them."""
    steps = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["permute", "reshape", "merge", "unflatten", "unsqueeze", "squeeze"])
        ones = [k for k, n in enumerate(shape) if n == 1]
        if kind == "unsqueeze":
            s = Unsqueeze((rng.randrange(len(shape) + 1),))
        elif kind == "squeeze" and ones:
            s = Squeeze((rng.choice(ones),))
        elif kind == "permute":
            perm = list(range(len(shape)))
            rng.shuffle(perm)
            s = Permute(tuple(perm))
        elif kind == "merge" and len(shape) > 1:
            first = rng.randrange(len(shape) - 1)
            s = Merge(first, rng.randint(first + 2, len(shape)))
        elif kind == "unflatten":
            dim = rng.randrange(len(shape))
            cuts = [k for k in range(2, shape[dim]) if shape[dim] % k == 0]
            if not cuts:
                continue
            k = rng.choice(cuts)
            s = Unflatten(dim, (k, shape[dim] // k))
        else:
            n = 1
            for d in shape:
                n *= d
            sizes = [d for d in range(1, n + 1) if n % d == 0]
            first = rng.choice(sizes)
            s = Reshape((first, n // first))
        steps.append(s)
        shape = s.shape(shape)
    return tuple(steps)


def test_regrouped_chains_read_what_torch_reads():
    rng = random.Random(0)
    seen = 0
    for shape in itertools.islice(itertools.cycle([(2, 3, 4), (4, 6), (2, 2, 3, 2), (2, 1, 6)]),
                                  400):
        steps = _random_chain(rng, shape)
        x = torch.arange(int(torch.tensor(shape).prod())).reshape(shape)
        want = x
        for s in steps:
            want = want.reshape(s.shape(tuple(want.shape))) if not isinstance(s, Permute) \
                else want.permute(s.perm)
        parts = result_factors(steps, shape)
        if parts is None:
            continue
        # Split every result dim into its factors: the chain then reads without merges, at
        # any strides (here column-major), each step a view.
        split = steps + tuple(Unflatten(j, p) for j, p in reversed(list(enumerate(parts)))
                              if len(p) > 1)
        again = regrouped(split, shape)
        if again is None:
            continue
        assert not any(isinstance(s, (Merge, Reshape)) for s in again), again
        back = tuple(range(len(shape)))[::-1]
        got = x.permute(back).contiguous().permute(back)  # x's values, column-major
        for s in again:
            got = s.apply(got)
        assert torch.equal(got.reshape(want.shape), want), (steps, again)
        seen += 1
    assert seen > 50


def test_a_permuted_merge_with_no_factoring_still_raises_the_strides_error():
    x = torch.empty(2, 3, device="meta")
    with pytest.raises(ViewError, match="a reshape of shape"):
        apply((Permute((1, 0)), Reshape((2, 3))), x)


def test_the_split_kernel_runs_at_other_batch_sizes_and_strides(tmp_path):
    """`flatten(2)` merges any sizes: the launcher follows another batch and length, and a
    bias of the merged dim stays a broadcast (no expansion to the analysed (B, T) fixes
    them)."""
    def fn(m, x, b):
        return torch.relu((x * 2.0).permute(0, 2, 1, 3)).flatten(2) + b

    a = analyze(Lambda(fn, 2), torch.randn(B, H, T, D), torch.randn(H * D))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = on_device(load_kernel(path).cluster0)  # a GPU's kernel needs its memory
    b = torch.randn(H * D)
    for x in (torch.randn(3, H, 7, D), torch.randn(1, 7, H, D).transpose(1, 2)):
        torch.testing.assert_close(launch(x, b), fn(None, x, b))


def test_other_sizes_of_the_split_dims_are_refused_naming_the_input(tmp_path):
    """The kernel splits the merged dim as analysed: 4×4 heads refused by name, not with
    torch's `unflatten` error."""
    def fn(m, o):
        return torch.relu(o.transpose(1, 2).flatten(2)) * 2.0

    a = analyze(Lambda(fn, 1), torch.randn(B, H, T, D))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = load_kernel(path).cluster0
    with pytest.raises(ValueError, match=r"^cluster0: `transpose` holds 16 elements in dims "
                       r"2, 3; this kernel writes `mul` with them merged as 15 \(analysed "
                       r"\(3, 5\)\); regenerate it"):
        launch(torch.randn(B, 4, T, 4).transpose(1, 2))


def test_a_batch_of_one_merged_away_is_refused_at_another_batch_by_name(tmp_path):
    """`flatten(0, 1)` of a batch of 1 is a squeeze when analysed; at batch 3 `squeeze`
    would keep the dim: refused naming the input's dim, not as a rank mismatch of the
    broadcast shapes (`a`: the launcher's name for Lambda's input)."""
    def fn(m, o):
        return torch.tanh((o * 2.0).transpose(1, 2).flatten(0, 1)) + 1.0

    a = analyze(Lambda(fn, 1), torch.randn(1, H, T, D))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = on_device(load_kernel(path).cluster0)
    o = torch.randn(1, H, 7, D)
    torch.testing.assert_close(launch(o), fn(None, o))
    with pytest.raises(ValueError, match=r"^cluster0: `a` is 3 long in dim 0; this kernel "
                       r"drops that dim, 1 long when analysed; regenerate it"):
        launch(torch.randn(3, H, T, D))


def test_heads_merged_beside_the_unmerged_value_are_refused_at_other_heads_by_name(tmp_path):
    """Two results, the heads kept and merged: the kernel iterates over the first's (B, H,
    T, D) and writes the second split and permuted into it; 4 heads of 5 are refused naming
    the input, not in torch's `unflatten` (the check once read maps of splits alone)."""
    def fn(m, o):
        y = o * 2.0
        return torch.relu(y), torch.tanh(y.transpose(1, 2).flatten(2))

    a = analyze(Lambda(fn, 1), torch.randn(B, H, T, D))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = on_device(load_kernel(path).cluster0)
    o = torch.randn(3, H, 7, D)
    for got, want in zip(launch(o), fn(None, o), strict=True):
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match=r"^cluster0: `a` holds 20 elements in dims 1, 3; "
                       r"this kernel writes `tanh` with them merged as 15 \(analysed "
                       r"\(3, 5\)\); regenerate it"):
        launch(torch.randn(B, 4, T, 5))


def test_two_values_merging_one_dim_crossing_ways_are_refused_by_name():
    """3×4 heads and 4×3 heads merged into one 12-wide dim: no split of 12 serves both."""
    def fn(m, x, y):
        a = torch.relu(x * 2.0).permute(0, 2, 1, 3).reshape(2, 5, 12)
        return a + torch.relu(y * 2.0).permute(0, 2, 1, 3).reshape(2, 5, 12)

    error = _group_error(fn, [(2, 3, 5, 4), (2, 4, 5, 3)])
    assert error is not None
    assert "merges dim 2 of the kernel's iteration space as 4×3, and " in str(error), str(error)
    assert "as 3×4; a kernel splits a dim one way" in str(error)


def test_regrouped_kernels_compile_for_sm90(tmp_path):
    """The interpreter accepts code the compiler rejects: every case above (fp32 and fp16),
    the reductions over merged heads one-block and looped, and the head merge and Swin
    reverse sized at run time (their sizes arrive as kernel arguments)."""
    from codegen_harness import compile_for_gpu
    from test_codegen_run_sized_reshape import HeadMerge, Reverse, _heads, _windows

    from fusion_core.codegen import Tuning
    from fusion_core.codegen.reference import capture_values, cluster_inputs

    def jobs_of(model, inputs, tag, **gen):
        a = analyze(model, *inputs)
        args = cluster_inputs(a, a.clusters[0], capture_values(a, *inputs))
        return [(generate(a, a.clusters[0], **gen), tmp_path / tag, args)]

    jobs = []
    for case, (fn, shapes) in sorted(CASES.items()):
        jobs += jobs_of(Lambda(fn, len(shapes)), tuple(torch.randn(s) for s in shapes), case)
        jobs += jobs_of(Lambda(fn, len(shapes)).half(),
                        tuple(torch.randn(s).half() for s in shapes), f"{case}-fp16")
    loop = Tuning(max_block=8, loop_block=8)
    reductions = [(lambda m, x: torch.softmax((x * 2.0).transpose(1, 2).reshape(2, 12), -1),
                   [(2, 3, 4)]),
                  (lambda m, x, r: torch.nn.functional.layer_norm(
                      x.transpose(1, 2).reshape(B, T, H * D) + r, (H * D,)),
                   [(B, H, T, D), (B, T, H * D)])]
    for i, (fn, shapes) in enumerate(reductions):
        inputs = tuple(torch.randn(s) for s in shapes)
        jobs += jobs_of(Lambda(fn, len(shapes)), inputs, f"red{i}")
        jobs += jobs_of(Lambda(fn, len(shapes)), inputs, f"red{i}-looped", tuning=loop,
                        looped=True)
    jobs += jobs_of(HeadMerge(), _heads(2, 3, 4, 5), "run-sized-head-merge")
    jobs += jobs_of(Reverse(), _windows(2, 4, 6, 3), "run-sized-swin-reverse")
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled
