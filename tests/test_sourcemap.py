"""Source mapping: exact ranges, replacements, and pointer reasons, on real files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from model_sources import RES_NORM

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import EXACT, POINTER, map_clusters

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"


def line_of(path: Path, code: str) -> int:
    """1-based line holding `code` (stripped), so tests survive edits above it."""
    hits = [i for i, text in enumerate(path.read_text().splitlines(), 1) if text.strip() == code]
    assert len(hits) == 1, f"{code!r} found {len(hits)} times in {path}"
    return hits[0]


def mapped(tmp_path: Path, body: str, *shape: int, name: str = "model.py"):
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    analysis = analyze_file(path, [InputSpec(shape)])
    return path, analysis, map_clusters(analysis)


def test_example_net_three_exact_clusters_at_the_forward_lines():
    path = EXAMPLES / "example_net.py"
    analysis = analyze_file(path, [InputSpec((2, 1024))])
    maps = map_clusters(analysis)
    assert [m.quality for m in maps] == [EXACT, EXACT, EXACT]
    first = [line_of(path, "x = x * 2.0"), line_of(path, "x = F.gelu(x)"),
             line_of(path, "x = torch.tanh(x)")]
    assert [(m.start, m.end) for m in maps] == [(s, s + 2) for s in first]
    assert [m.replacement.strip() for m in maps] == [
        "x = cluster0(x)", "x = cluster1(x)", "return cluster2(x)"]
    assert all(m.function == "ExampleNet.forward" and m.reason is None for m in maps)
    assert maps[0].original.splitlines()[1].strip() == "x = F.relu(x)"
    assert maps[0].replacement.startswith("        x")  # the statement's own indentation


def test_microgpt_attention_softmax_is_exact_inside_the_attention_module():
    path = EXAMPLES / "microgpt.py"
    analysis = analyze_file(path, [InputSpec((1, 8), torch.int64)])
    maps = map_clusters(analysis)
    softmax = [m for m, c in zip(maps, analysis.clusters, strict=True) if "softmax" in c.ops]
    assert len(softmax) == 2  # one per block: the same lines, two calls
    start = line_of(path, "scores = scores * self.scale")
    end = line_of(path, "probs = self.attn_drop(probs)")
    for m in softmax:
        assert m.quality == EXACT, m.reason
        assert (m.start, m.end) == (start, end)
        assert m.function == "CausalSelfAttention.forward"
        assert m.args == ("scores", "self.causal_mask[:T, :T]")
        # The kernel leaves dropout out (eval mode): the lines as written run in train mode.
        assert m.replacement == (
            "        if not self.attn_drop.training:\n"
            f"            probs = {m.call}(scores, self.causal_mask[:T, :T])\n"
            "        else:\n"
            "            scores = scores * self.scale\n"
            "            scores = scores.masked_fill(self.causal_mask[:T, :T], float(\"-inf\"))\n"
            "            probs = F.softmax(scores, dim=-1)\n"
            "            probs = self.attn_drop(probs)")
    a, b = softmax
    assert a.shared_with == (b.cluster_index,) and b.shared_with == (a.cluster_index,)
    assert a.call == b.call  # one kernel serves both calls of the lines
    # Everything else is approximate, and says why in words.
    for m in maps:
        if m not in softmax:
            assert m.quality == POINTER
            assert any(why in m.reason for why in (
                "spans", "also holds", "two kernels", "only part of the call",
                "of another call")), m.reason


def test_multi_line_statements_cover_their_full_extent(tmp_path):
    path, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def forward(self, x):
                x = self.proj(x)
                y = torch.sigmoid(
                    x * 2.0
                )
                y = (y
                     + 1.0)
                return self.proj(y)
        """, 4, 8)
    (m,) = maps
    assert m.quality == EXACT, m.reason
    assert m.start == line_of(path, "y = torch.sigmoid(")
    assert m.end == line_of(path, "+ 1.0)")
    assert m.replacement.strip() == "y = cluster0(x)"
    assert m.original.count("\n") == 5


def test_self_attribute_inputs_keep_their_source_expressions(tmp_path):
    _, analysis, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)
                self.gain = nn.Parameter(torch.ones(8))
                self.register_buffer("mask", torch.rand(16, 8) > 0.5)
                self.norm = nn.LayerNorm(8)

            def forward(self, x):
                x = self.proj(x)
                n = x.shape[0]
                h = x * self.gain
                h = h.masked_fill(self.mask[:n], 0.0)
                h = self.norm(h)
                return self.proj(h)
        """, 4, 8)
    (m,) = maps
    assert m.quality == EXACT, m.reason
    by_node = dict(zip(analysis.clusters[0].inputs, m.args, strict=True))
    assert sorted(by_node.values()) == sorted(
        ["x", "self.gain", "self.mask[:n]", "self.norm.weight", "self.norm.bias"])
    assert m.replacement.strip() == f"h = cluster0({', '.join(m.args)})"


def test_a_cluster_ending_in_return_keeps_the_return(tmp_path):
    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def forward(self, x):
                y = self.proj(x)
                return torch.relu(y * 2.0)
        """, 4, 8)
    (m,) = maps
    assert m.quality == EXACT, m.reason
    assert m.start == m.end
    assert m.replacement.strip() == "return cluster0(y)"


def test_a_module_call_on_the_line_stays_as_the_fused_calls_argument(tmp_path):
    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj1 = nn.Linear(8, 8)

            def forward(self, x):
                y = torch.relu(x * 2.0) + self.proj1(x)
                return self.proj1(y)
        """, 4, 8)
    (m,) = maps
    assert m.quality == EXACT, m.reason
    assert m.replacement.strip() == "y = cluster0(x, self.proj1(x))"


def test_an_unfused_call_around_the_cluster_stays_around_the_fused_call(tmp_path):
    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj1 = nn.Linear(8, 8)

            def forward(self, x):
                y = self.proj1(torch.relu(x * 2.0) + 1.0)
                return self.proj1(y)
        """, 4, 8)
    (m,) = maps
    assert m.quality == EXACT, m.reason
    assert m.replacement.strip() == "y = self.proj1(cluster0(x))"


def test_an_unfused_statement_inside_the_range_is_a_pointer(tmp_path):
    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj1 = nn.Linear(8, 8)

            def forward(self, x):
                y = x * 2.0
                z = self.proj1(x)
                y = torch.relu(y)
                return self.proj1(y) + z
        """, 4, 8)
    (m,) = maps
    assert m.quality == POINTER, m.replacement
    assert "line range also holds `self.proj1(x)`" in m.reason, m.reason
    assert m.replacement is None


def test_a_helper_the_cluster_runs_whole_is_rewritten_at_its_call(tmp_path):
    path, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def act(self, x):
                return torch.relu(x)

            def forward(self, x):
                x = self.proj(x)
                y = self.act(x * 2.0)
                return self.proj(y)
        """, 4, 8)
    (m,) = maps
    assert m.quality == EXACT, m.reason
    line = line_of(path, "y = self.act(x * 2.0)")
    assert (m.start, m.end, m.function) == (line, line, "M.forward")
    assert m.replacement.strip() == "y = cluster0(x)"


def test_a_helper_the_cluster_runs_in_part_is_a_pointer_naming_the_call(tmp_path):
    path, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def act(self, x):
                return self.proj(torch.relu(x))

            def forward(self, x):
                x = self.proj(x)
                y = self.act(x * 2.0)
                return self.proj(y)
        """, 4, 8)
    (m,) = maps
    assert m.quality == POINTER
    line = line_of(path, "y = self.act(x * 2.0)")
    assert m.reason.startswith(f"only part of the call at line {line} (`M.act`) is in the "
                               "cluster: `self.proj`"), m.reason
    assert (m.start, m.end) == (line, line)


def test_an_unrolled_loop_is_a_pointer_and_per_iteration_clusters_share_lines(tmp_path):
    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def forward(self, x):
                for _ in range(2):
                    h = x * 2.0
                    x = torch.relu(h)
                return x
        """, 4, 8)
    (m,) = maps
    assert m.quality == POINTER
    assert "run more than once" in m.reason

    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def forward(self, x):
                for _ in range(2):
                    h = x * 2.0
                    h = torch.relu(h)
                    x = self.proj(h)
                return x
        """, 4, 8, name="loop2.py")
    a, b = maps
    assert a.quality == b.quality == EXACT, a.reason
    assert a.shared_with == (b.cluster_index,)
    assert a.replacement.strip() == b.replacement.strip() == f"h = {a.call}(x)"


def test_names_assigned_in_the_range_may_be_reassigned_but_not_read_later(tmp_path):
    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def forward(self, x):
                t = x * 2.0
                y = torch.relu(t)
                t = self.proj(y)
                return t
        """, 4, 8)
    (m,) = maps
    assert m.quality == EXACT, m.reason
    assert m.replacement.strip() == "y = cluster0(x)"

    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def forward(self, x):
                for _ in range(2):
                    x = torch.sigmoid(x)
                    t = x * 2.0
                    y = torch.relu(t)
                    x = torch.sin(y) + torch.cos(y)
                return x
        """, 4, 8, name="reads.py")
    assert all(m.quality == POINTER for m in maps)


def test_a_stale_file_maps_as_a_pointer(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(HEADER + textwrap.dedent("""
        class M(nn.Module):
            def forward(self, x):
                x = x * 2.0
                return torch.relu(x)
        """))
    analysis = analyze_file(path, [InputSpec((4, 8))])
    path.write_text(path.read_text().replace("x = x * 2.0", "x = x * 3.0"))
    (m,) = map_clusters(analysis)
    assert m.quality == POINTER
    assert "changed since it was traced" in m.reason


@pytest.mark.parametrize("line", ["h = x * 2.0; k = x + 1", "h = x * 2.0; h = h + 1"])
def test_statements_sharing_a_line_with_other_code(tmp_path, line):
    _, _, maps = mapped(tmp_path, f"""
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def forward(self, x):
                x = self.proj(x)
                {line}
                h = torch.relu(h)
                return self.proj(h)
        """, 4, 8)
    m = maps[-1]
    if "k =" in line:
        assert m.quality == POINTER
        assert "line range also holds `x + 1`" in m.reason
    else:
        assert m.quality == EXACT, m.reason
        assert m.replacement.strip() == "h = cluster0(x)"


@pytest.mark.parametrize("example, spec", [
    ("example_net.py", InputSpec((2, 1024))),
    ("microgpt.py", InputSpec((1, 8), torch.int64)),
])
def test_the_export_frontend_maps_like_fx(example, spec):
    path = EXAMPLES / example
    fx_maps = map_clusters(analyze_file(path, [spec], capture="fx"))
    export_maps = map_clusters(analyze_file(path, [spec], capture="export"))
    assert any(m.quality == EXACT for m in fx_maps)

    def key(maps):
        return [(m.quality, m.start, m.end, m.replacement, m.reason) for m in maps]

    assert key(export_maps) == key(fx_maps)


@pytest.mark.parametrize("scales, exact", [((2.0, 2.0), True), ((2.0, 3.0), False)])
def test_lines_shared_by_two_modules_need_the_same_constants(tmp_path, scales, exact):
    _, _, maps = mapped(tmp_path, f"""
        class Act(nn.Module):
            def __init__(self, s):
                super().__init__()
                self.s = s

            def forward(self, x):
                y = x * self.s
                return torch.relu(y)


        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = Act({scales[0]}), Act({scales[1]})
                self.proj = nn.Linear(8, 8)

            def forward(self, x):
                return self.b(self.proj(self.a(x)))
        """, 4, 8)
    a, b = maps
    assert a.shared_with == (b.cluster_index,)
    if exact:
        assert a.quality == b.quality == EXACT, a.reason
        assert a.baked == ("self.s = 2.0",)
        assert a.replacement.strip() == "return cluster0(x)"
    else:
        assert a.quality == b.quality == POINTER
        assert "other constants" in a.reason


def test_values_read_from_attributes_are_reported_as_built_in():
    analysis = analyze_file(EXAMPLES / "microgpt.py", [InputSpec((1, 8), torch.int64)])
    (baked,) = {m.baked for m in map_clusters(analysis) if m.exact}
    assert baked == (f"self.scale = {32 ** -0.5!r}",)


def test_a_cluster_with_two_results_assigns_both_names(tmp_path):
    # `x` also feeds a layer: the kernel stores it (a layer cannot recompute it).
    _, analysis, maps = mapped(tmp_path, RES_NORM, 4, 8)
    (m,) = maps
    assert len(analysis.clusters[0].outputs) == 2
    assert m.quality == EXACT, m.reason
    assert m.replacement.strip() == "x, h = cluster0(x, y, self.norm.weight, self.norm.bias)"


def test_two_results_are_assigned_even_when_the_last_is_part_of_a_return(tmp_path):
    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def forward(self, x):
                a = x * 2.0
                b = torch.relu(a)
                return b, a
        """, 4, 8)
    (m,) = maps
    assert m.quality == EXACT, m.reason
    assert m.replacement.strip() == "a, b = cluster0(x)"

    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def forward(self, x):
                a = x * 2.0
                return torch.relu(a), a
        """, 4, 8, name="ret.py")
    (m,) = maps
    # `torch.relu(a)` is a part of the return: the results get a line of their own above it.
    assert m.quality == EXACT, m.reason
    assert m.replacement.splitlines() == ["        a, fused = cluster0(x)",
                                          "        return fused, a"]


@pytest.mark.parametrize("factor, exact", [("math.sqrt(self.d)", True),
                                           ("self.next_scale()", False)])
def test_constant_arguments_that_call_functions(tmp_path, factor, exact):
    _, _, maps = mapped(tmp_path, f"""
        import math


        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.d, self.calls = 4, 0

            def next_scale(self):
                self.calls += 1
                return 2.0

            def forward(self, x):
                y = x * {factor}
                return torch.relu(y)
        """, 4, 8)
    (m,) = maps
    if exact:
        assert m.quality == EXACT, m.reason
        assert m.baked == ("math.sqrt(self.d) = 2.0",)
    else:
        assert m.quality == POINTER
        assert "`self.next_scale()` at line" in m.reason and "no longer call" in m.reason


@pytest.mark.parametrize("body, exact", [
    ("def forward(self, x): return torch.relu(x * 2.0)", False),
    ("def forward(self, x):\n                if not self.training: return torch.relu(x * 2.0)\n"
     "                return x", False),
    ("def forward(self, x):\n                return torch.relu(x * 2.0)  # fused", True),
])
def test_the_range_must_own_its_lines(tmp_path, body, exact):
    _, _, maps = mapped(tmp_path, f"""
        class M(nn.Module):
            {body}
        """, 4, 8)
    (m,) = maps
    assert m.quality == (EXACT if exact else POINTER), m.reason
    if not exact:
        assert "also hold" in m.reason


def test_of_two_overlapping_edits_one_is_written_and_the_other_names_it(tmp_path):
    # Cluster 0 (mul, relu) sits inside the code cluster 1 (sigmoid, mul) keeps as its
    # argument: two edits would overlap on line 12. Each is valid alone: the first is kept
    # (both serve one cluster), the other is a pointer naming it.
    _, _, maps = mapped(tmp_path, """
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def forward(self, x):
                y = x * 2.0
                z = torch.sigmoid(self.proj(torch.relu(y))) * 3.0
                return self.proj(z)
        """, 4, 8)
    assert [m.quality for m in maps] == [EXACT, POINTER], [m.reason for m in maps]
    assert maps[1].reason.startswith("its lines overlap cluster 0's edit"), maps[1].reason
    assert "which is written instead" in maps[1].reason


def test_map_quality_is_an_enum_reported_as_its_old_string():
    import yaml

    from fusion_core.cli_run import mapping_dict
    from fusion_core.sourcemap import MapQuality

    analysis = analyze_file(EXAMPLES / "example_net.py", [InputSpec((2, 1024))])
    m = map_clusters(analysis)[0]
    assert type(m.quality) is MapQuality and m.exact
    entry = mapping_dict(m)
    assert type(entry["map"]) is str and entry["map"] == "exact"
    assert yaml.safe_load(yaml.safe_dump(entry))["map"] == "exact"  # a plain str dumps
    assert [q.value for q in MapQuality] == ["exact", "pointer"]
