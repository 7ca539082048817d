"""Reshapes sized by numbers (codegen/literal_sizes.py): eager's result keeps those sizes at
any input size (only a `-1` follows the element count), while a kernel's steps follow the
input's dims. At an input size where the two part, the launcher refuses, naming the input,
its dim and the size the reshape needs; where they agree, it follows the new size."""

import tempfile
from pathlib import Path

import pytest
import torch
from codegen_harness import DEVICE, Lambda

from fusion_core.codegen import generate, load_kernel, write_kernels
from fusion_core.pipeline import analyze


def _kernel(fn, *shapes: tuple[int, ...], capture: str = "fx"):
    a = analyze(Lambda(fn, len(shapes)), *(torch.randn(s) for s in shapes), capture=capture)
    assert len(a.clusters) == 1
    (path,) = write_kernels([generate(a, a.clusters[0])], Path(tempfile.mkdtemp()))
    return load_kernel(path).cluster0


def _randn(*sizes: int) -> torch.Tensor:
    """A kernel's input where it runs: the GPU when there is one (analysis stays on CPU)."""
    return torch.randn(*sizes, device=DEVICE)


def _split_batch_of_one(m, x):
    return torch.sigmoid(x).reshape(1, 5, 2, -1) * 2.0


def test_numbered_batch_refused_at_another_batch():
    """The fuzzer's case: `Unflatten(2, (2, 4))` at (1, 5, 8) would give (3, 5, 2, 4) at a
    batch of 3; eager gives (1, 5, 2, 12)."""
    k = _kernel(_split_batch_of_one, (1, 5, 8))
    x = _randn(1, 5, 8)
    torch.testing.assert_close(k(x), _split_batch_of_one(None, x))
    with pytest.raises(ValueError) as e:
        k(_randn(3, 5, 8))
    msg = str(e.value)
    assert "\n" not in msg
    assert "is 3 long in dim 0; this kernel needs 1 there" in msg
    assert "`reshape` (test_codegen_literal_reshape.py:" in msg
    assert "(1, 5, 2, -1)" in msg
    assert msg.endswith("regenerate it at these sizes or keep the original ops")


def _sum_split(m, x, y):
    return torch.sigmoid(x + y).reshape(1, 5, 2, -1) * 2.0


def test_batch_of_one_on_both_sides_of_a_broadcast():
    """Both operands' batch was 1: either may grow (the larger wins); each must stay 1."""
    k = _kernel(_sum_split, (1, 5, 8), (1, 5, 8))
    with pytest.raises(ValueError, match=r"`a` is 3 long in dim 0; this kernel needs 1 there"):
        k(_randn(3, 5, 8), _randn(3, 5, 8))


def _rows(m, x):
    return torch.relu(x).reshape(-1, 4) + 1.0


def _rows_viewed(m, x):
    return (x * 3.0).view(-1, 4).sigmoid()


@pytest.mark.parametrize("fn", [_rows, _rows_viewed])
def test_minus_one_rows_follow_another_batch(fn):
    """`reshape(-1, C)`: the `-1` takes the leading dims whatever they are, as eager does."""
    k = _kernel(fn, (2, 3, 4))
    for shape in [(2, 3, 4), (5, 3, 4), (5, 7, 4)]:
        x = _randn(*shape)
        torch.testing.assert_close(k(x), fn(None, x))
    with pytest.raises(ValueError, match=r"is 6 long in dim 2; this kernel needs 4 there"):
        k(_randn(2, 3, 6))  # eager: (6, 4) rows of another width


def _merge_all(m, x):
    return torch.sigmoid(x).reshape(2, 40) - 1.0


def _to_rows_of_ten(m, x):
    return torch.sigmoid(x).reshape(10, 8) - 1.0


def test_numbered_sizes_without_minus_one():
    """No `-1`: eager gives (2, 40) for any 80 elements; the kernel's merge of dims 1-2
    gives (5, 16) at (5, 2, 8): refused. A product of dims that keeps the number passes."""
    k = _kernel(_merge_all, (2, 5, 8))
    with pytest.raises(ValueError, match=r"`a` is 5 long in dim 0; this kernel needs 2 there"):
        k(_randn(5, 2, 8))
    k = _kernel(_to_rows_of_ten, (2, 5, 8))
    x = _randn(5, 2, 8)  # dims 0-1 still hold 10: eager's (10, 8) too
    torch.testing.assert_close(k(x), _to_rows_of_ten(None, x))
    with pytest.raises(ValueError, match=r"`a` holds 12 elements in dims 0, 1; this kernel "
                                         r"needs 10 there"):
        k(_randn(4, 3, 8))


def _pairs(m, x):
    return (x * 3.0).view(-1, 4, 2).sigmoid()


def test_minus_one_the_steps_fix_pins_the_element_count():
    """`view(-1, 4, 2)` of (2, 5, 8) is a ``Reshape`` to (10, 4, 2): at 120 elements torch's
    own view error would name no kernel; at 80 in another shape eager agrees."""
    k = _kernel(_pairs, (2, 5, 8))
    x = _randn(5, 2, 8)
    torch.testing.assert_close(k(x), _pairs(None, x))
    with pytest.raises(ValueError, match=r"`a` holds 120 elements in dims 0, 1, 2; this kernel "
                                         r"needs 80 there: `view` \(.*\) reads 80 elements, "
                                         r"its `-1` \(dim 0 of \(-1, 4, 2\)\) read as 10"):
        k(_randn(3, 5, 8))


B, H, T, D = 2, 3, 4, 5


def _heads_merged(m, x, b):
    """A permuted value's heads merged with numbers (test_codegen_permuted_reshape.py)."""
    y = (x * 2.0).permute(0, 2, 1, 3)
    return torch.relu(y).reshape(B, T, H * D) + b


def test_permuted_value_with_numbered_sizes():
    k = _kernel(_heads_merged, (B, H, T, D), (H * D,))
    x, b = _randn(B, H, T, D), _randn(H * D)
    torch.testing.assert_close(k(x, b), _heads_merged(None, x, b))
    with pytest.raises(ValueError, match=r"this kernel needs 2 there"):
        k(_randn(3, H, T, D), b)  # eager: `reshape(2, 4, 15)` of 180 elements fails


def _heads_split_from_shape(m, x):
    b, t, c = x.shape
    return torch.relu(x).view(b, t, 2, c // 2) + 1.0


def test_export_records_sizes_read_from_shapes_as_numbers():
    """Export captures `view(b, t, 2, c // 2)` as `view(2, 3, 2, 2)`: no telling it from
    numbers, so another batch is refused (FX capture reads the sizes and follows); its
    `reshape(-1, 4)` keeps the `-1` and follows."""
    x = _randn(5, 3, 4)
    k = _kernel(_heads_split_from_shape, (2, 3, 4))
    torch.testing.assert_close(k(x), _heads_split_from_shape(None, x))
    k = _kernel(_heads_split_from_shape, (2, 3, 4), capture="export")
    with pytest.raises(ValueError, match=r"`a` is 5 long in dim 0; this kernel needs 2 there.*"
                                         r"export captures sizes read from shapes so"):
        k(x)
    k = _kernel(_rows, (2, 3, 4), capture="export")
    torch.testing.assert_close(k(x), _rows(None, x))
