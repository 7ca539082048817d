"""The row mask of reduction and tiled kernels (codegen/emit.py, ``_ROW_MASK``): at one row a
program no row passes the last, and Triton drops the row from the masks; at several rows a
program the last program's rows past the end stay masked."""

import re

import pytest
import torch
from codegen_harness import Lambda, catch_launch, run_kernel, ttir_for_gpu

from fusion_core.codegen import Tuning, generate
from fusion_core.pipeline import analyze


def _softmax_kernel(width: int, tuning: Tuning | None = None):
    model = Lambda(lambda m, x: torch.softmax(x * 0.125, -1))
    analysis = analyze(model, torch.empty(4, width))
    (cluster,) = analysis.clusters
    return generate(analysis, cluster, tuning)


def _body_reads(ttir: str, names: list[str], param: str) -> bool:
    """Whether the kernel's body (after the `tt.func` line) reads the parameter `param` (named
    by Triton 3.9's IR, numbered by 3.6's)."""
    body = ttir[ttir.index("tt.func"):].split("\n", 1)[1]
    return re.search(rf"%({param}|arg{names.index(param)})\b", body) is not None


@pytest.mark.parametrize("rows_per_program,reads_n_rows", [(1, False), (2, True)])
def test_the_compiled_kernel_reads_n_rows_only_when_a_program_takes_several_rows(
        rows_per_program, reads_n_rows, tmp_path):
    kernel = _softmax_kernel(64)
    ttir, names = ttir_for_gpu(kernel, tmp_path, (torch.randn(5, 64),),
                               {"ROWS_PER_PROGRAM": rows_per_program})
    assert "n_rows" in names
    assert _body_reads(ttir, names, "n_rows") is reads_n_rows


def test_rows_past_the_last_stay_masked_when_programs_take_several_rows(tmp_path,
                                                                        monkeypatch):
    """301 rows of 40 columns, several rows a program (the launcher's pick, checked): the last
    program's rows past the end store nothing past the output (allocated here with a
    sentinel-filled tail), and the rows inside match eager."""
    kernel = _softmax_kernel(40)
    x = torch.randn(301, 40, generator=torch.Generator().manual_seed(0))
    rows = catch_launch(kernel, tmp_path / "caught", (x,))["kwargs"]["ROWS_PER_PROGRAM"]
    assert rows > 1 and 301 % rows
    tails, real = [], torch.empty_strided

    def padded(size, stride, **kwargs):  # the output, then 4096 sentinels after its last element
        span = 1 + sum((n - 1) * st for n, st in zip(size, stride, strict=True))
        whole = real((span + 4096,), (1,), **kwargs).fill_(7.0)
        tails.append(whole[span:])
        return whole.as_strided(size, stride)

    monkeypatch.setattr(torch, "empty_strided", padded)
    (got,) = run_kernel(kernel, tmp_path, (x,))
    monkeypatch.undo()
    assert tails and all(bool((tail == 7.0).all()) for tail in tails)
    torch.testing.assert_close(got, torch.softmax(x * 0.125, -1))


def _masked(ttir: str, op: str) -> list[bool]:
    """Whether each `tt.load` (`tt.store`) in the IR takes a mask operand."""
    operands = {"tt.load": 1, "tt.store": 2}[op]  # the pointer (and the value) before a mask
    found = re.findall(rf"{op} (%[^:{{]*?) [:{{]", ttir)  # operands, then attributes or type
    assert found, f"no {op} in the IR"
    return [len(args.split(", ")) > operands for args in found]


@pytest.mark.parametrize("width,whole", [(64, True), (40, False)])
def test_a_row_of_whole_blocks_loads_and_stores_without_masks(width, whole, tmp_path):
    """One block a row: the launcher says the columns fill it (EVEN_COLS) and Triton drops the
    masks of the row's loads and stores; a row shorter than its block keeps them."""
    kernel = _softmax_kernel(width)
    x = torch.randn(6, width)
    launch = catch_launch(kernel, tmp_path / "caught", (x,))["kwargs"]
    assert launch["BLOCK_SIZE"] == 64 and launch["EVEN_COLS"] is whole
    ttir, _ = ttir_for_gpu(kernel, tmp_path, (x,))
    assert _masked(ttir, "tt.load") == [not whole]
    assert _masked(ttir, "tt.store") == [not whole]


def test_a_looped_row_of_whole_blocks_loads_its_blocks_without_masks(tmp_path):
    """A row looping over blocks that divide it: both passes' loads and the store unmasked."""
    model = Lambda(lambda m, x: torch.softmax(x * 0.125, -1))
    analysis = analyze(model, torch.empty(4, 256))
    kernel = generate(analysis, analysis.clusters[0], looped=True)
    assert kernel.looped
    x = torch.randn(6, 256)
    ttir, _ = ttir_for_gpu(kernel, tmp_path, (x,), {"BLOCK_SIZE": 64, "EVEN_COLS": True})
    assert _masked(ttir, "tt.load") == [False, False]
    assert _masked(ttir, "tt.store") == [False]
    (got,) = run_kernel(kernel, tmp_path / "run", (x,))
    torch.testing.assert_close(got, torch.softmax(x * 0.125, -1))
