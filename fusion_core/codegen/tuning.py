"""Per-shape launch tuning of a generated launcher: shape buckets, candidates, the choice.

Like ``runtime.py``, real Python copied verbatim into every generated kernel file (``source()``).
A launch configuration is ``(block, rows, num_warps)``: the kernel's ``BLOCK_SIZE``, its
``ROWS_PER_PROGRAM`` (1 for flat elementwise kernels) and its warps; a looped reduction whose
rows may be split over several programs ("split") adds a fourth number, the programs per row
(1: the row loop of one program). Shapes fall into buckets
(``_bucket``); per bucket, ``_configs`` lists the heuristic's pick first (``HEURISTIC``: the
file's tuning constants fitted to the bucket), then the file's ``CANDIDATES`` turned into
configurations (``CONFIG``). The first call in a new bucket (``_choose``) times
each on CUDA and keeps the fastest in ``CHOSEN``; where nothing is timed (CPU, the Triton
interpreter, a CUDA graph being captured, ``FUSION_ADVISOR_AUTOTUNE=0``, or a bucket of at most
``TUNE_MIN_ELEMENTS`` elements, launch-bound whatever the configuration) the heuristic's pick
is used. The helpers read the file's globals: ``CANDIDATES``, ``CHOSEN``, the tuning
constants of its kind ("flat", "tiled", "single", "looped", "split") and ``HEURISTIC``/``CONFIG``;
the values below only let this module import, tests set them.

Choices survive the process: ``_choose`` keeps each timed choice in the tuning cache on disk
(``tuning_cache.py``), which a later process reads instead of timing; ``_kept`` gives a traced
launch (torch.compile) the same choice without timing.

One choice is made when the file is generated, not per shape: whether a reduction's rows stay
whole in one block or loop over column blocks (``one_block.widest_one_block``: by the width and
the element size, the file's ``MAX_BLOCK``).
"""

from __future__ import annotations

import os

import torch

from .helper_text import joined
from .runtime import _powers_of_two
from .tuning_cache import (
    _cache_dir,
    _cache_identity,
    _cache_key,
    _cache_path,
    _cache_read,
    _cache_write,
)

CANDIDATES: tuple = ()
CHOSEN: dict = {}
BLOCK, NUM_WARPS, TILE_COLS = 1024, 4, 32
MAX_BLOCK, LOOP_BLOCK, PACK_WIDTH, PACK_ELEMENTS, MAX_ROWS = 4096, 1024, 256, 2048, 16
LOOP_STEPS, MAX_LOOP_BLOCK = 4, 8192
SPLIT_PROGRAMS, SPLIT_MIN_COLS, SPLIT_LOOP_BLOCK = 256, 8192, 8192
SPLIT_JOINED_ROWS = 0  # rows up to this many split in one launch by default (choices.py)...
SPLIT_JOINED_PROGRAMS = 2  # ...over this many programs a row
ROW_CLASSES = 2  # row counts are bucketed by powers of this...
ROW_CLASS_CAP = 16384  # ...up to this many rows (more rows: one class)
TUNE_WARMUP_MS, TUNE_REP_MS = 5, 25  # per candidate, once per bucket
# Buckets of at most this many elements (width x row class) are not timed: the heuristic's
# pick launches. A 64K-element tensor is 256 KiB in fp32 (under 0.1 µs of an H200's
# bandwidth) and every candidate covers it in one wave of programs, so each takes the
# launch's few µs, while timing them compiles each one (most of a small model's GPU run).
TUNE_MIN_ELEMENTS = 1 << 16


def _pow2(n):
    """The power of two at or above `n` (1 for n <= 1). A size torch.compile traces
    symbolically (a SymInt) is doubled up to: it then gets guards on its range (n in (p/2,
    p]) and one compiled graph serves its whole bucket, where `bit_length` fixed the size."""
    if type(n) is int:
        return 1 if n <= 1 else 1 << (n - 1).bit_length()
    p = 1
    while p < n:
        p *= 2
    return p


def _bucket(n_rows, n_cols):
    """(width, row class): the row width rounded up to a power of two (the block a whole row
    needs), and the row count rounded up to a power of ROW_CLASSES, capped at ROW_CLASS_CAP.
    Flat kernels pass (1, n_elements). Rows per program and grid sizes only change between
    classes, so one timing serves the whole bucket."""
    rows = 1
    while rows < n_rows and rows < ROW_CLASS_CAP:
        rows *= ROW_CLASSES
    return _pow2(n_cols), rows


def _row_warps(elements, per_warp, floor):
    """About `per_warp` elements a warp, at most 16 warps, at least `floor` (and at most the
    elements' lanes). Fitted to the H200 panel (docs/kernels.md, "Tuning per shape"): whole
    rows 512 a warp (1024 columns: 2 warps, 4096: 8, 16384: 16; 32 warps lost up to 38% at
    16384), a looped row's column step 256 (4096 columns: 16 warps; 8 lost 4%)."""
    return max(1, min(max(floor, min(16, elements // per_warp)), _pow2(elements // 32)))


# One heuristic and one candidate reader per kernel kind; a generated file holds its kind's
# pair only (as HEURISTIC and CONFIG), so it reads only the tuning constants it defines.
def _flat_heuristic(bucket):
    """BLOCK and NUM_WARPS, with no block wider than the tensor (but 128 lanes at least)."""
    return min(BLOCK, max(bucket[0], 128)), 1, NUM_WARPS


def _flat_config(bucket, candidate):
    """A candidate (BLOCK, NUM_WARPS)."""
    return candidate[0], 1, candidate[1]


def _tiled_heuristic(bucket):
    return _tiled_config(bucket, (BLOCK, TILE_COLS, NUM_WARPS))


def _tiled_config(bucket, candidate):
    """A candidate (elements per tile, widest column block, warps)."""
    width, n_rows = bucket
    elements, tile_cols, num_warps = candidate
    block = min(tile_cols, width)
    block = max(block, _pow2(-(-width // 65535)))  # the grid's 2nd axis: <= 65535 blocks
    return block, max(1, min(elements // block, n_rows)), num_warps


def _single_heuristic(bucket):
    """Whole rows: packed up to PACK_ELEMENTS when at most PACK_WIDTH wide, but fewer per
    program when there are few rows (more programs to share the SMs); ~512 elements a warp."""
    width, n_rows = bucket
    packed = min(MAX_ROWS, PACK_ELEMENTS // width) if width <= PACK_WIDTH else 1
    packed = max(1, min(packed, n_rows // 128))
    return width, packed, _row_warps(width * packed, 512, NUM_WARPS)


def _wide_single_heuristic(bucket):
    """_single_heuristic for a file whose one block holds rows wider than its 16 warps hold at
    32 elements a thread (a softmax's, up to 32768 columns: 32 warps there, as Liger-Kernel's
    softmax launches); never more elements a thread, as _single_config."""
    width, packed, num_warps = _single_heuristic(bucket)
    return width, packed, max(num_warps, width * packed // 1024)


def _single_config(bucket, candidate):
    """A candidate (elements per program, warps); rows are packed only up to PACK_WIDTH;
    never fewer warps than hold 32 elements a thread (more spill registers)."""
    width, n_rows = bucket
    elements, num_warps = candidate
    packed = max(1, min(MAX_ROWS, elements // width, n_rows)) if width <= PACK_WIDTH else 1
    num_warps = max(num_warps, width * packed // 1024)
    return width, packed, max(1, min(num_warps, _pow2(width * packed // 32)))


def _looped_heuristic(bucket, widest=None):
    """A column step of a LOOP_STEPS-th of the row, at least LOOP_BLOCK, at most `widest`
    (MAX_LOOP_BLOCK unless given; and MAX_BLOCK, and the row): the widest step measured
    fastest at every row count, but a row of 2 steps leaves the pipelined loads of the next
    step nothing to overlap (16384 columns: 8192 a step lost 16-27% to 4096); ~256 elements
    a warp."""
    width = bucket[0]  # the row count does not matter
    block = min(max(width // LOOP_STEPS, LOOP_BLOCK), widest or MAX_LOOP_BLOCK, MAX_BLOCK,
                width)
    return block, 1, _row_warps(block, 256, NUM_WARPS)


def _looped_config(bucket, candidate):
    """A candidate (column block of the row loop, warps); at most 32 elements a thread."""
    block = min(candidate[0], bucket[0])
    return block, 1, max(1, min(max(candidate[1], block // 1024), _pow2(block // 32)))


def _splits(bucket):
    """Programs per row: doubled while rows x programs stay within SPLIT_PROGRAMS and each
    program keeps at least SPLIT_MIN_COLS columns of the bucket's width, the row width
    rounded up to a power of two (1: no split)."""
    width, n_rows = bucket
    splits = 1
    while n_rows * splits * 2 <= SPLIT_PROGRAMS and width // (splits * 2) >= SPLIT_MIN_COLS:
        splits *= 2
    return splits


def _split_heuristic(bucket):
    """Few wide rows: each split over `_splits` programs, every program looping over its
    chunk as the looped heuristic would over a row that narrow, with that many rows, in steps
    of up to SPLIT_LOOP_BLOCK (a row not split: MAX_LOOP_BLOCK). Rows up to SPLIT_JOINED_ROWS
    (the plan's), in a bucket at least 8 x SPLIT_MIN_COLS wide, are split over
    SPLIT_JOINED_PROGRAMS in one launch where `_splits` leaves them whole, or, in a bucket of
    8 x SPLIT_MIN_COLS exactly (the width measured), where that launch has 4 x
    SPLIT_PROGRAMS programs or more; stepping as the looped heuristic over the chunk (~256
    elements a warp: at 4096 a step 16 warps were the best candidate of every norm the H100
    panel of 2026-12-07 morning split in one launch, 0.5-10% ahead of 8 warps; rms_norm*2
    128x65536 fp32 in 8 programs a row 30.5 us, in the two kernels' split 34.0)."""
    width, n_rows = bucket
    splits = _splits(bucket)
    programs = SPLIT_JOINED_PROGRAMS
    wide = width >= 8 * SPLIT_MIN_COLS
    filled = width == 8 * SPLIT_MIN_COLS and n_rows * programs >= 4 * SPLIT_PROGRAMS
    if n_rows <= SPLIT_JOINED_ROWS and wide and (splits == 1 or filled):
        block, rows, num_warps = _looped_heuristic((width // programs, n_rows * programs),
                                                   SPLIT_LOOP_BLOCK)
        return block, rows, num_warps, programs, 1
    block, rows, num_warps = _looped_heuristic((width // splits, n_rows * splits),
                                               SPLIT_LOOP_BLOCK if splits > 1 else None)
    return block, rows, num_warps, splits


def _split_config(bucket, candidate):
    """A candidate (column block of the row loop, warps, programs per row at most[, 1: in
    one launch]): the programs per row only while the chunk keeps a whole block and rows x
    programs stay within 8 x SPLIT_PROGRAMS (with more rows a split only adds a second
    launch), in one launch (the joined kernel, where a row is split) 32 x SPLIT_PROGRAMS:
    at 2048 rows of 50304 fp32 columns, 4 programs a row in one launch beat one program a
    row by 3.5% (H100, 2026-12-06, the panel's call 2 of that night)."""
    width, n_rows = bucket
    block, rows, num_warps = _looped_config(bucket, candidate[:2])
    joined = candidate[3:] == (1,)
    most = (32 if joined else 8) * SPLIT_PROGRAMS // n_rows
    splits = max(1, min(candidate[2], width // block, most))
    if splits > 1 and joined:
        return block, rows, num_warps, splits, 1
    return block, rows, num_warps, splits


def _configs(bucket):
    """The bucket's configurations: the heuristic's first, then the candidates, no repeats."""
    _powers_of_two(**{f"CANDIDATES[{i}][{j}]": v for i, c in enumerate(CANDIDATES)
                      for j, v in enumerate(c)})
    found = [HEURISTIC(bucket)]
    for candidate in CANDIDATES:
        config = CONFIG(bucket, candidate)
        if config not in found:
            found.append(config)
    return tuple(found)


def _timing_on(device):
    """Whether a new bucket's candidates are timed here (else the heuristic's pick)."""
    return (device.type == "cuda" and os.environ.get("FUSION_ADVISOR_AUTOTUNE", "1") != "0"
            and os.environ.get("TRITON_INTERPRET", "0") != "1"
            and not torch.cuda.is_current_stream_capturing())


def _time(run, config, replay=True):
    """Median milliseconds of `run(config)` (L2 flushed between calls); inf if it fails.
    `replay`: the call captured once in a CUDA graph and its replay timed, so a configuration
    of two launches (split rows) is not charged the host time between them, which Triton's
    launch path makes longer than the kernels it times (a 27 µs pair measured 35 µs): device
    time, what the shapes panel and the timing gate judge too. None where it cannot be
    captured (the caller then times every candidate as launched)."""
    import triton.testing

    try:
        run(config)  # compiles this configuration first
    except Exception:  # noqa: BLE001 - e.g. out of registers: a candidate, not the kernel
        return float("inf")
    call = lambda: run(config)
    if replay:
        # Captured by hand: `torch.cuda.graph` would synchronize and empty the allocator's
        # cache per candidate, and a failed capture there leaves the capture stream current.
        # Thread-local: other threads of the process may allocate meanwhile.
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(side):
                run(config)  # warmed up on the capturing stream
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    run(config)
                finally:
                    graph.capture_end()
            torch.cuda.current_stream().wait_stream(side)
            call = graph.replay
        except Exception:  # noqa: BLE001 - not capturable
            torch.cuda.synchronize()
            return None
    try:
        return triton.testing.do_bench(call, warmup=TUNE_WARMUP_MS, rep=TUNE_REP_MS,
                                       return_mode="median")
    except Exception:  # noqa: BLE001
        return float("inf")


def _timed(key, configs, device):
    """Whether a bucket's choice is timed (and so kept on disk): several candidates, timing
    on here, and a bucket (`key[0]`) of more than TUNE_MIN_ELEMENTS elements."""
    bucket = key[0]
    return len(configs) > 1 and _timing_on(device) and bucket[0] * bucket[1] > TUNE_MIN_ELEMENTS


def _stored(key, device):
    """(cache file, identity, the choice stored there for `key` or None); the file is None
    where there is no disk cache."""
    identity = _cache_identity(device)
    path = _cache_path(identity)
    return path, identity, _cache_read(path, identity).get(_cache_key(key)) if path else None


def _choose(key, configs, run, device):
    """The configuration for a bucket seen for the first time: the fastest of `configs` by
    `run(config)` where timing is on (read from the disk cache when a process timed this
    file's bucket on this GPU before, and stored there after timing), else the first (the
    heuristic's); kept in CHOSEN except while a CUDA graph is being captured (timing then
    would break the capture). A bucket (`key[0]`) of at most TUNE_MIN_ELEMENTS elements
    takes the heuristic's pick untimed."""
    if _timed(key, configs, device):
        path, identity, choice = _stored(key, device)
        if choice not in configs:  # none stored, or one this file no longer offers
            times = [_time(run, c) for c in configs]
            if None in times:  # one cannot be captured: all timed alike, as launched
                times = [_time(run, c, replay=False) for c in configs]
            choice = configs[times.index(min(times))]
            if path is not None:
                _cache_write(path, identity, _cache_key(key), choice)
    else:
        choice = configs[0]
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return choice
    CHOSEN[key] = choice
    return choice


def _kept(key, configs, device):
    """The configuration a traced launch takes (torch.compile runs `traceable` on fake
    tensors, where nothing can be timed): the one this process chose, else the one the disk
    cache holds for this GPU, Triton and file where `_choose` would read it (a new process
    that compiles before its first eager call), else the heuristic's."""
    choice = CHOSEN.get(key)
    if choice is None and _timed(key, configs, device):
        choice = _stored(key, device)[2]
    return choice if choice in configs else configs[0]


HEURISTIC, CONFIG = _single_heuristic, _single_config
KINDS = {"flat": (_flat_heuristic, _flat_config), "tiled": (_tiled_heuristic, _tiled_config),
         "single": (_single_heuristic, _single_config),
         "looped": (_looped_heuristic, _looped_config),
         "split": (_split_heuristic, _split_config)}
# A one-block file whose MAX_BLOCK is wider than this (16 warps of 32 lanes, 32 elements a
# thread: the widest row _row_warps' most warps hold) takes WIDE_SINGLE's pair instead.
WIDEST_16_WARP_ROW = 16 * 32 * 32
WIDE_SINGLE = (_wide_single_heuristic, _single_config)
# Helpers a kind's pair calls besides the shared ones (copied into its files before the pair).
KIND_HELPERS = {"split": (_looped_heuristic, _looped_config, _splits)}
HELPERS = (_pow2, _bucket, _row_warps, _configs, _timing_on, _time, _cache_dir,
           _cache_identity, _cache_path, _cache_key, _cache_read, _cache_write, _timed, _stored,
           _choose, _kept)
GLOBALS = ("KIND", "CANDIDATES", "CHOSEN", "HEURISTIC", "CONFIG", "ROW_CLASSES",
           "ROW_CLASS_CAP", "TUNE_WARMUP_MS", "TUNE_REP_MS", "TUNE_MIN_ELEMENTS")


def source(kind: str, max_block: int | None = None) -> str:
    """The helpers' text as a generated file of this kernel kind holds it, two blank lines
    apart, ending with the kind's HEURISTIC and CONFIG (WIDE_SINGLE's for a one-block file
    whose `max_block` is wider than WIDEST_16_WARP_ROW)."""
    heuristic, config = KINDS[kind]
    helpers = KIND_HELPERS.get(kind, ())
    if kind == "single" and (max_block or 0) > WIDEST_16_WARP_ROW:
        helpers, (heuristic, config) = (heuristic,), WIDE_SINGLE
    fns = (*HELPERS, *helpers, heuristic, config)
    text = joined(fns)
    return text + f"\n\n\nHEURISTIC, CONFIG = {heuristic.__name__}, {config.__name__}\n"
