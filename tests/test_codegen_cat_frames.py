"""A decode loop over a KV cache: each call brings another cache length, so each misses the
launch cache (keyed by shapes), and `_plan` used to work everything out again per token:
the broadcast of the inputs' shapes, the tuning constants' check and the bucket's candidate
configurations. The frame (`_frame`, kept in FRAMES by the inputs outside the cat's dim) holds
those once; a call at a new length derives only its cat ends, shapes, the cat operands'
strides and the arguments (codegen/launch_plan.py).

The counts below are of the generated module's own helpers, wrapped: `_iteration_shape` is
its broadcast (once per frame), `_configs` lists a bucket's configurations. Before frames,
both ran at every length (8 of each over the loop of 8 tokens).
"""

import pytest
import torch
from codegen_harness import Lambda, compare, on_device, poison_empty, to_device

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.codegen.operators import _shapes_only
from fusion_core.pipeline import analyze


def _kv_softmax(m, past, new):
    return (torch.cat((past, new), dim=2) * 0.5).softmax(-1)


def _kv_weighted(m, past, new, w):  # `w` is read through no piece of the cat
    return (torch.cat((past, new), dim=2) * w).softmax(-1)


def _scores_softmax(m, past, new):  # the cat along the reduced dim: n_cols follows it
    return torch.softmax(torch.cat((past * 0.5, new), dim=-1), dim=-1)


def _counted(module, name):
    """`module.<name>` wrapped to count its calls (the generated code looks it up there)."""
    real, calls = getattr(module, name), []

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    setattr(module, name, counting)
    return calls


def _module(tmp_path, fn, *inputs):
    a = analyze(Lambda(fn, len(inputs)), *inputs)
    (c,) = a.clusters
    (path,) = write_kernels([generate(a, c)], tmp_path)
    module = load_kernel(path)
    poison_empty(module)  # an element the kernel does not write reads as NaN
    return module, on_device(module.cluster0)


def _decode(launch, fn, past, steps, *rest):
    """`steps` calls, one new token each, the cache one longer every time (as eager builds
    it); each result against eager."""
    for step in range(steps):
        new = torch.randn(past.shape[:2] + (1,) + past.shape[3:])
        compare(launch(past, new, *rest), fn(None, past, new, *rest),
                f"step {step}, past {past.shape[2]}")
        past = torch.cat((past, new), dim=2)
    return past


def test_a_decode_loop_builds_one_frame_and_a_bucket_s_configurations_once(tmp_path):
    torch.manual_seed(0)
    module, launch = _module(tmp_path, _kv_softmax, torch.randn(1, 2, 5, 8),
                             torch.randn(1, 2, 1, 8))
    broadcasts, configs = _counted(module, "_iteration_shape"), _counted(module, "_configs")
    _decode(launch, _kv_softmax, torch.randn(1, 2, 5, 8), 8)
    assert len(module.LAUNCH_CACHE) == 8  # every length is another launch plan...
    buckets = {plan[5][0] for plan in module.LAUNCH_CACHE.values()}
    assert len(buckets) == 2  # 12 to 26 rows: row classes 16 and 32
    # ...worked out from one frame: one broadcast, one configuration list per bucket
    assert (len(broadcasts), len(configs)) == (1, 2)
    assert len(module.FRAMES) == 1
    # a prefill of 3 tokens and an empty cache: the same frame
    for past_len, new_len in ((20, 3), (0, 2)):
        past, new = torch.randn(1, 2, past_len, 8), torch.randn(1, 2, new_len, 8)
        compare(launch(past, new), _kv_softmax(None, past, new), f"{past_len}+{new_len}")
    assert (len(broadcasts), len(module.FRAMES)) == (1, 1)
    # tracing (torch.compile's fake tensors) keeps no frame
    shaped = module.traceable(to_device(past), to_device(new), wrap=_shapes_only)
    assert shaped.shape == (1, 2, 2, 8) and len(module.FRAMES) == 1 and len(broadcasts) == 2


def test_another_layout_or_dtype_outside_the_cat_makes_another_frame(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(1, 2, 1, 8)
    module, launch = _module(tmp_path, _kv_weighted, torch.randn(1, 2, 5, 8),
                             torch.randn(1, 2, 1, 8), w)
    broadcasts = _counted(module, "_iteration_shape")
    past = _decode(launch, _kv_weighted, torch.randn(1, 2, 5, 8), 3, w)
    assert len(broadcasts) == 1 and len(module.FRAMES) == 1
    # `w` of the same shape read with other strides: its layout is checked again
    strided = torch.randn(1, 8, 1, 2).transpose(1, 3)
    assert strided.shape == w.shape and strided.stride() != w.stride()
    past = _decode(launch, _kv_weighted, past, 2, strided)
    assert (len(broadcasts), len(module.FRAMES)) == (2, 2)
    # `w` in half precision: another dtype, another frame (and tuning key)
    past = _decode(launch, _kv_weighted, past, 2, w.half())
    assert (len(broadcasts), len(module.FRAMES)) == (3, 3)
    # the cache stored with tokens innermost: not in the frame's key, its layout is checked
    # at every call, and this one is copied into the analysed layout first
    n = past.shape[2]
    stored = torch.randn(1, 2, 8, n).transpose(2, 3)
    _decode(launch, _kv_weighted, stored, 2, w)
    assert (len(broadcasts), len(module.FRAMES)) == (3, 3)
    key = next(k for k in module.LAUNCH_CACHE if k[0][2] == n and k[1] == stored.stride())
    assert module.LAUNCH_CACHE[key][0] == (True, False, False)  # `past` copied


def test_a_mask_as_long_as_the_cat_is_broadcast_at_each_call(tmp_path):
    # `mask` spans the cat's dim: the cat's length is not free, and the frame built at one
    # length must not let another length through with the same mask
    fn = lambda m, past, new, mask: torch.cat((past, new), dim=2) + mask  # noqa: E731
    module, launch = _module(tmp_path, fn, torch.randn(1, 2, 5, 8), torch.randn(1, 2, 1, 8),
                             torch.randn(1, 1, 6, 1))
    for n in (5, 6):
        past, new, mask = torch.randn(1, 2, n, 8), torch.randn(1, 2, 1, 8), torch.randn(
            1, 1, n + 1, 1)
        compare(launch(past, new, mask), fn(None, past, new, mask), f"past {n}")
    past, new = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 1, 8)
    short = mask[:, :, :6]  # as long as the cat at past 5, where the first frame was built
    with pytest.raises(RuntimeError, match="must match the size"):
        fn(None, past, new, short)  # eager refuses it...
    with pytest.raises(ValueError, match="do not broadcast the way the kernel reads them"):
        launch(past, new, short)  # ...and so does the launcher


def test_a_length_past_the_block_is_refused_after_the_frame_is_built(tmp_path):
    module, launch = _module(tmp_path, _scores_softmax, torch.randn(2, 3, 5),
                             torch.randn(2, 3, 1))
    module.MAX_BLOCK = 16  # the widest row one block holds, read at each call
    for n in (5, 15):
        past, new = torch.randn(2, 3, n), torch.randn(2, 3, 1)
        compare(launch(past, new), _scores_softmax(None, past, new), f"past {n}")
    past = torch.randn(2, 3, 16)
    with pytest.raises(ValueError, match=r"^cluster0: rows of 17 columns are wider than this "
                       r"kernel keeps in one block \(16\): analyse the model again at an input "
                       r"shape with rows at least this wide, which generates a kernel for them$"):
        launch(past, torch.randn(2, 3, 1))
    assert len(module.FRAMES) == 1 and len(module.LAUNCH_CACHE) == 2  # nothing kept for it


def test_two_caches_along_one_dim_share_the_frame_while_equally_long(tmp_path):
    # K and V caches of one layer in one kernel: each its own cat along dim 2
    def fn(m, pk, k, pv):
        return (torch.cat((pk, k), 2) * torch.cat((pv, k * 2), 2)).softmax(-1)

    module, launch = _module(tmp_path, fn, torch.randn(1, 2, 5, 8), torch.randn(1, 2, 1, 8),
                             torch.randn(1, 2, 5, 8))
    for n in (5, 6, 9):
        args = torch.randn(1, 2, n, 8), torch.randn(1, 2, 1, 8), torch.randn(1, 2, n, 8)
        compare(launch(*args), fn(None, *args), f"past {n}")
    assert len(module.FRAMES) == 1
    args = torch.randn(1, 2, 9, 8), torch.randn(1, 2, 1, 8), torch.randn(1, 2, 8, 8)
    with pytest.raises(RuntimeError, match="must match the size"):
        fn(None, *args)  # eager refuses caches of two lengths...
    with pytest.raises(ValueError, match="do not broadcast the way the kernel reads them"):
        launch(*args)  # ...and so does the launcher, with the frame built


@pytest.mark.cpu  # the stand-in compiled kernel interprets the kernel: see that file
def test_a_length_launched_once_builds_no_direct_launcher(tmp_path, monkeypatch):
    """A decode loop launches each cache length once: building `_direct`'s launcher for it
    is work no later call uses. A length launched again gets one and then launches
    directly."""
    import triton
    from test_codegen_direct_launch import _Driver, _Interpreted

    monkeypatch.setattr(triton.runtime.driver, "_active", _Driver())
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    module, launch = _module(tmp_path, _kv_softmax, torch.randn(1, 2, 5, 8),
                             torch.randn(1, 2, 1, 8))
    stand_in = _Interpreted(module.cluster0_kernel)
    module.cluster0_kernel = stand_in
    past = _decode(launch, _kv_softmax, torch.randn(1, 2, 5, 8), 4)
    assert len(module.LAUNCH_CACHE) == 4 and not module.DIRECT_LAUNCH
    last, new = past[:, :, :-1].contiguous(), torch.randn(1, 2, 1, 8)
    for _ in range(3):  # the last call's layout again: through Triton and kept, then direct
        compare(launch(last, new), _kv_softmax(None, last, new), "again")
    ((guard, _, _, direct),) = module.DIRECT_LAUNCH.values()  # guard, scalars, plan, launch
    assert direct is not None and guard is None  # a KV cache's layout is new every call
    assert (stand_in.triton_launches, len(stand_in.compiled.calls)) == (5, 2)
