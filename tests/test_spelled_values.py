"""Messages and the HTML panel name values the way the user wrote them (`relu` (line 12)),
not by the traced graph's node names (`relu_1`, `add_1`): a model whose second `relu` and
second `+` get node names the source never spells."""

from __future__ import annotations

import dataclasses
import operator

import pytest
import torch

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import Analysis, analyze_file
from fusion_core.validate.model_check import model_check
from fusion_core.validate.prepare import Recording
from fusion_core.validate.subgraph import PatchError, patch

NET = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x, y):
        x = torch.relu(x) + 1
        a = torch.relu(x)
        b = a * 2
        c = torch.sigmoid(y) * 3
        d = self.bn(a @ c)
        return b + d
"""


@pytest.fixture(scope="module")
def net(tmp_path_factory) -> Analysis:
    path = tmp_path_factory.mktemp("spelled") / "net.py"
    path.write_text(NET)
    return analyze_file(path, [InputSpec((8, 8)), InputSpec((8, 8))])


def _unplaceable(a: Analysis):
    """`relu` (line 12) with the norm of line 15 as one cluster: `a * 2` (line 13) reads
    the relu before `a @ c`, the norm's input, exists, so no single call fits."""
    c = a.clusters[0]
    assert [n.name for n in a.graph.nodes if n.op == "relu"] == ["relu", "relu_1"]
    inputs = ("add", "matmul", "bn_running_mean", "bn_running_var", "bn_weight", "bn_bias")
    return dataclasses.replace(c, index=4, nodes=("relu_1", "batch_norm"),
                               ops=("relu", "batch_norm"), inputs=inputs,
                               outputs=("relu_1", "batch_norm"))


def _never_called(*args):
    raise AssertionError("the patch fails before any launcher runs")


WORDS = ("cluster 4: its result `relu` (line 12) is read by `mul` (line 13) before its "
         "input `operator.matmul` (line 15) is computed; cannot place one kernel call")


def test_patch_error_names_values_by_op_and_line(net):
    with pytest.raises(PatchError) as e:
        patch(net.graph_module, {4: (_unplaceable(net), _never_called)}, net.graph)
    assert str(e.value) == WORDS  # was `relu_1` … `mul` … `matmul`


def test_the_model_check_reports_the_patch_error_in_those_words(net):
    gm = net.graph_module
    inputs = [torch.randn(8, 8), torch.randn(8, 8)]
    rec = Recording(net, {4: _unplaceable(net)}, gm, inputs, gm(*inputs), {})
    check = model_check(rec, {4: _never_called})
    assert check.passed is False and check.blamed == (4,)
    assert check.details == ((4, f"PatchError: {WORDS}"),)


def test_a_kernel_call_patched_in_earlier_is_named_by_its_cluster(net):
    from fusion_core.validate.subgraph import _named, _said

    g = torch.fx.Graph()
    x = g.placeholder("x")
    call = g.call_function(_named(_never_called, 2), (x,))
    second = g.call_function(operator.getitem, (call, 1))
    assert _said(net.graph, call) == _said(net.graph, second) == "cluster 2's kernel call"
    assert _said(net.graph, x) == "`x`"


# Runs graph.js and panel.js (no DOM needed to build a panel's HTML) on the page's data and
# prints the cluster panel's "reads …; writes …" line.
PANEL_LINE = r"""
const fs = require("fs"), vm = require("vm");
const [data, ...scripts] = process.argv.slice(2).map(p => fs.readFileSync(p, "utf8"));
const ctx = {document: {getElementById: () => ({textContent: data})}, console};
vm.createContext(ctx);
for (const s of scripts) vm.runInContext(s, ctx);
const html = vm.runInContext(`clusterPanel(PAGE.clusters[${Number(process.env.CLUSTER)}])`, ctx);
console.log(html.match(/<p class="muted">(reads [^<]*)<\/p>/)[1]);
"""


def test_the_html_panel_says_what_a_cluster_reads_and_writes_as_written(net, tmp_path):
    import re
    import shutil
    import subprocess
    from pathlib import Path

    from fusion_core.report.html import analysis_html, page_data

    page = page_data(net)
    (c,) = [c for c in page["clusters"] if "batch_norm" in c["ops"]]
    assert c["inputs"][:2] == ["relu_1", "matmul"] and c["outputs"] == ["add_1"]  # node names
    assert c["reads"][:2] == ["`relu` (line 12)", "`operator.matmul` (line 15)"]
    assert c["writes"] == ["`add` (line 16)"] and c["recomputed"] == []
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the page data above is what the panel prints")
    static = Path(__file__).resolve().parents[1] / "fusion_core" / "report" / "html" / "static"
    data = re.search(r'<script type="application/json" id="fusion-data">(.*?)</script>',
                     analysis_html(page), re.S)
    assert data is not None
    (tmp_path / "data.json").write_text(data.group(1))
    (tmp_path / "panel_line.js").write_text(PANEL_LINE)
    done = subprocess.run([node, tmp_path / "panel_line.js", tmp_path / "data.json",
                           static / "graph.js", static / "panel.js"], capture_output=True,
                          text=True, env={"CLUSTER": str(page["clusters"].index(c))})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(  # was `reads relu_1, matmul, …; writes add_1`
        "reads `relu` (line 12), `operator.matmul` (line 15), ")
    assert done.stdout.strip().endswith("; writes `add` (line 16)")
