"""The noise-aware timing comparison (pytest_fusion.timing) on synthetic samples."""

import math
import random
from itertools import combinations

import pytest

from pytest_fusion.timing import compare_samples, mann_whitney_greater


def _brute_force_p(x, y):
    """P(U >= observed) by enumerating every split of the pooled samples (small n only)."""
    pooled = list(x) + list(y)

    def u(xs, ys):
        return sum((a > b) + 0.5 * (a == b) for a in xs for b in ys)

    observed = u(x, y)
    splits = list(combinations(range(len(pooled)), len(x)))
    hits = 0
    for idx in splits:
        xs = [pooled[i] for i in idx]
        ys = [pooled[i] for i in range(len(pooled)) if i not in idx]
        hits += u(xs, ys) >= observed - 1e-9
    return hits / len(splits)


@pytest.mark.parametrize("seed", range(5))
def test_exact_p_value_matches_enumeration(seed):
    rng = random.Random(seed)
    x = [rng.uniform(0, 10) for _ in range(5)]
    y = [rng.uniform(1, 11) for _ in range(4)]
    assert mann_whitney_greater(x, y) == pytest.approx(_brute_force_p(x, y))


def test_fully_separated_samples_give_the_smallest_p():
    assert mann_whitney_greater([4, 5, 6], [1, 2, 3]) == pytest.approx(1 / 20)
    assert mann_whitney_greater([1, 2, 3], [4, 5, 6]) == pytest.approx(1.0)


def test_normal_approximation_with_ties_is_close_to_enumeration():
    x = [10, 11, 11, 12, 13, 13, 14]
    y = [9, 10, 10, 11, 12, 12]
    assert mann_whitney_greater(x, y) == pytest.approx(_brute_force_p(x, y), abs=0.03)


def test_identical_samples_are_never_significant():
    assert mann_whitney_greater([5.0] * 8, [5.0] * 8) == 1.0
    assert compare_samples([5.0] * 8, [5.0] * 8, 0.1).status == "same"


def test_clear_slowdown_beyond_tolerance_is_slower():
    rng = random.Random(1)
    base = [40 + rng.gauss(0, 0.5) for _ in range(10)]
    cur = [52 + rng.gauss(0, 0.5) for _ in range(10)]
    v = compare_samples(base, cur, tolerance=0.10)
    assert v.status == "slower"
    assert v.ratio == pytest.approx(1.3, abs=0.03)
    assert v.p_slower < 0.001
    assert v.change == "+30%"


def test_significant_but_within_tolerance_is_same():
    base = [40.0 + i * 0.01 for i in range(10)]
    cur = [42.0 + i * 0.01 for i in range(10)]  # 5% slower, no overlap at all
    v = compare_samples(base, cur, tolerance=0.10)
    assert v.p_slower < 0.001 and v.status == "same"


def test_large_median_shift_inside_noise_is_same():
    """A 20% median shift with overlapping, very noisy samples is not called a regression."""
    base = [20, 60, 35, 90, 40, 25]
    cur = [70, 30, 48, 95, 22, 50]
    v = compare_samples(base, cur, tolerance=0.10)
    assert v.ratio > 1.1
    assert v.status == "same"


def test_one_outlier_does_not_fail():
    base = [40.0, 40.2, 39.9, 40.1, 40.0, 39.8, 40.3, 40.1]
    cur = [40.1, 39.9, 40.2, 95.0, 40.0, 40.1, 39.8, 40.2]  # one sample hit by noise
    assert compare_samples(base, cur, tolerance=0.10).status == "same"


def test_clear_speedup_is_faster():
    base = [50.0, 51.0, 49.5, 50.5, 50.2]
    cur = [30.0, 31.0, 29.5, 30.5, 30.2]
    v = compare_samples(base, cur, tolerance=0.10)
    assert v.status == "faster" and v.p_faster < 0.01


def test_too_few_samples_are_insufficient():
    v = compare_samples([40.0, 41.0], [90.0, 91.0], tolerance=0.10)
    assert v.status == "insufficient" and math.isnan(v.ratio)


def _try_lock_elsewhere(device_id: str) -> str:
    """Another process's attempt to take the GPU lock without waiting: `taken` or `busy`."""
    import subprocess
    import sys

    code = ("import sys\nfrom pytest_fusion.measure import device_lock\n"
            "try:\n    with device_lock(sys.argv[1], blocking=False):\n        print('taken')\n"
            "except BlockingIOError:\n    print('busy')\n")
    done = subprocess.run([sys.executable, "-c", code, device_id], capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stdout.strip()


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="flock is POSIX-only")
def test_measuring_holds_the_gpu_lock_so_workers_take_turns(monkeypatch):
    import uuid

    import torch

    import fusion_core
    from pytest_fusion import measure

    gpu = f"test-gpu-{uuid.uuid4()}"  # a name no other run uses
    seen = []

    def fake_measure(analysis):
        seen.append(_try_lock_elsewhere(gpu))
        return {"clusters": []}

    monkeypatch.setattr(fusion_core, "measure", fake_measure, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(measure, "_device_id", lambda: gpu)
    assert measure.default_measure(object(), "cuda") == {"clusters": []}
    assert seen == ["busy"]  # a second worker waits while this one times
    assert _try_lock_elsewhere(gpu) == "taken"  # and gets it once the timing is done
