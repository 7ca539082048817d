"""A nearest upsample by an integer factor read inside a kernel: `F.interpolate(x,
scale_factor=2)` is the index map `out[..., h, w] = x[..., h // 2, w // 2]`, a view
(``ir/upsample.py``) the kernel reads with stride 0 over a domain split along the upsampled
dims (``codegen/upsample_space.py``). A UNet decoder's `interpolate → cat(skip) → GroupNorm
→ SiLU` is one kernel, as Inductor's `cpp_fused_..._group_norm_silu` is. Other modes and
non-integer factors stay calls, each with its reason. Kernels run under the interpreter
against eager.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from codegen_harness import Lambda, check_model, compile_for_gpu, on_device, run_kernel

from fusion_core.analysis.barriers import find_barriers
from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels
from fusion_core.codegen.reference import capture_values, cluster_inputs
from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze


def _ops(analysis, index: int = 0) -> tuple[str, ...]:
    return analysis.clusters[index].ops


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_interpolate_then_relu_is_one_kernel(tmp_path, capture):
    def fn(m, x):
        return torch.relu(F.interpolate(x * 2.0, scale_factor=2))

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 1), (torch.randn(2, 3, 5, 4),), tmp_path, n_clusters=1,
                          capture=capture)
    a = checked.analysis
    (c,) = a.clusters
    ups = [n for n in c.nodes if a.graph[n].kind is OpKind.VIEW]
    assert len(ups) == 1 and a.graph[ups[0]].op in ("interpolate", "upsample_nearest2d")
    assert c.inputs == (a.graph.nodes[0].name,) and c.outputs[0] in c.nodes  # x in, no copy
    # the source is read with stride 0 along the repeated dims: never upsampled in memory
    assert "_repeated(" in checked.kernels[0].source


class Decoder(nn.Module):
    """A UNet decoder block's start: upsample, concatenate the skip, GroupNorm, SiLU."""

    def __init__(self, channels: int, groups: int, **interp) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
        with torch.no_grad():  # not the identity: a wrong channel would show
            self.norm.weight.copy_(torch.randn(channels))
            self.norm.bias.copy_(torch.randn(channels))
        self.interp = interp or {"scale_factor": 2}

    def forward(self, x, skip):
        h = torch.cat([F.interpolate(x, **self.interp), skip], 1)
        return F.silu(self.norm(h))


@pytest.mark.parametrize("interp", [{"scale_factor": 2}, {"scale_factor": 2.0},
                                    {"size": (8, 6), "mode": "nearest"},
                                    {"scale_factor": (2, 3)}],
                         ids=["int", "float", "size", "per-dim"])
def test_decoder_upsample_cat_group_norm_silu_is_one_kernel(tmp_path, interp):
    torch.manual_seed(0)
    x = torch.randn(2, 8, 4, 2 if "size" not in interp and interp["scale_factor"] == (2, 3)
                    else 3 if "size" in interp else 4)
    out = F.interpolate(x, **interp)
    model = Decoder(16, 4, **interp)
    checked = check_model(model, (x, torch.randn(2, 8, *out.shape[2:])), tmp_path,
                          n_clusters=1)
    a = checked.analysis
    assert _ops(a)[-3:] == ("cat", "group_norm", "silu")
    assert any(a.graph[n].op == "interpolate" for n in a.clusters[0].nodes)
    assert not find_barriers(a.graph, a.clusters)


class Up(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Upsample(scale_factor=2)

    def forward(self, x):
        return torch.sigmoid(self.up(x)) * 3.0


def test_nn_upsample_module_fuses(tmp_path):
    torch.manual_seed(0)
    checked = check_model(Up(), (torch.randn(1, 2, 3, 3),), tmp_path, n_clusters=1)
    assert "interpolate" in _ops(checked.analysis)


@pytest.mark.parametrize("shape, factor", [((2, 4, 5), 3), ((1, 2, 2, 3, 2), 2)],
                         ids=["1d", "3d"])
@pytest.mark.parametrize("capture", ["fx", "export"])
def test_1d_and_3d_upsamples_fuse(tmp_path, shape, factor, capture):
    def fn(m, x):
        return F.gelu(F.interpolate(x, scale_factor=factor) + 1.0)

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 1), (torch.randn(shape),), tmp_path, n_clusters=1,
                          capture=capture)
    name = "interpolate" if capture == "fx" else f"upsample_nearest{len(shape) - 2}d"
    assert name in _ops(checked.analysis)


@pytest.mark.parametrize("interp", [{"scale_factor": 2}, {"size": (8, 6)}], ids=["int", "size"])
def test_an_exported_decoder_is_one_kernel(tmp_path, interp):
    torch.manual_seed(0)
    x = torch.randn(2, 8, 4, 4 if "scale_factor" in interp else 3)
    model = Decoder(16, 4, **interp)
    checked = check_model(model, (x, torch.randn(2, 8, 8, x.shape[3] * 2)), tmp_path,
                          n_clusters=1, capture="export")
    assert _ops(checked.analysis) == ("upsample_nearest2d", "cat", "group_norm", "silu")


@pytest.mark.parametrize("interp, why", [
    ({"scale_factor": 2, "mode": "bilinear"}, "mode='bilinear' blends elements"),
    ({"scale_factor": 2, "mode": "nearest-exact"}, "mode='nearest-exact' reads at"),
    ({"scale_factor": 1.5}, "scale factor 1.5 along dim 2 is no integer factor"),
    ({"size": (6, 6)}, "size 4 -> 6 along dim 2 is no integer factor")],
    ids=["bilinear", "nearest-exact", "fractional", "size"])
def test_other_upsamples_stay_calls_with_a_reason(interp, why):
    def fn(m, x):
        return torch.relu(F.interpolate(x.exp(), **interp)) * 2.0

    a = analyze(Lambda(fn, 1), torch.randn(1, 2, 4, 4), capture="fx")
    (barrier,) = find_barriers(a.graph, a.clusters)
    text = barrier.describe(a.graph)
    assert "`F.interpolate`" in text and why in text, text
    assert "\n" not in text


def test_a_decoder_kernel_runs_at_another_batch_and_resolution(tmp_path):
    # `Repeat` and the domain's split are size-generic: the launcher reads the sizes again.
    torch.manual_seed(0)
    model = Decoder(16, 4)
    checked = check_model(model, (torch.randn(2, 8, 4, 4), torch.randn(2, 8, 8, 8)), tmp_path,
                          n_clusters=1)
    x, skip = torch.randn(3, 8, 5, 3), torch.randn(3, 8, 10, 6)
    (got,) = run_kernel(checked.kernels[0], tmp_path / "other", (x, skip, *_affine(model)))
    want = model(x, skip)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


class SizedLikeSkip(nn.Module):
    """A decoder that upsamples to the skip's size (`size=skip.shape[2:]`): eager runs any
    pair of sizes; the kernel reads `x` repeated by the analysed factor."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(4, 16)

    def forward(self, x, skip):
        h = torch.cat([F.interpolate(x, size=skip.shape[2:]), skip], 1)
        return F.silu(self.norm(h))


@pytest.mark.parametrize("skip, dim, factor", [((2, 8, 9, 8), 2, "9"),
                                               ((2, 8, 12, 12), 2, "12"),
                                               ((2, 8, 8, 6), 3, "6")],
                         ids=["not-a-factor", "another-factor", "second-dim"])
def test_a_decoder_kernel_refuses_sizes_that_are_not_its_factor_apart(tmp_path, skip, dim,
                                                                       factor):
    # torch raised its own "unflatten: Provided sizes [-1, 2] don't multiply up to the size
    # of dim 2 (9)", or a broadcast error from inside the launcher at another factor.
    torch.manual_seed(0)
    model = SizedLikeSkip()
    a = analyze(model, torch.randn(2, 8, 4, 4), torch.randn(2, 8, 8, 8))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    module = load_kernel(path)
    w, b = _affine(model)
    x, s = torch.randn(3, 8, 5, 3), torch.randn(3, 8, 10, 6)
    with torch.no_grad():  # other sizes a factor of 2 apart run
        torch.testing.assert_close(on_device(module.cluster0)(x, s, w, b), model(x, s),
                                   atol=1e-5, rtol=1e-4)
    module._fits = None  # checked once per layout: a warm call runs no check
    on_device(module.cluster0)(x, s, w, b)
    with pytest.raises(ValueError, match=f"^cluster0: `skip` is {factor} long in dim {dim} "
                       f"and `x` 4 in dim {dim}; this kernel reads `skip` there as `x` "
                       r"upsampled by exactly 2 \(analysed 4 -> 8\); regenerate it at these "
                       "sizes or keep the original ops$"):
        on_device(load_kernel(path).cluster0)(torch.randn(2, 8, 4, 4), torch.randn(skip), w, b)


def test_a_cat_of_an_upsample_refuses_other_channels_as_passed(tmp_path):
    # No group_norm: the skip's split is the upsample's, along the height and width; the
    # refusal read it as group_norm's groups ("12 channels ...; this kernel reads 16
    # (group_norm's groups of 2").
    def fn(m, x, skip):
        return torch.cat([F.interpolate(x, scale_factor=2), skip], 1).relu()

    a = analyze(Lambda(fn, 2), torch.randn(2, 8, 4, 4), torch.randn(2, 8, 8, 8))
    (path,) = write_kernels([generate(a, a.clusters[0])], tmp_path)
    with pytest.raises(ValueError, match=r"^cluster0: a concatenated input, `b`, is 6 long "
                       "along the cat dim; this kernel reads 8; regenerate it at these sizes or "
                       "keep the original ops$"):
        load_kernel(path).cluster0(torch.randn(2, 8, 4, 4), torch.randn(2, 6, 8, 8))


def _affine(model: Decoder) -> tuple[torch.Tensor, ...]:
    return tuple(p.detach().reshape(-1, 1, 1) for p in (model.norm.weight, model.norm.bias))


def test_a_reduction_over_the_upsampled_rows_is_refused_by_op_and_line():
    def fn(m, x):
        return F.softmax(F.interpolate(x * 2.0, scale_factor=2), -1)

    a = analyze(Lambda(fn, 1), torch.randn(2, 3, 4, 4), capture="fx")
    (r,) = [r for r in a.rejections if "interpolate" in r.nodes]
    assert r.culprits == ("interpolate",)
    assert ("`softmax` (test_codegen_upsample.py:" in r.reason and "reduces rows of what "
            "`interpolate` (test_codegen_upsample.py:" in r.reason), r.reason


@pytest.mark.parametrize("fn", [
    lambda m, x: F.interpolate(x.exp(), scale_factor=2).permute(0, 2, 3, 1) * 2.0,
    lambda m, x: F.layer_norm(F.interpolate(x, scale_factor=2).permute(0, 2, 3, 1) * 2.0,
                              (3,)),
    lambda m, x: (F.interpolate(x.exp(), scale_factor=2) * 2.0).sum(1)],
    ids=["permuted", "channels-last-layer-norm", "sum-over-channels"])
def test_an_upsample_read_through_a_permute_or_into_a_reduction_that_keeps_its_dims(
        tmp_path, fn):
    # The split of the domain moves before the permute (``ir/view_cancel.py``); a reduction
    # whose dims are not the upsampled ones reduces the same dims over the split domain.
    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 1), (torch.randn(2, 3, 4, 5),), tmp_path, n_clusters=1)
    assert "interpolate" in _ops(checked.analysis)


def test_aten_default_overloads_read_their_scales_by_name():
    # `upsample_nearest2d.default(x, size, scales_h, scales_w)`: torch indexes by a scale
    # given there (1.9 is no factor of 2) and by in / out where none is.
    import torch.fx as fx

    from fusion_core.ir.upsample import upsample_steps

    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(1, 2, 4, 4)
    target = torch.ops.aten.upsample_nearest2d.default
    found = []
    for args, kwargs in [((x, [8, 8]), {}), ((x, [8, 8], 1.9, 1.9), {}),
                         ((x, [8, 8]), {"scales_h": 2.0, "scales_w": 2.0}),
                         ((x, [12, 8], 3.0, None), {})]:
        n = g.call_function(target, args, kwargs)
        n.meta["val"] = torch.empty(1, 2, *args[1])
        steps, why = upsample_steps(n)
        found.append(why or len(steps))
    assert found[0] == found[2] == found[3] == 4  # two repeats, two merges
    assert found[1].startswith("its scale factor 1.9 along dim 2 is no integer factor")


@pytest.mark.parametrize("gen", [
    {"tuning": Tuning(max_block=64, loop_block=64), "looped": True},
    {"tuning": Tuning(max_block=64, loop_block=64, split_min_cols=128)}],
    ids=["looped", "split-rows"])
def test_decoder_rows_wider_than_a_block_loop_or_split(tmp_path, gen):
    # A row of (sample, group) holds the columns (channels, h, s, w, s): the looped and split
    # kernels decompose them like any other columns.
    torch.manual_seed(0)
    checked = check_model(Decoder(16, 4), (torch.randn(1, 8, 8, 8), torch.randn(1, 8, 16, 16)),
                          tmp_path, n_clusters=1, **gen)
    assert "interpolate" in _ops(checked.analysis)


def test_upsample_kernels_compile_for_sm90(tmp_path):
    # The interpreter accepts code the compiler rejects: the decoder's one-block and looped
    # kernels and an elementwise upsample → relu, in fp32 and fp16.
    jobs = []
    for dtype in (torch.float32, torch.float16):
        name = str(dtype).removeprefix("torch.")
        model = Decoder(16, 4).to(dtype)
        inputs = (torch.randn(1, 8, 8, 8).to(dtype), torch.randn(1, 8, 16, 16).to(dtype))
        a = analyze(model, *inputs)
        (cluster,) = a.clusters
        args = cluster_inputs(a, cluster, capture_values(a, *inputs))
        jobs.append((generate(a, cluster), tmp_path / f"{name}-single", args))
        looped = generate(a, cluster, Tuning(max_block=64, loop_block=64), looped=True)
        jobs.append((looped, tmp_path / f"{name}-looped", args))
        relu = Lambda(lambda m, x: torch.relu(F.interpolate(x, scale_factor=2)) * 2.0, 1)
        x = (torch.randn(2, 8, 16, 16).to(dtype),)
        a = analyze(relu, *x)
        (cluster,) = a.clusters
        args = cluster_inputs(a, cluster, capture_values(a, *x))
        jobs.append((generate(a, cluster), tmp_path / f"{name}-relu", args))
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled


def test_an_upsample_after_a_norm_starts_the_next_kernel_and_says_why(tmp_path):
    # The norm's kernel iterates over its rows; the upsampled value is larger, so the
    # upsample goes with the ops after it (as Inductor's does), and the rejection says so.
    def fn(m, h):
        h = F.silu(F.group_norm(h, 4))
        return F.interpolate(h, scale_factor=2) * 2.0 + 1.0

    torch.manual_seed(0)
    checked = check_model(Lambda(fn, 1), (torch.randn(2, 8, 4, 4),), tmp_path, n_clusters=2)
    a = checked.analysis
    assert [c.ops for c in a.clusters] == [("group_norm", "silu"),
                                           ("interpolate", "mul", "add")]
    (r,) = [r for r in a.rejections if "group_norm" in r.ops and "interpolate" in r.ops]
    assert ("`interpolate` (test_codegen_upsample.py:" in r.reason and "repeats the elements "
            "of a value computed in the group over a larger shape" in r.reason), r.reason


def test_a_scale_factor_computed_at_run_time_stays_a_call_with_a_reason():
    def fn(m, x):
        return torch.relu(F.interpolate(x.exp(), scale_factor=x.shape[2] // 2)) * 2.0

    a = analyze(Lambda(fn, 1), torch.randn(1, 2, 4, 4), capture="fx")
    (barrier,) = find_barriers(a.graph, a.clusters)
    assert "its scale factor is computed at run time" in barrier.describe(a.graph)


def test_recompute_scale_factor_indexes_by_the_sizes(tmp_path):
    # 5 * 2.1 -> 10 elements: recomputed, torch indexes by 5 / 10 (h // 2), a view that fuses;
    # without recomputing it indexes by 1 / 2.1, no integer factor: a call, with its reason.
    def fused(m, x):
        return torch.relu(F.interpolate(x.exp(), scale_factor=2.1,
                                        recompute_scale_factor=True)) * 2.0

    def kept(m, x):
        return torch.relu(F.interpolate(x.exp(), scale_factor=2.1)) * 2.0

    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 5)
    checked = check_model(Lambda(fused, 1), (x,), tmp_path, n_clusters=1)
    assert _ops(checked.analysis) == ("exp", "interpolate", "relu", "mul")
    a = analyze(Lambda(kept, 1), x, capture="fx")
    (barrier,) = find_barriers(a.graph, a.clusters)
    assert "its scale factor 2.1 along dim 2 is no integer factor" in barrier.describe(a.graph)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_a_half_precision_decoder_matches_eager(tmp_path, dtype):
    torch.manual_seed(0)
    model = Decoder(16, 4).to(dtype)
    inputs = (torch.randn(2, 8, 4, 4).to(dtype), torch.randn(2, 8, 8, 8).to(dtype))
    checked = check_model(model, inputs, tmp_path, n_clusters=1)
    assert _ops(checked.analysis) == ("interpolate", "cat", "group_norm", "silu")
