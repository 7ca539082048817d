"""Fuzz `--apply`: random small models (apply_fuzz_models.py) rewritten and compared with
their originals (apply_fuzz_run.py). Slow, so off by default: FUSION_APPLY_FUZZ=COUNT runs
COUNT seeds from FUSION_APPLY_FUZZ_START (default 0), ~0.3 s each under the interpreter;
`tools/apply_fuzz.py` runs the same with a log. A failure names the seed: the model is
`make_model(seed)`, kept under the test's tmp_path.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from apply_fuzz_run import OK, run_one

COUNT = int(os.environ.get("FUSION_APPLY_FUZZ", "0"))
START = int(os.environ.get("FUSION_APPLY_FUZZ_START", "0"))


@pytest.mark.skipif(not COUNT, reason="slow: set FUSION_APPLY_FUZZ=COUNT to run it")
@pytest.mark.parametrize("seed", range(START, START + COUNT))
def test_apply_keeps_what_a_random_model_computes(tmp_path: Path, seed: int):
    info = run_one(seed, tmp_path)
    assert info["status"] in OK, f"seed {seed}: {info['status']}: {info.get('why')}"
