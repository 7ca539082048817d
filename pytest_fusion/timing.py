"""Noise-aware timing comparison: is the current kernel really slower than the baseline?

Reads two lists of repeated timing samples (baseline, current; any unit, lower is
better); returns a ``TimingVerdict``. A slowdown is called only when the ratio of
medians exceeds the tolerance *and* a one-sided Mann–Whitney U test says the
difference is significant given the spread (the rule asv uses), so one noisy
sample never fails a build. Pure functions, no I/O: tested on synthetic data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from statistics import median

MIN_SAMPLES = 3
EXACT_LIMIT = 400  # m*n up to which the exact null distribution is used (no ties)


@dataclass(frozen=True)
class TimingVerdict:
    status: str  # "slower" | "faster" | "same" | "insufficient"
    ratio: float  # median(current) / median(baseline); nan when not computable
    p_slower: float  # one-sided p-value for "current is slower"
    p_faster: float
    base_median: float
    current_median: float

    @property
    def change(self) -> str:
        """`+27%` / `-12%`: the relative change of the median."""
        return f"{(self.ratio - 1) * 100:+.0f}%"


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties get their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@cache
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """Number of orderings giving each U = 0..m*n for samples of sizes m and n (no ties)."""
    if m == 0 or n == 0:
        return (1,)
    # The largest value belongs to the first sample (adds n to U) or to the second.
    a, b = _u_counts(m - 1, n), _u_counts(m, n - 1)
    return tuple((a[u - n] if 0 <= u - n < len(a) else 0) + (b[u] if u < len(b) else 0)
                 for u in range(m * n + 1))


def mann_whitney_greater(x: list[float], y: list[float]) -> float:
    """One-sided p-value that `x` tends to be larger than `y` (H0: same distribution)."""
    m, n = len(x), len(y)
    ranks = _ranks(list(x) + list(y))
    u = sum(ranks[:m]) - m * (m + 1) / 2  # pairs (xi, yj) with xi > yj, ties count half
    tied = len(set(x) | set(y)) < m + n
    if not tied and m * n <= EXACT_LIMIT:
        counts = _u_counts(m, n)
        return sum(counts[math.ceil(u):]) / math.comb(m + n, m)
    # Normal approximation with tie and continuity corrections.
    total = m + n
    groups: dict[float, int] = {}
    for v in list(x) + list(y):
        groups[v] = groups.get(v, 0) + 1
    tie_term = sum(t ** 3 - t for t in groups.values()) / (total * (total - 1))
    var = m * n / 12 * ((total + 1) - tie_term)
    if var <= 0:
        return 1.0  # every sample identical: no evidence either way
    z = (u - m * n / 2 - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


def compare_samples(baseline: list[float], current: list[float], tolerance: float,
                    alpha: float = 0.05, min_samples: int = MIN_SAMPLES) -> TimingVerdict:
    """Slower/faster only when the median moved past `tolerance` and the shift is significant.

    `tolerance` is relative (0.10 = 10% slower allowed); the faster side uses the
    same factor (current <= baseline / (1 + tolerance)).
    """
    if len(baseline) < min_samples or len(current) < min_samples:
        nan = float("nan")
        return TimingVerdict("insufficient", nan, nan, nan,
                             median(baseline) if baseline else nan,
                             median(current) if current else nan)
    b, c = median(baseline), median(current)
    ratio = c / b if b > 0 else float("inf")
    p_slower = mann_whitney_greater(current, baseline)
    p_faster = mann_whitney_greater(baseline, current)
    if ratio > 1 + tolerance and p_slower < alpha:
        status = "slower"
    elif ratio < 1 / (1 + tolerance) and p_faster < alpha:
        status = "faster"
    else:
        status = "same"
    return TimingVerdict(status, ratio, p_slower, p_faster, b, c)
