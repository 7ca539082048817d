"""The heuristic's untimed pick (what a launcher uses before any timing: CPU, the interpreter,
FUSION_ADVISOR_AUTOTUNE=0, a CUDA graph being captured) against the H200 panel committed in
benchmarks/measured: for every measured case, the pick for the case's shape bucket must be one
of the candidates the panel timed, within 3% of the fastest of them. Each case's kernel file is
generated here (at its tiny shapes, in its dtype, looped as on the GPU), and the file's own
`_bucket` and `HEURISTIC` give the pick, so a change to the heuristics, the tuning constants
written into files, or the bucketing that would lose on the H200 fails on CPU."""

from __future__ import annotations

import json
import sys
from math import prod
from pathlib import Path

import pytest
import torch

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.pipeline import analyze

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from panel_cases import CASES, Fn1, Fn2  # noqa: E402

PANEL = ROOT / "benchmarks" / "measured" / "shapes_panel_h200_2026-12-04.json"
WITHIN = 1.03  # the bar: the default within 3% of the best candidate


def _measured_rows() -> list[dict]:
    """The panel's rows that timed their candidates (skipped and unfused cases have none)."""
    rows = json.loads(PANEL.read_text())["rows"]
    return [r for r in rows if r.get("candidates")]


ROWS = _measured_rows()


def _case(label: str, dtype: str):
    matches = [c for c in CASES if c.label == label and str(c.dtype) == f"torch.{dtype}"]
    assert len(matches) == 1, f"{label} {dtype}: {len(matches)} cases in panel_cases.py"
    return matches[0]


def _kernel_module(case, looped: bool, tmp_path: Path):
    """The case's kernel file as the panel generated it (default tuning), at tiny shapes: the
    constants its heuristic reads depend on the dtype and the kind, not on the shapes."""
    gen = torch.Generator().manual_seed(0)
    width = case.tiny[0][-1]
    params = {p: torch.randn(width, generator=gen).to(case.dtype) for p in case.params}
    module = (Fn2 if len(case.tiny) == 2 else Fn1)(case.fn, width, params)
    inputs = [torch.randn(s, generator=gen).to(case.dtype) for s in case.tiny]
    analysis = analyze(module, *inputs)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, None, looped=looped)
    return load_kernel(write_kernels([kernel], tmp_path)[0])


def test_the_panel_measured_every_kind_of_row_kernel():
    """The rows below cover whole rows and split rows, several dtypes and widths."""
    assert len(ROWS) >= 30
    assert {r["kernel"]["kind"] for r in ROWS} == {"single", "split"}
    assert {r["dtype"] for r in ROWS} == {"float16", "bfloat16", "float32"}


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['case']} {r['dtype']}" for r in ROWS])
def test_the_untimed_pick_is_within_3_percent_of_the_best_candidate(row, tmp_path):
    module = _kernel_module(_case(row["case"], row["dtype"]), row["kernel"]["looped"], tmp_path)
    assert module.KIND == row["kernel"]["kind"]
    (shape,) = {tuple(s) for s in row["shapes"]}  # the cases' inputs share one row shape
    bucket = module._bucket(prod(shape[:-1]), shape[-1])
    pick = module.HEURISTIC(bucket)
    timed = {tuple(c["config"]): c["us"] for c in row["candidates"]}
    best = min(timed.values())
    assert pick in timed, (f"bucket {bucket}: the pick {pick} was not timed on the H200 "
                           f"(timed: {sorted(timed)})")
    assert timed[pick] <= WITHIN * best, (
        f"bucket {bucket}: the pick {pick} took {timed[pick]:.1f} us, "
        f"{timed[pick] / best:.3f}x the best candidate "
        f"{min(timed, key=timed.get)} ({best:.1f} us)")
