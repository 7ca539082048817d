"""Pair the records of two runs by a sequence of keys, the first key first.

Reads two lists (baseline, current) and key functions; returns the pairs and the
leftovers of each side. A key of None never pairs; equal keys pair in order.
"""

from __future__ import annotations


def match(base: list, cur: list, key, fits=None) -> tuple[list[tuple], list, list]:
    """Pair items with equal keys (None never pairs) in order, each pair also passing
    `fits`; return the pairs and the leftovers of each side."""
    pairs, rest_cur, rest_base = [], list(cur), []
    for b in base:
        k = key(b)
        hit = None if k is None else next(
            (c for c in rest_cur if key(c) == k and (fits is None or fits(b, c))), None)
        if hit is None:
            rest_base.append(b)
        else:
            rest_cur.remove(hit)
            pairs.append((b, hit))
    return pairs, rest_base, rest_cur


def staged(base: list, cur: list, keys) -> tuple[list[tuple], list, list]:
    """Pairs by each key in turn, and the leftovers."""
    pairs: list[tuple] = []
    for key in keys:
        more, base, cur = match(base, cur, key)
        pairs += more
    return pairs, base, cur
