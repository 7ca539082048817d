"""A cat whose operands change length from call to call (a KV cache): the kernel reads each
piece's bounds from the operands it is given (codegen/cat_bounds.py), so one kernel
analysed at one past length computes every other one, as eager does.

Each case is analysed at one length and then called at others under the interpreter, its
outputs poisoned first, against eager. Once, every case here was refused: "a concatenated
input is 7 long along the cat dim; this kernel reads 5 (regenerate it)".
"""

import pytest
import torch
from codegen_harness import Lambda, compare, on_device, poison_empty, to_device

from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels
from fusion_core.pipeline import analyze


def _kv_softmax(m, past, new):  # the cat along the rows: the row count follows the cache
    k = torch.cat((past, new), dim=2)
    return (k * 0.5).softmax(-1)


def _kv_scaled(m, past, new):  # half-precision cache widened and scaled, elementwise
    return torch.cat((past, new), dim=2).float() * 0.125


def _scores_softmax(m, past, new):  # the cat along the reduced dim: n_cols follows it
    return torch.softmax(torch.cat((past * 0.5, new * 0.5), dim=-1), dim=-1)


def _scores_sum(m, past, new):  # a collapsing reduction of a row that grows
    return torch.cat((past.exp(), new), dim=-1).sum(-1)


# (fn, past shape at analysis (cat dim 5), new shape, dtype, cat dim)
CASES = {
    "kv-softmax": (_kv_softmax, (1, 2, 5, 8), (1, 2, 1, 8), torch.float32, 2),
    "kv-float-scale": (_kv_scaled, (2, 2, 5, 8), (2, 2, 1, 8), torch.float16, 2),
    "scores-softmax": (_scores_softmax, (2, 3, 5), (2, 3, 1), torch.float32, -1),
    "scores-sum": (_scores_sum, (2, 3, 5), (2, 3, 1), torch.float32, -1),
}


def _launcher(tmp_path, fn, past, new, looped=None):
    a = analyze(Lambda(fn, 2), past, new)
    assert [len(c.nodes) > 1 for c in a.clusters] == [True], [c.ops for c in a.clusters]
    kernel = generate(a, a.clusters[0], looped=looped)
    (path,) = write_kernels([kernel], tmp_path)
    module = load_kernel(path)
    poison_empty(module)  # an element the kernel does not write reads as NaN
    return kernel, getattr(module, kernel.name)


def _resized(shape, dim, n):
    out = list(shape)
    out[dim] = n
    return tuple(out)


@pytest.mark.parametrize("case, looped", [
    *((case, False) for case in CASES),
    *((case, True) for case in CASES if case != "kv-float-scale")])  # elementwise: no loop
def test_one_kernel_runs_every_past_length(tmp_path, case, looped):
    fn, past_shape, new_shape, dtype, dim = CASES[case]
    torch.manual_seed(0)
    kernel, launch = _launcher(tmp_path, fn, torch.randn(past_shape, dtype=dtype),
                               torch.randn(new_shape, dtype=dtype), looped=looped or None)
    assert "cat0_end0" in kernel.source  # the bound is a parameter, no literal 5
    assert "Cat operands may change length along the cat dim" in kernel.source  # its header
    # 5 as analysed; 2: a piece shorter than any block; 0: an empty cache; 37 and a new
    # chunk of 3 tokens (a prefill) longer than analysed
    for past_len, new_len in ((5, 1), (2, 1), (0, 1), (37, 1), (6, 3)):
        past = torch.randn(_resized(past_shape, dim, past_len), dtype=dtype)
        new = torch.randn(_resized(new_shape, dim, new_len), dtype=dtype)
        got = launch(to_device(past), to_device(new))
        compare(got.cpu(), fn(None, past, new), f"{case} at past length {past_len}")


def test_the_cat_of_computed_values_along_the_flat_index_shifts_by_a_parameter(tmp_path):
    # dim 0 of a flat elementwise kernel: the second piece starts `cat0_end0 * span1`
    # elements in, whatever the first operand's length at this call
    fn = lambda m, a, b: torch.sigmoid(torch.cat((a * 2.0, b + 1.0), dim=0)) * 3.0  # noqa: E731
    kernel, launch = _launcher(tmp_path, fn, torch.randn(2, 3, 8), torch.randn(3, 3, 8))
    assert "(offs - cat0_end0 * span1)" in kernel.source
    for n, m in ((2, 3), (2, 4), (4, 3), (1, 6)):
        a, b = torch.randn(n, 3, 8), torch.randn(m, 3, 8)
        compare(launch(to_device(a), to_device(b)).cpu(), fn(None, a, b), f"{n}+{m}")


def test_a_weight_one_long_in_a_piece_one_long_stays_broadcast_as_the_piece_grows(tmp_path):
    # `new * w` with w a (1, 2, 1, 8) weight, one token long like `new` at analysis: the
    # piece grows with `new`, w is read broadcast (once it was read through the piece and
    # the launcher refused every other length of `new`)
    w = torch.randn(1, 2, 1, 8)
    fn = lambda m, past, new: torch.cat((past, new * m.w), dim=2).relu()  # noqa: E731
    model = Lambda(fn, 2, w=w)
    a = analyze(model, torch.randn(1, 2, 5, 8), torch.randn(1, 2, 1, 8))
    (c,) = a.clusters
    assert c.ops == ("mul", "cat", "relu")
    (path,) = write_kernels([generate(a, c)], tmp_path)
    launch = load_kernel(path).cluster0
    for past_len, new_len in ((5, 1), (9, 3)):
        past, new = torch.randn(1, 2, past_len, 8), torch.randn(1, 2, new_len, 8)
        args = {"a": past, "b": new, "w": w}
        with torch.no_grad():
            want = model(past, new)
        compare(launch(*(to_device(args[n]) for n in c.inputs)).cpu(), want,
                f"past {past_len}, new {new_len}")


def test_inputs_of_one_piece_of_other_lengths_are_refused_by_name(tmp_path):
    fn = lambda m, a, b, c: torch.cat((a * b, c), dim=0) + 1.0  # noqa: E731
    a = analyze(Lambda(fn, 3), torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    launch = on_device(load_kernel(path).cluster0)
    x, y, z = torch.randn(5, 4), torch.randn(5, 4), torch.randn(1, 4)
    torch.testing.assert_close(launch(x, y, z), fn(None, x, y, z))
    with pytest.raises(ValueError, match=r"a concatenated input, `b`, is 1 long along the cat dim; "
                       r"another input of its operand is 5 \(this kernel needs them equal\)"):
        launch(x, torch.randn(1, 4), z)


def test_a_row_split_over_programs_reads_the_cat_at_this_calls_length(tmp_path):
    # attention scores over a long cache: the row is split into chunks of 1024 columns, each
    # chunk's program shifting and masking the pieces by the same parameters
    fn = lambda m, past, new: torch.softmax(torch.cat((past * 0.5, new), dim=-1), dim=-1)  # noqa: E731
    a = analyze(Lambda(fn, 2), torch.randn(1, 3000), torch.randn(1, 1))
    kernel = generate(a, a.clusters[0], Tuning(max_block=256, loop_block=256,
                                               split_min_cols=1024))
    assert "partials" in kernel.source and "cat0_end0" in kernel.source
    (path,) = write_kernels([kernel], tmp_path)
    launch = load_kernel(path).cluster0
    for n, m in ((3000, 1), (4000, 5), (100, 1)):
        past, new = torch.randn(1, n), torch.randn(1, m)
        compare(launch(to_device(past), to_device(new)).cpu(), fn(None, past, new), f"{n}+{m}")


def test_a_cache_read_transposed_is_a_tiled_kernel_at_every_length(tmp_path):
    # Hugging Face's layout: (batch, tokens, heads, dim) read as (batch, heads, tokens, dim);
    # the kernel takes the transposed views (the cluster's inputs), strided along the cat dim
    def fn(m, past, new):
        return torch.cat((past.transpose(1, 2), new.transpose(1, 2)), dim=2) * 0.5

    kernel, launch = _launcher(tmp_path, fn, torch.randn(2, 5, 3, 8), torch.randn(2, 1, 3, 8))
    assert kernel.tiled and "cat0_end0" in kernel.source
    for past_len, new_len in ((5, 1), (2, 1), (0, 2), (40, 1)):
        past, new = torch.randn(2, past_len, 3, 8), torch.randn(2, new_len, 3, 8)
        got = launch(to_device(past).transpose(1, 2), to_device(new).transpose(1, 2))
        compare(got.cpu(), fn(None, past, new), f"past {past_len}, new {new_len}")


def test_a_fixed_prefix_then_the_cache_then_new_tokens(tmp_path):
    # three operands: learned prefix tokens (an expanded parameter, the cluster's input as
    # expanded), the cache and the new tokens; the middle one moves the third's start
    prefix = torch.randn(1, 2, 8)

    def fn(m, past, new):
        k = torch.cat((m.p.expand(past.shape[0], -1, -1), past, new * 2.0), dim=1)
        return torch.nn.functional.layer_norm(k, (8,)).permute(1, 0, 2) * 3.0

    model = Lambda(fn, 2, p=prefix)
    a = analyze(model, torch.randn(2, 5, 8), torch.randn(2, 1, 8))
    (c,) = a.clusters
    assert c.ops == ("mul", "cat", "layer_norm", "permute", "mul"), c.ops
    (path,) = write_kernels([generate(a, c)], tmp_path)
    launch = load_kernel(path).cluster0
    for past_len, new_len in ((5, 1), (9, 2), (0, 1)):
        past, new = torch.randn(2, past_len, 8), torch.randn(2, new_len, 8)
        args = {"a": past, "b": new, "expand": prefix.expand(2, -1, -1)}
        with torch.no_grad():
            want = model(past, new)
        compare(launch(*(to_device(args[n]) for n in c.inputs)).cpu(), want,
                f"past {past_len}, new {new_len}")


def test_a_cache_stored_with_the_tokens_innermost_takes_chunks_of_new_tokens(tmp_path):
    # K stored transposed, (batch, heads, dim, tokens), read as (batch, heads, tokens, dim):
    # one new token has equal strides along tokens and dim, and dim was taken for the inner
    # one, so the kernel read dim with a unit stride and the launcher refused a chunk of 3
    # new tokens ("does not broadcast ... the way this kernel indexes it")
    def fn(m, past, new):
        return (torch.cat((past.transpose(2, 3), new.transpose(2, 3)), dim=2) * 0.5).softmax(-1)

    kernel, launch = _launcher(tmp_path, fn, torch.randn(1, 2, 8, 5), torch.randn(1, 2, 8, 1))
    for past_len, new_len in ((5, 1), (9, 3), (2, 1)):
        past, new = torch.randn(1, 2, 8, past_len), torch.randn(1, 2, 8, new_len)
        got = launch(to_device(past).transpose(2, 3), to_device(new).transpose(2, 3))
        compare(got.cpu(), fn(None, past, new), f"past {past_len}, new {new_len}")


def test_a_sliding_window_header_says_which_operand_follows_the_call(tmp_path):
    # `(past * 2)[:, :, 1:]` is sliced at bounds worked out where `past` was 6 long: its
    # operand stays 5 long and the launcher refuses another `past`, while `new` may grow.
    # The header said every operand may change length.
    def fn(m, past, new):
        return torch.cat(((past * 2)[:, :, 1:], new), dim=2).softmax(-1)

    kernel, launch = _launcher(tmp_path, fn, torch.randn(1, 2, 6, 4), torch.randn(1, 2, 1, 4))
    header = " ".join(kernel.source.split('"""')[1].split())
    assert ("Cat operands may change length along the cat dim from call to call (a KV cache): "
            "the one read from `a` is fixed at its analysed 5 (the launcher refuses another "
            "length of `a` there); the one read from `b` is as long as this call's `b` there."
            ) in header, header
    for new_len in (1, 3):
        past, new = torch.randn(2, 2, 6, 4), torch.randn(2, 2, new_len, 4)
        compare(launch(to_device(past), to_device(new)).cpu(), fn(None, past, new),
                f"new {new_len}")
    with pytest.raises(ValueError, match=r"^cluster0: `a` is 7 long in dim -2; this kernel "
                       "slices it as analysed, where it was 6 long; regenerate it at these "
                       "sizes or keep the original ops$"):
        launch(torch.randn(1, 2, 7, 4), torch.randn(1, 2, 1, 4))
