"""`--apply` for clusters with a permute, a transpose or a reshape inside: written when the
kernel works its results' shapes out from its inputs' at each call, refused by op and line
when a view keeps the sizes seen at analysis.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from rich.console import Console
from test_apply import DEVICE, assert_same_outputs, backup_as_py, copy_example, load
from test_apply_callsite import line_of

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters
from fusion_core.sourcemap.apply import apply
from fusion_core.sourcemap.apply_plan import plan_apply

PERMUTED = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Permuted(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = nn.Parameter(torch.randn(8))
            self.proj = nn.Linear(4, 6, bias=False)

        def forward(self, x, r):
            y = (x * self.g).permute(0, 3, 1, 2) + r
            h = self.proj(y)
            return torch.softmax(torch.tanh(h).transpose(-1, -2) / 8, -1)
""")

# (4, 6) viewed as (-1, 12): no merge or split of dims, so the view is the fixed (2, 12).
REGROUPED = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Regrouped(nn.Module):
        def forward(self, x):
            y = (x * 2).view(-1, 12) + 1
            return y
""")


def _plan(path: Path, *shapes: tuple[int, ...], capture: str = "auto"):
    analysis = analyze_file(path, [InputSpec(s) for s in shapes], capture=capture)
    kernels = {c.index: generate(analysis, c) for c in analysis.clusters}
    verdicts = {c.index: (True, "verified") for c in analysis.clusters}
    return analysis, kernels, plan_apply(analysis, map_clusters(analysis), path, kernels,
                                         verdicts)


def test_a_permute_and_a_transpose_inside_clusters_are_applied(tmp_path):
    path = tmp_path / "permuted.py"
    path.write_text(PERMUTED)
    analysis, _, plan = _plan(path, (2, 4, 4, 8), (2, 8, 4, 4))
    assert [c.chain for c in analysis.clusters] == [
        "mul → permute → add", "tanh → transpose → div → softmax"]
    assert plan.skipped == () and plan.clusters == (0, 1)
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result is not None and result.clusters == (0, 1)
    text = path.read_text()
    assert "y = cluster0(x, self.g, r)" in text and "return cluster1(h)" in text
    before = load(backup_as_py(result.files[0].backup), "Permuted").to(DEVICE)
    after = load(path, "Permuted").to(DEVICE)
    after.load_state_dict(before.state_dict())
    # Another batch and height than analysed: the results' shapes follow the inputs'.
    for n, s in ((2, 4), (3, 5)):
        x, r = torch.randn(n, s, 4, 8, device=DEVICE), torch.randn(n, 8, s, 4, device=DEVICE)
        with torch.no_grad():
            got, want = after(x, r), before(x, r)
        assert got.shape == (n, 8, 6, s)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


def test_convnexts_permute_layer_norm_and_scale_permute_add_are_applied(tmp_path):
    path = copy_example(tmp_path, "convnext_block.py")
    analysis, _, plan = _plan(path, (1, 32, 4, 4))
    assert [c.chain for c in analysis.clusters] == [
        "permute → layer_norm", "mul → permute → add"]
    assert plan.skipped == () and plan.clusters == (0, 1)
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result is not None
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "ConvNeXtBlock",
                        torch.randn(2, 32, 3, 5))


def test_a_view_of_fixed_sizes_is_refused_by_its_op_and_line(tmp_path):
    path = tmp_path / "regrouped.py"
    path.write_text(REGROUPED)
    analysis, kernels, plan = _plan(path, (4, 6))
    (c,) = analysis.clusters
    assert c.chain == "mul → view → add"
    (skip,) = plan.skipped
    line = line_of(path, "y = (x * 2).view(-1, 12) + 1")
    assert not skip.pointer and plan.edits == ()
    assert f"`view` (line {line}) gives the shape (2, 12) seen at analysis" in skip.reason
    # Why: the kernel runs at the analysed sizes only, where eager gives (4, 12).
    (kernel_file,) = write_kernels([kernels[0]], tmp_path / "kernels")
    launcher = load_kernel(kernel_file).cluster0
    with pytest.raises(ValueError, match=r"`x` holds 48 elements in dims 0, 1; this kernel "
                                         r"needs 24 there: `view` \(line \d+\) reads 24"):
        launcher(torch.randn(8, 6, device=DEVICE))
    assert apply(plan, analysis, Console(), assume_yes=True, ask=None) is None
    assert path.read_text() == REGROUPED


# At 1×1 the flatten drops two size-1 dims: the graph records a squeeze of them, but the
# user's `flatten(1)` merges dims at every other size.
FLATTENED = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Flattened(nn.Module):
        def forward(self, x):
            y = torch.relu(x * 2.0).flatten(1) + 1.0
            return y
""")


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_flatten_of_size_1_dims_is_refused_as_a_view_of_fixed_sizes(tmp_path, capture):
    path = tmp_path / "flattened.py"
    path.write_text(FLATTENED)
    analysis = analyze_file(path, [InputSpec((2, 4, 1, 1))], capture=capture)
    kernels = {c.index: generate(analysis, c) for c in analysis.clusters}
    verdicts = {c.index: (True, "verified") for c in analysis.clusters}
    plan = plan_apply(analysis, map_clusters(analysis), path, kernels, verdicts)
    (skip,) = plan.skipped
    line = line_of(path, "y = torch.relu(x * 2.0).flatten(1) + 1.0")
    assert not skip.pointer and plan.edits == (), skip
    assert f"(line {line}) gives the shape (2, 4) seen at analysis" in skip.reason, skip.reason
    # Why: eager flattens a 3×3 map into 36 columns; the kernel runs 1×1 maps only.
    (kernel_file,) = write_kernels([kernels[0]], tmp_path / "kernels")
    launcher = load_kernel(kernel_file).cluster0
    x = torch.randn(2, 4, 3, 3, device=DEVICE)
    assert (torch.relu(x * 2.0).flatten(1) + 1.0).shape == (2, 36)
    with pytest.raises(ValueError, match="`x` is 3 long in dim 2; this kernel drops that dim"):
        launcher(x)
    assert apply(plan, analysis, Console(), assume_yes=True, ask=None) is None
    assert path.read_text() == FLATTENED


# A pool to 1×1 makes those dims 1 at any size: the flatten after it is written.
POOLED = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            y = torch.sigmoid(self.pool(torch.relu(x * 2.0)).flatten(1)) + 1.0
            return y
""")


def test_a_flatten_of_a_pooled_1x1_map_is_applied_and_runs_at_other_sizes(tmp_path):
    path = tmp_path / "pooled.py"
    path.write_text(POOLED)
    analysis, _, plan = _plan(path, (2, 4, 3, 3))
    assert [c.chain for c in analysis.clusters] == [
        "mul → relu → adaptive_avg_pool2d → flatten → sigmoid → add"]
    assert plan.skipped == () and plan.clusters == (0,)
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result is not None
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Pooled",
                        torch.randn(3, 4, 5, 2))


# A GNN's mean aggregation: the degree broadcast over the features by `[:, None]`.
SUBSCRIPTED = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Subscripted(nn.Module):
        def forward(self, agg, deg):
            return agg / deg.clamp(min=1)[:, None]
""")

SLICED = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Sliced(nn.Module):
        def forward(self, x):
            n = 4
            return (x * 2.0)[:, :n].relu()
""")


def test_a_constant_subscript_inside_a_cluster_is_applied(tmp_path):
    # Was a pointer: "`deg.clamp(min=1)[:, None]` at line 7 does not compute `getitem`".
    path = tmp_path / "subscripted.py"
    path.write_text(SUBSCRIPTED)
    analysis, _, plan = _plan(path, (10, 16), (10,))
    (c,) = analysis.clusters
    assert c.chain == "clamp → getitem → div"
    assert plan.skipped == () and plan.clusters == (0,)
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result is not None
    assert "return cluster0(deg, agg)" in path.read_text()
    before = load(backup_as_py(result.files[0].backup), "Subscripted")
    after = load(path, "Subscripted")
    for n in (10, 7):  # another node count than analysed
        agg, deg = torch.randn(n, 16, device=DEVICE), torch.rand(n, device=DEVICE) * 3
        torch.testing.assert_close(after(agg, deg), before(agg, deg))


def test_a_subscript_that_reads_a_name_is_a_pointer(tmp_path):
    # `[:, :n]`: the kernel would keep the n of the traced call whatever n is later.
    path = tmp_path / "sliced.py"
    path.write_text(SLICED)
    analysis = analyze_file(path, [InputSpec((4, 8))])
    (m,) = map_clusters(analysis)
    assert m.replacement is None
    line = line_of(path, "return (x * 2.0)[:, :n].relu()")
    assert m.reason.endswith(f"`(x * 2.0)[:, :n]` at line {line} indexes "
                             "with a value read at run time; the kernel holds the one seen at "
                             "analysis"), m.reason


DEQUANT = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Dequant(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w_q", torch.randint(-127, 128, (6, 8), dtype=torch.int8))
            self.register_buffer("w_scale", torch.rand(6))

        def forward(self, x):
            w = self.w_q.float() * self.w_scale[:, None]
            return x @ w.t()
""")


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_method_of_a_buffer_maps_as_a_method(tmp_path, capture):
    # Was a pointer: "`self.w_q.float(...)` at line 12 is not `.float()` (line 12)"; under
    # export (`aten._to_copy`) "... is not `to`".
    path = tmp_path / "dequant.py"
    path.write_text(DEQUANT)
    analysis, _, plan = _plan(path, (4, 8), capture=capture)
    assert analysis.graph.frontend == capture
    (c,) = analysis.clusters
    assert c.chain == "to → mul"
    assert plan.skipped == () and plan.clusters == (0,)
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result is not None
    assert "w = cluster0(self.w_q, self.w_scale[:, None])" in path.read_text()
    assert_same_outputs(backup_as_py(result.files[0].backup), path, "Dequant", torch.randn(3, 8))


HEAD_MERGE = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class HeadMerge(nn.Module):
        def forward(self, o, x):
            B, T, C = x.shape
            y = o.transpose(1, 2).reshape(B, T, C)
            return torch.nn.functional.gelu(y) + x
""")


def test_a_head_merge_sized_from_input_shapes_is_applied_and_follows_other_sizes(tmp_path):
    """`B, T, C` only size the reshape, which the kernel recomputes from its inputs
    (``codegen/run_sizes.py``): the call takes no size, and the rewritten model runs at
    another batch and sequence length."""
    path = tmp_path / "head_merge.py"
    path.write_text(HEAD_MERGE)
    analysis, _, plan = _plan(path, (2, 3, 4, 5), (2, 4, 15))
    assert [c.chain for c in analysis.clusters] == ["reshape → gelu → add"]
    assert plan.skipped == () and plan.clusters == (0,)
    result = apply(plan, analysis, Console(), assume_yes=True, ask=None)
    assert result is not None
    assert "return cluster0(o.transpose(1, 2), x)" in path.read_text()
    before = load(backup_as_py(result.files[0].backup), "HeadMerge").to(DEVICE)
    after = load(path, "HeadMerge").to(DEVICE)
    for b, t in ((2, 4), (3, 7)):
        o, x = torch.randn(b, 3, t, 5, device=DEVICE), torch.randn(b, t, 15, device=DEVICE)
        with torch.no_grad():
            torch.testing.assert_close(after(o, x), before(o, x), atol=1e-5, rtol=1e-5)


PARTITION = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Partition(nn.Module):
        def forward(self, o, x):
            B, H, W, C = x.shape
            y = (x * 2.0).view(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 2, 4, 5)
            return torch.sigmoid(y.reshape(-1, 4, C)) + o
""")


def test_a_window_partition_sized_at_run_time_is_skipped_naming_the_batch(tmp_path):
    """Swin's windows merge the batch with the window counts, which the kernel splits as
    analysed: the written call would refuse another batch where the user's lines run."""
    path = tmp_path / "partition.py"
    path.write_text(PARTITION)
    analysis, kernels, plan = _plan(path, (12, 4, 3), (2, 4, 6, 3))
    assert [c.chain for c in analysis.clusters] == [
        "mul → view → permute → reshape → sigmoid → add"]
    (skip,) = plan.skipped
    line = line_of(path, "return torch.sigmoid(y.reshape(-1, 4, C)) + o")
    assert skip.reason.endswith(
        f"`reshape` (line {line}) merges dim 0 of a permuted value with others, which the "
        "kernel splits as analysed (2×2×3), so it would run at the analysed batch only")
    # Why: the launcher refuses the windows of another batch.
    (kernel_file,) = write_kernels([kernels[0]], tmp_path / "kernels")
    with pytest.raises(ValueError, match="regenerate it"):
        load_kernel(kernel_file).cluster0(torch.randn(18, 4, 3, device=DEVICE),
                                          torch.randn(3, 4, 6, 3, device=DEVICE))
    assert apply(plan, analysis, Console(), assume_yes=True, ask=None) is None
    assert path.read_text() == PARTITION
