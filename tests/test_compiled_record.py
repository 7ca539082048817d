"""compiled_record on CPU: graph breaks with their user line, Inductor's kernels with their
ops, recompiles under an extra shape, and the baseline round trip. One tiny compile."""

import inspect

import pytest
import torch
import torch.nn as nn

from fusion_core import compiled_record
from fusion_core.inductor.compiled import from_dict, to_dict

pytestmark = pytest.mark.slow  # a real torch.compile (~25 s on CPU)


class BreaksOnItem(nn.Module):
    def forward(self, x):
        y = torch.relu(x * 2)
        if y.sum().item() > 0:  # the graph break
            y = y + 1
        return y


@pytest.fixture(scope="module")
def record():
    return compiled_record(BreaksOnItem(), torch.randn(4, 8), extra_shapes=[[(6, 8)]])


def test_graph_break_names_the_item_line_and_reason(record):
    src, start = inspect.getsourcelines(BreaksOnItem.forward)
    item_line = start + next(i for i, text in enumerate(src) if ".item()" in text)
    assert record.graph_count == 2
    (brk,) = record.graph_breaks
    assert brk.line == item_line and brk.file == __file__
    assert "item()" in brk.reason and ".item()" in brk.source


def test_kernels_list_their_ops_with_user_lines(record):
    assert record.backend == "cpu-inductor" and record.torch_version == torch.__version__
    ops = {op for k in record.kernels for op in k.ops}
    assert {"mul", "relu", "add"} <= ops
    assert all(k.kind == "generated" for k in record.kernels)
    assert all(s.file == __file__ for k in record.kernels for s in k.sites)


def test_extra_shape_recompiles(record):
    assert record.recompiles >= 1


def test_recompile_gives_dynamos_guard_failure_at_the_forward(record):
    _, start = inspect.getsourcelines(BreaksOnItem.forward)
    (first, *_) = record.recompile_reasons
    assert "size mismatch" in first.reason and "expected 4, actual 6" in first.reason
    assert (first.function, first.file, first.line) == ("forward", __file__, start)


def test_bytes_moved_is_inductors_estimate(record):
    # 4×8 fp32 read and written at least once by the kernels before and after the break
    assert record.bytes_moved is not None and record.bytes_moved >= 2 * 4 * 8 * 4


class SplitByMatmul(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(8, 8))

    def forward(self, x):
        y = torch.relu(x * 2) @ self.w  # the matmul between the two kernels
        return torch.sigmoid(y)


def test_separation_names_the_matmul_between_two_kernels_in_the_analyzers_words():
    import fusion_core

    x = torch.randn(4, 8)
    rec = compiled_record(SplitByMatmul(), x, analysis=fusion_core.analyze(SplitByMatmul(), x))
    src, start = inspect.getsourcelines(SplitByMatmul.forward)
    line = start + next(i for i, text in enumerate(src) if "@ self.w" in text)
    (apart,) = rec.separations
    names = {k.name: k.ops for k in rec.kernels}
    assert (names[apart.before], names[apart.after]) == (("mul", "relu"), ("sigmoid",))
    assert apart.reason.startswith(f"the matrix product `operator.matmul` (line {line}) sits "
                                   "between them")
    verdicts = rec.agreement["cluster_verdicts"]
    assert [v["verdict"] for v in verdicts] == ["same group"]  # mul → relu, as Inductor
    assert from_dict(rec.backend, to_dict(rec)).separations == rec.separations


def test_round_trip_through_plain_data(record):
    assert from_dict(record.backend, to_dict(record)) == record


def test_one_shape_per_input_is_required():
    from fusion_core.inductor import InductorError

    with pytest.raises(InductorError, match="one shape per input"):
        compiled_record(nn.ReLU(), torch.randn(2, 2), extra_shapes=[[(3, 2), (3, 2)]])
