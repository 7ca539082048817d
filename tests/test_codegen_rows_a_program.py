"""Looped rows two a program (a candidate of the looped and split kinds, choices.CANDIDATES):
how a candidate's rows are read, and the looped kernel at two rows a program against eager,
the row count odd (the last program's second row masked) and the width not a multiple of the
column step."""

import pytest
import torch
from codegen_harness import compare
from test_codegen_split_rows import FAMILIES, LOOPED, _launches, _load

from fusion_core.codegen import tuning
from fusion_core.codegen.choices import CANDIDATES


@pytest.mark.parametrize("candidate,bucket,config", [
    ((4096, 16, 2), (16384, 1024), (4096, 2, 16)),
    ((4096, 16), (16384, 1024), (4096, 1, 16)),  # no third number: one row
    ((4096, 16, 2), (16384, 1), (4096, 1, 16)),  # no more rows than the bucket's
    ((4096, 4, 2), (16384, 1024), (4096, 2, 8)),  # at most 32 values a thread
])
def test_a_looped_candidate_reads_its_rows(candidate, bucket, config):
    assert tuning._looped_config(bucket, candidate) == config


@pytest.mark.parametrize("candidate,bucket,config", [
    ((4096, 16, 1, 2), (16384, 1024), (4096, 2, 16, 1)),  # one program a row: 2 rows each
    ((4096, 16, 4, 1), (65536, 256), (4096, 1, 16, 4, 1)),  # a split row: the fourth is joined
    ((4096, 8, 4), (65536, 64), (4096, 1, 8, 4)),
])
def test_a_split_candidate_takes_rows_only_where_a_row_is_one_programs(
        monkeypatch, candidate, bucket, config):
    monkeypatch.setattr(tuning, "SPLIT_PROGRAMS", 256)
    assert tuning._split_config(bucket, candidate) == config


def test_both_looped_kinds_time_two_rows_a_program():
    assert (4096, 16, 2) in CANDIDATES["looped"]
    assert (4096, 16, 1, 2) in CANDIDATES["split"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ["layer_norm", "softmax", "rms_norm"])
def test_two_rows_a_program_match_eager(name, dtype, tmp_path):
    """5 rows of 1000 columns at 256 a step, two rows a program: 3 programs, the last one's
    second row past the tensor."""
    torch.manual_seed(5)
    x = torch.randn(5, 1000).to(dtype)
    module, launch, inputs, want = _load(FAMILIES[name], x, tmp_path, LOOPED)
    assert module.KIND in ("looped", "split")
    module.HEURISTIC = lambda bucket: (256, 2, 2, 1) if module.KIND == "split" else (256, 2, 2)
    seen = _launches(module)
    got = launch(*inputs).cpu()
    assert seen == [("kernel", (3,))]
    compare(got, want, f"two rows a program: {name} {dtype}")
