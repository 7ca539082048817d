"""Several clusters in one source statement, and one helper called twice on a line: the
source map's edits and the reasons it gives where it writes none.

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rich.console import Console
from test_apply import assert_same_outputs, backup_as_py
from test_apply_callsite import CAPTURES, line_of, plan

from fusion_core.cli_run import mapping_dict
from fusion_core.sourcemap import EXACT, POINTER
from fusion_core.sourcemap.apply import apply
from fusion_core.sourcemap.apply_plan import plan_apply

HEADER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def act(t):
    return t * torch.sigmoid(t)

"""

# Each operand of the `+` is its own cluster: the linears between them end both kernels.
TWO_PARTS = HEADER + """
class Two(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)

    def forward(self, x):
        a = self.a(x)
        b = self.b(x)
        return self.a(F.gelu(a * 2.0)) + self.b(torch.tanh(b + 1.0))


class Stack(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.layers = nn.ModuleList(Two(d) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Matmuls(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)

    def forward(self, x):
        a = self.a(x)
        b = self.b(x)
        y = a @ torch.tanh(b + 1.0).transpose(-2, -1) @ F.gelu(a * 2.0)
        return y


class Nested(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)

    def forward(self, x):
        a = self.a(x)
        return torch.relu(self.b(F.gelu(a * 2.0)) * 3.0)
"""

HELPER_TWICE = HEADER + """
class Twice(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.p = nn.Linear(d, d)

    def forward(self, x):
        h = self.p(x)
        return act(h) + act(h)


class Split(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.p = nn.Linear(d, d)
        self.q = nn.Linear(d, d)

    def forward(self, x):
        h = self.p(x)
        return self.q(act(h)) + act(h * 2.0)


class NestedCalls(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.p = nn.Linear(d, d)

    def forward(self, x):
        return act(act(self.p(x))) * 2.0


class NestedAfterLine(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.p = nn.Linear(d, d)

    def forward(self, x):
        y = self.p(x) + 1.0
        return act(act(y))
"""


def model(tmp_path: Path, text: str, cls: str) -> Path:
    path = tmp_path / f"{cls.lower()}.py"
    path.write_text(text)
    return path


def applied(path: Path, capture: str, cls: str) -> tuple[list, str]:
    analysis, mappings, p = plan(path, capture, cls)
    assert p.clusters == tuple(sorted(c.index for c in analysis.clusters)), p.skipped
    result = apply(p, analysis, Console(), assume_yes=True, ask=None)
    assert result is not None
    assert_same_outputs(backup_as_py(result.files[0].backup), path, cls, torch.randn(4, 8))
    return list(mappings), path.read_text()


@pytest.mark.parametrize("capture", CAPTURES)
def test_two_clusters_in_one_statement_are_one_edit_each_part_its_own_call(tmp_path, capture):
    path = model(tmp_path, TWO_PARTS, "Two")
    line = line_of(path, "return self.a(F.gelu(a * 2.0)) + self.b(torch.tanh(b + 1.0))")
    mappings, text = applied(path, capture, "Two")
    assert [m.quality for m in mappings] == [EXACT, EXACT], [m.reason for m in mappings]
    assert {(m.start, m.end) for m in mappings} == {(line, line)}
    new = "return self.a(cluster0(a)) + self.b(cluster1(b))"
    assert {m.replacement.strip() for m in mappings} == {new}
    assert {m.call for m in mappings} == {"cluster0", "cluster1"}
    assert all(m.edit_calls == ("cluster0", "cluster1") for m in mappings)
    assert mapping_dict(mappings[1])["calls"] == ["cluster0", "cluster1"]  # the JSON report
    assert new in text
    assert "return self.a(F.gelu(a * 2.0)) + self.b(torch.tanh(b + 1.0))" not in text


def test_a_two_cluster_statement_run_by_every_layer_shares_both_kernels(tmp_path):
    path = model(tmp_path, TWO_PARTS, "Stack")
    mappings, text = applied(path, "auto", "Stack")
    assert len(mappings) == 6 and all(m.exact for m in mappings), [m.reason for m in mappings]
    assert {m.call for m in mappings} == {"cluster0", "cluster1"}
    assert all(len(m.shared_with) == 5 for m in mappings)
    assert "return self.a(cluster0(a)) + self.b(cluster1(b))" in text


def test_two_clusters_between_matmuls_are_replaced_in_place(tmp_path):
    path = model(tmp_path, TWO_PARTS, "Matmuls")
    mappings, text = applied(path, "auto", "Matmuls")
    assert all(m.exact for m in mappings), [m.reason for m in mappings]
    assert "y = a @ cluster0(b).transpose(-2, -1) @ cluster1(a)" in text


def test_a_cluster_inside_another_clusters_argument_is_written_in_it(tmp_path):
    # Was a pointer: "cluster 0 computes `F.gelu(a * 2.0)`, inside `torch.relu(...)`, which
    # cluster 1 computes (line 19): the outer call would take the inner one's result as an
    # argument, which one edit of the line does not write yet" (parts.nest_parts).
    path = model(tmp_path, TWO_PARTS, "Nested")
    mappings, text = applied(path, "auto", "Nested")
    assert [m.quality for m in mappings] == [EXACT, EXACT], [m.reason for m in mappings]
    assert "        return cluster1(self.b(cluster0(a)))\n" in text, text


def test_a_two_cluster_edit_waits_for_both_kernels(tmp_path):
    # The edit calls both kernels: one that failed its check keeps the whole line as it is.
    path = model(tmp_path, TWO_PARTS, "Two")
    analysis, mappings, _ = plan(path, "auto", "Two")
    kernels = {c.index: object() for c in analysis.clusters}
    verdicts = {0: (True, "verified"), 1: (False, "mismatch")}
    p = plan_apply(analysis, mappings, path, kernels, verdicts)
    assert p.edits == () and p.ops == ()
    assert {s.reason for s in p.skipped} == {"cluster 1's kernel is not verified (mismatch)"}


@pytest.mark.parametrize("capture", CAPTURES)
def test_one_helper_called_twice_on_a_line_is_two_calls_in_one_cluster(tmp_path, capture):
    # Was: "the call at line N (`act`) hands the cluster 2 of its values".
    path = model(tmp_path, HELPER_TWICE, "Twice")
    (m,), text = applied(path, capture, "Twice")
    assert m.exact, m.reason
    assert m.replacement.strip() == "return cluster0(h)"
    assert "return cluster0(h)" in text


def test_each_of_two_helper_calls_on_a_line_is_lifted_alone(tmp_path):
    # Was: "only part of the call at line N (`act`) is in the cluster: `sigmoid` ...": the
    # other call's ops, in another kernel, were counted as this call's.
    path = model(tmp_path, HELPER_TWICE, "Split")
    analysis, mappings, _ = plan(path, "auto", "Split")
    line = line_of(path, "return self.q(act(h)) + act(h * 2.0)")
    outer = next(m for m, c in zip(mappings, analysis.clusters, strict=True) if "add" in c.ops)
    assert outer.exact, outer.reason
    assert (outer.start, outer.end) == (line, line)
    assert outer.replacement.strip() == "return cluster1(h, self.q(act(h)))"
    # The first call's cluster lies in `act` alone, which the other call runs too, there as
    # part of cluster 1: the edit of `act` serves that call (was: "also runs in another
    # call of `act` … serving that call with this kernel is not supported yet").
    inner = next(m for m in mappings if m is not outer)
    assert inner.exact, inner.reason
    assert inner.replacement.strip() == "return cluster0(t)"
    assert [(s.part.index, s.part.ops) for s in inner.serves] == [(1, ("sigmoid", "mul"))]
    _, text = applied(path, "auto", "Split")  # both edits, and the same outputs
    assert "return cluster0(t)" in text and "return cluster1(h, self.q(act(h)))" in text


@pytest.mark.parametrize(("cls", "code"), [("NestedCalls", "return act(act(self.p(x))) * 2.0"),
                                           ("NestedAfterLine", "return act(act(y))")])
def test_nested_calls_of_one_helper_say_so(tmp_path, cls, code):
    # Was: "line range also holds `self.p(x)`"; and for `act(act(y))` a wrong edit that
    # replaced the inner call alone with the kernel of both.
    path = model(tmp_path, HELPER_TWICE, cls)
    _, (m,), p = plan(path, "auto", cls)
    line = line_of(path, code)
    spelled = code.removeprefix("return ").removesuffix(" * 2.0")
    assert m.quality == POINTER
    assert m.reason == (f"line {line} calls `act` twice (`{spelled}`, one inside the other), "
                        "and the graph does not say which of its ops ran in which call; an "
                        "edit of the line cannot bind each call's result")
    assert (m.start, m.end) == (line, line)
    assert p.clusters == ()
