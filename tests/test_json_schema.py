"""The --json document: valid against the JSON Schema shipped in the package for every
kind of result (clusters, rejections, multi-output, several inputs), and the schema
really rejects malformed documents."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from analysis_helpers import run

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.report.json_report import schema, to_document, write_json

jsonschema = pytest.importorskip("jsonschema")  # the GPU box's environment lacks it

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


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
                                  "no clusters", "capture fallback", "kernel skipped"])
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


BREAKAGES = {
    "wrong schema_version": lambda d: d.update(schema_version=99),
    "missing totals": lambda d: d.pop("totals"),
    "unknown frontend": lambda d: d.update(frontend="jit"),
    "negative shape": lambda d: d["inputs"][0].update(shape=[-1, 1024]),
    "cluster without ops": lambda d: d["clusters"][0].pop("ops"),
    "traffic as string": lambda d: d["clusters"][0]["traffic"].update(unfused_bytes="384 MB"),
    "bad lines": lambda d: d["clusters"][0].update(lines={"file": "x.py", "start": 0, "end": 1}),
    "capture_fallback on two lines": lambda d: d.update(capture_fallback="a\nb"),
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
