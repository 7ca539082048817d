"""The --json document: valid against the JSON Schema shipped in the package for every
kind of result (clusters, rejections, multi-output, several inputs), and the schema
really rejects malformed documents."""

from __future__ import annotations

import copy
import inspect
import json
from importlib import resources
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from analysis_helpers import run

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze, analyze_file
from fusion_core.report.console import header
from fusion_core.report.json_report import schema, to_document, write_json

jsonschema = pytest.importorskip("jsonschema")  # the GPU box's environment lacks it

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class SizedByValue(nn.Module):
    """`h`'s size is a number read from a tensor: export leaves `h` and what reads it unfused."""

    def forward(self, x, t):
        y = torch.sigmoid(x * 3) - 1
        n = t.max().item()
        torch._check(n >= 0)
        torch._check(n <= x.shape[0])
        h = y[:n]
        return torch.relu(h * 2) + 1


class DeviceRead(nn.Module):
    """`h.device` read for positions: the block's input `x` answers it, `h` is not stored."""

    def forward(self, x):
        h = torch.relu(x * 2.0)
        pos = torch.arange(h.shape[-1], device=h.device)
        return torch.sigmoid(h) + pos


class EnabledAutocast(nn.Module):
    """torch.export keeps an enabled autocast block as one call: its ops go unanalysed."""

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = (x @ x.t()).cos() * 3.0
        return y.float() + 1.0


def docs():
    yield "example_net", to_document(
        analyze_file(EXAMPLES / "example_net.py", [InputSpec((64, 1024))]))
    yield "microgpt", to_document(
        analyze_file(EXAMPLES / "microgpt.py", [InputSpec((1, 16), torch.int64)]))
    yield "rejections", to_document(run(
        lambda x: F.softmax(torch.relu(x.add_(1.0) * 2.0), -1).sum(-1)))  # input in place
    yield "two inputs", to_document(run(lambda x, y: x * y + 1.0, (4, 8), (8,)))
    yield "no clusters", to_document(run(lambda x: torch.exp(x)))
    yield "capture fallback", to_document(run(  # FX cannot branch on a traced size
        lambda x: (x * 2.0 if x.shape[-1] > 4 else x).relu() + 1.0))
    yield "sized by value", to_document(analyze(
        SizedByValue(), InputSpec((4, 8)), InputSpec((2,), torch.int64), capture="export"))
    yield "autocast block", to_document(analyze(EnabledAutocast(), (4, 4), capture="export"))
    # LLaMA's RMSNorm: `kept = x.dtype` of the residual sum, answered by the block's input
    yield "dtype read", to_document(analyze_file(
        EXAMPLES / "dtype_rmsnorm.py", [InputSpec((2, 16, 128), torch.bfloat16)], capture="fx"))
    yield "device read", to_document(analyze(DeviceRead(), (4, 8), capture="fx"))
    yield "kernel skipped", to_document(run(lambda x: torch.exp(x) * 2.0), {"kernels": {
        "out_dir": "gen", "files": [],
        "skipped": [{"cluster": 0, "reason": "`y` is read both per element and per row"}]}})


@pytest.fixture(scope="module")
def all_docs():
    return dict(docs())


def test_schema_is_shipped_as_package_data():
    text = resources.files("fusion_core.report").joinpath("analysis.schema.json").read_text()
    assert json.loads(text) == schema()
    jsonschema.Draft202012Validator.check_schema(schema())


@pytest.mark.parametrize("name", ["example_net", "microgpt", "rejections", "two inputs",
                                  "no clusters", "capture fallback", "kernel skipped",
                                  "sized by value", "autocast block", "dtype read",
                                  "device read"])
def test_document_validates(all_docs, name):
    doc = all_docs[name]
    jsonschema.validate(doc, schema())
    json.loads(json.dumps(doc))  # plain JSON types only


def test_capture_fallback_is_recorded_only_when_auto_fell_back(all_docs):
    fell_back = all_docs["capture fallback"]
    assert fell_back["frontend"] == "export" and "TraceError" in fell_back["capture_fallback"]
    assert all_docs["example_net"]["capture_fallback"] is None


def test_rejection_document_carries_the_checks(all_docs):
    checks = {r["check"] for r in all_docs["rejections"]["rejections"]}
    assert "aliasing" in checks


def _line(cls: type, code: str) -> int:
    lines, first = inspect.getsourcelines(cls.forward)
    return first + next(i for i, text in enumerate(lines) if code in text)


def test_left_unfused_notes_are_in_the_document_as_in_the_console_header(all_docs):
    # The console's header said these; the JSON had no word of them.
    (sized,) = all_docs["sized by value"]["left_unfused"]
    assert sized["kind"] == "sized-by-value" and sized["count"] == 4  # h, *2, relu, +1
    assert (sized["line"], sized["code"]) == (_line(SizedByValue, "h = y[:n]"), "h = y[:n]")
    assert Path(sized["file"]).name == "test_json_schema.py"
    assert sized["note"].startswith("Left unfused: `h = y[:n]` at ")
    assert "(and 3 ops reading it)" in sized["note"]
    assert "a number read from a tensor at line" in sized["note"]
    (kept,) = all_docs["autocast block"]["left_unfused"]
    assert kept["kind"] == "autocast-block" and kept["count"] == 1
    assert kept["line"] == _line(EnabledAutocast, "y = (x @ x.t())")
    assert "the enabled `torch.autocast` block at " in kept["note"]
    assert all_docs["example_net"]["left_unfused"] == []


def test_a_cluster_lists_the_dtype_reads_its_inputs_answer(all_docs):
    # The residual sum `h = x + ...` is not stored for norm_out's `kept = x.dtype`: block
    # input `x` answers it. The document said so for shape reads only.
    (c,) = [c for c in all_docs["dtype read"]["clusters"] if c["dtype_reads"]]
    # FX makes the `getattr` node of `x.dtype` lazily, at its first use: its line is the cast's
    code = "return self.weight * (wide * scale).to(kept)"
    source = (EXAMPLES / "dtype_rmsnorm.py").read_text().splitlines()
    assert c["dtype_reads"] == [{
        "read": c["dtype_reads"][0]["read"], "of": c["nodes"][0], "source": "x",
        "dtype": "bfloat16", "line": source.index(f"        {code}") + 1, "code": code}]
    assert c["ops"][0] == "add" and c["nodes"][0] not in c["outputs"]
    assert "x" in c["inputs"]
    assert all(not c["dtype_reads"] for c in all_docs["example_net"]["clusters"])


def test_a_cluster_lists_the_device_reads_its_inputs_answer(all_docs):
    (c,) = all_docs["device read"]["clusters"]
    (read,) = c["device_reads"]
    assert (read["of"], read["source"]) == ("relu", "x") and "dtype" not in read
    assert read["line"] == _line(DeviceRead, "pos = torch.arange(") and "h.device" in read["code"]
    assert "relu" in c["nodes"] and c["outputs"] == ["add"] and c["dtype_reads"] == []
    assert all(not c["device_reads"] for c in all_docs["example_net"]["clusters"])


def test_left_unfused_notes_match_the_console_header():
    a = analyze(EnabledAutocast(), (4, 4), capture="export")
    notes = [h for h in header(a) if h.startswith("Left unfused")]
    assert [i["note"] for i in to_document(a)["left_unfused"]] == notes != []


BREAKAGES = {
    "wrong schema_version": lambda d: d.update(schema_version=99),
    "missing totals": lambda d: d.pop("totals"),
    "unknown frontend": lambda d: d.update(frontend="jit"),
    "negative shape": lambda d: d["inputs"][0].update(shape=[-1, 1024]),
    "cluster without ops": lambda d: d["clusters"][0].pop("ops"),
    "traffic as string": lambda d: d["clusters"][0]["traffic"].update(unfused_bytes="384 MB"),
    "bad lines": lambda d: d["clusters"][0].update(lines={"file": "x.py", "start": 0, "end": 1}),
    "capture_fallback on two lines": lambda d: d.update(capture_fallback="a\nb"),
    "dtype read without its source": lambda d: d["clusters"][0].update(dtype_reads=[{
        "read": "getattr_1", "of": "add", "dtype": "bfloat16", "line": 3, "code": "x.dtype"}]),
    "left_unfused note on two lines": lambda d: d.update(left_unfused=[{
        "kind": "autocast-block", "file": None, "line": None, "code": None, "count": 1,
        "note": "Left unfused: a\nb"}]),
    "left_unfused of an unknown kind": lambda d: d.update(left_unfused=[{
        "kind": "other", "file": None, "line": None, "code": None, "count": 1,
        "note": "Left unfused: a"}]),
    "skipped kernel without a reason": lambda d: d.update(kernels={
        "out_dir": "gen", "files": [], "skipped": [{"cluster": 1}]}),
    "skipped kernel reason on two lines": lambda d: d.update(kernels={
        "out_dir": "gen", "files": [], "skipped": [{"cluster": 1, "reason": "a\nb"}]}),
}


@pytest.mark.parametrize("breakage", BREAKAGES, ids=str)
def test_schema_rejects_malformed_documents(all_docs, breakage):
    doc = copy.deepcopy(all_docs["example_net"])
    BREAKAGES[breakage](doc)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema())


def test_write_json_roundtrip(tmp_path, all_docs):
    path = tmp_path / "out.json"
    write_json(path, all_docs["example_net"])
    assert json.loads(path.read_text()) == all_docs["example_net"]
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
