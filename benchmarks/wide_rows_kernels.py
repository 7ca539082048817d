"""The hand-written kernels of ``wide_rows_probe.py`` (see its docstring): a row in one block,
a row split over programs that wait for each other's partial statistics (the chunk held in
registers, or loaded again), and the same split stepping over its chunk in column blocks.
KIND 0 is rms_norm, 1 layer_norm (times `scale`), 2 softmax (of x times `scale`)."""

from __future__ import annotations

import triton
import triton.language as tl

SPIN_LIMIT = tl.constexpr(1 << 22)  # polls of a partner's arrival before a row gives up (NaN)


@triton.jit
def row_whole(X, W, B, Y, N, ROWS, eps, scale, KIND: tl.constexpr, BLOCK: tl.constexpr):
    """One row a program, the row in one block (KIND 0 rms_norm, 1 layer_norm, 2 softmax).
    Rows past ROWS are masked: should a cluster's program ids count CTAs, the error column
    says so instead of the launch writing out of bounds."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < tl.where(row < ROWS, N, 0)
    if KIND == 2:
        x = tl.load(X + row * N + cols, mask=m, other=float("-inf")).to(tl.float32) * scale
        e = tl.exp(x - tl.max(x, 0))
        y = e / tl.sum(e, 0)
    else:
        x = tl.load(X + row * N + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        if KIND == 0:
            y = x * tl.rsqrt(tl.sum(x * x, 0) / N + eps) * w
        else:
            mean = tl.sum(x, 0) / N
            d = tl.where(m, x - mean, 0.0)
            b = tl.load(B + cols, mask=m, other=0.0).to(tl.float32)
            y = (d * tl.rsqrt(tl.sum(d * d, 0) / N + eps) * w + b) * scale
    tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=m)


@triton.jit
def row_split(X, W, B, Y, P, CNT, N, ROWS, eps, scale, KIND: tl.constexpr,
               RSPLIT: tl.constexpr, CHUNK: tl.constexpr, REREAD: tl.constexpr):
    """Each row over RSPLIT programs, each chunk in registers; partials in P (ROWS, RSPLIT, 2)
    fp32, arrivals counted in CNT (ROWS,) int32, zero at launch. Programs past ROWS x RSPLIT
    loop over rows (a cooperative grid). REREAD: the chunk loaded again after the wait (from
    L1 or L2, as a kernel made of the looped kernel's two passes would) instead of kept."""
    pid = tl.program_id(0)
    groups = tl.num_programs(0) // RSPLIT
    part = pid % RSPLIT
    cols = part * CHUNK + tl.arange(0, CHUNK)
    m = cols < N
    n_here = tl.minimum(N - part * CHUNK, CHUNK).to(tl.float32)  # variants() skips empty chunks
    parts = tl.arange(0, RSPLIT)
    if KIND != 2:
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    if KIND == 1:
        b = tl.load(B + cols, mask=m, other=0.0).to(tl.float32)
    for row in range(pid // RSPLIT, ROWS, groups):
        base = tl.cast(row, tl.int64) * N
        if KIND == 2:
            x = tl.load(X + base + cols, mask=m, other=float("-inf")).to(tl.float32) * scale
            a = tl.max(x, 0)
            s = tl.sum(tl.exp(x - a), 0)
        else:
            x = tl.load(X + base + cols, mask=m, other=0.0).to(tl.float32)
            if KIND == 0:
                a = tl.sum(x * x, 0)
                s = a
            else:
                a = tl.sum(x, 0) / n_here  # this chunk's mean...
                d = tl.where(m, x - a, 0.0)
                s = tl.sum(d * d, 0)  # ...and its centered sum of squares
        slot = P + (row * RSPLIT + part) * 2
        tl.store(slot, a)
        tl.store(slot + 1, s)
        tl.debug_barrier()  # every thread's stores before the arrival
        tl.atomic_add(CNT + row, 1, sem="release")
        seen = tl.atomic_add(CNT + row, 0, sem="acquire")
        spins = 0
        while (seen < RSPLIT) & (spins < SPIN_LIMIT):  # a stuck partner: NaN, not a hang
            seen = tl.atomic_add(CNT + row, 0, sem="acquire")
            spins += 1
        tl.debug_barrier()
        if REREAD:
            if KIND == 2:
                x = tl.load(X + base + cols, mask=m, other=float("-inf")).to(tl.float32) * scale
            else:
                x = tl.load(X + base + cols, mask=m, other=0.0).to(tl.float32)
        pa = tl.load(P + (row * RSPLIT + parts) * 2, cache_modifier=".cg")
        ps = tl.load(P + (row * RSPLIT + parts) * 2 + 1, cache_modifier=".cg")
        if KIND == 2:
            top = tl.max(pa, 0)
            y = tl.exp(x - top) / tl.sum(ps * tl.exp(pa - top), 0)
        elif KIND == 0:
            y = x * tl.rsqrt(tl.sum(ps, 0) / N + eps) * w
        else:
            counts = tl.minimum(N - parts * CHUNK, CHUNK).to(tl.float32)
            mean = tl.sum(pa * counts, 0) / N
            m2 = tl.sum(ps + counts * (pa - mean) * (pa - mean), 0)
            y = ((x - mean) * tl.rsqrt(m2 / N + eps) * w + b) * scale
        y = tl.where(seen >= RSPLIT, y, float("nan"))
        tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=m)
        # Leaving: the last of the row's programs to leave sets its counter back to 0 (each
        # adds its departure after its wait, so none is still waiting then).
        if tl.atomic_add(CNT + row, 1, sem="relaxed") == 2 * RSPLIT - 1:
            tl.atomic_xchg(CNT + row, 0, sem="relaxed")


@triton.jit
def row_split_looped(X, W, B, Y, P, CNT, N, eps, scale, KIND: tl.constexpr,
                      RSPLIT: tl.constexpr, CHUNK: tl.constexpr, STEP: tl.constexpr):
    """A row over RSPLIT programs as in ``row_split`` (``ordered``), each stepping over its
    chunk STEP columns at a time twice (statistics, then each element), as the generator's
    looped kernel does over a row and its split kernels over a chunk: the form a generated
    "split rows in one launch" would take (the two split kernels joined by the wait)."""
    pid = tl.program_id(0)
    row, part = pid // RSPLIT, pid % RSPLIT
    base = tl.cast(row, tl.int64) * N
    lanes = tl.arange(0, STEP)
    start = part * CHUNK
    end = tl.minimum(start + CHUNK, N)
    if KIND == 2:
        lmax = tl.full([STEP], float("-inf"), tl.float32)
    else:
        lmax = tl.zeros([STEP], tl.float32)
    lsum = tl.zeros([STEP], tl.float32)
    for c0 in range(start, end, STEP):
        cols = c0 + lanes
        m = cols < end
        if KIND == 2:
            x = tl.load(X + base + cols, mask=m, other=float("-inf")).to(tl.float32) * scale
            new = tl.maximum(lmax, x)
            lsum = lsum * tl.exp(lmax - new) + tl.where(m, tl.exp(x - new), 0.0)
            lmax = tl.where(new == float("-inf"), lmax, new)
        else:
            x = tl.load(X + base + cols, mask=m, other=0.0).to(tl.float32)
            lmax += x  # layer_norm: the sum (of the chunk's lanes)
            lsum += x * x
    if KIND == 2:
        a = tl.max(lmax, 0)
        s = tl.sum(lsum * tl.exp(lmax - a), 0)
    else:
        a = tl.sum(lmax, 0)
        s = tl.sum(lsum, 0)
    slot = P + (row * RSPLIT + part) * 2
    tl.store(slot, a)
    tl.store(slot + 1, s)
    tl.debug_barrier()
    tl.atomic_add(CNT + row, 1, sem="release")
    seen = tl.atomic_add(CNT + row, 0, sem="acquire")
    spins = 0
    while (seen < RSPLIT) & (spins < SPIN_LIMIT):
        seen = tl.atomic_add(CNT + row, 0, sem="acquire")
        spins += 1
    tl.debug_barrier()
    parts = tl.arange(0, RSPLIT)
    pa = tl.load(P + (row * RSPLIT + parts) * 2, cache_modifier=".cg")
    ps = tl.load(P + (row * RSPLIT + parts) * 2 + 1, cache_modifier=".cg")
    if KIND == 2:
        top = tl.max(pa, 0)
        total = tl.sum(ps * tl.exp(pa - top), 0)
    else:
        mean = tl.sum(pa, 0) / N
        rstd = tl.rsqrt(tl.maximum(tl.sum(ps, 0) / N - mean * mean, 0.0) + eps)
        if KIND == 0:
            rstd = tl.rsqrt(tl.sum(ps, 0) / N + eps)
    for c0 in range(start, end, STEP):
        cols = c0 + lanes
        m = cols < end
        if KIND == 2:
            x = tl.load(X + base + cols, mask=m, other=float("-inf")).to(tl.float32) * scale
            y = tl.exp(x - top) / total
        else:
            x = tl.load(X + base + cols, mask=m, other=0.0).to(tl.float32)
            w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
            if KIND == 0:
                y = x * rstd * w
            else:
                bias = tl.load(B + cols, mask=m, other=0.0).to(tl.float32)
                y = ((x - mean) * rstd * w + bias) * scale
        y = tl.where(seen >= RSPLIT, y, float("nan"))
        tl.store(Y + base + cols, y.to(Y.dtype.element_ty), mask=m)
    if tl.atomic_add(CNT + row, 1, sem="relaxed") == 2 * RSPLIT - 1:
        tl.atomic_xchg(CNT + row, 0, sem="relaxed")
