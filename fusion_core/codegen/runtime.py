"""Runtime helpers of every generated launcher: real Python, linted and unit-tested here.

Each generated kernel file holds a verbatim copy of the functions listed in ``HELPERS``
(``source()`` gives their text), so a kernel file still needs only torch and triton. The
helpers read three globals the generated file defines above them: ``NAME`` (the kernel's
name, for messages), ``RANK`` (the rank of its iteration shape) and ``INT64_INDEX``
(whether its index math is 64-bit). One whose launcher sees inputs through views (their
index maps, ``codegen/indexing.py``) also holds ``VIEW_HELPERS``, one of the split kind
(``split_rows.py``) ``SPLIT_HELPERS`` and their ``ARRIVALS``. The values below only let this
module import; tests set them.
"""

from __future__ import annotations

import torch

from .helper_text import joined

NAME = "kernel"
RANK = 2
INT64_INDEX = False
ARRIVALS: dict = {}


def _iteration_shape(*shapes, names=()):
    """The inputs' broadcast shape padded to RANK dims, and how many dims were padded.
    `names`: the shapes' owners in the launcher's spelling, for the refusal."""
    try:
        shape = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:  # eager's error names neither the input nor the dim
        rank = max(len(s) for s in shapes)
        padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
        for k in range(rank):
            long = [(s[k], i) for i, s in enumerate(padded) if s[k] != 1]
            odd = next(((n, i) for n, i in long if n != long[0][0]), None)
            if odd is not None:
                who = names[odd[1]] if odd[1] < len(names) else f"input {odd[1]}"
                raise ValueError(
                    f"{NAME}: {who} is {odd[0]} long in dim {k} as this kernel views its "
                    f"inputs, another is {long[0][0]} long there: they do not broadcast the "
                    "way the kernel reads them (a dim analysed 1 long is broadcast); "
                    "regenerate it at these sizes or keep the original ops") from None
        raise
    lead = RANK - len(shape)
    if lead > 0:  # shapes are right-aligned: leading 1s change nothing
        shape = (1,) * lead + shape
    if len(shape) != RANK:
        raise ValueError(f"{NAME}: inputs broadcast to {shape}; this kernel iterates over "
                         f"{RANK}-d shapes")
    return shape, max(lead, 0)


def _spans(shape):
    """span[k]: elements in dims k.. of the iteration shape (span[0] is the total)."""
    span = [1] * (len(shape) + 1)
    for k in reversed(range(len(shape))):
        span[k] = span[k + 1] * shape[k]
    if not INT64_INDEX and span[0] >= 2**31:
        raise ValueError(f"{NAME}: {span[0]} elements overflow this kernel's 32-bit index "
                         "math; regenerate it for this shape")
    return span


def _divisor(d):
    """(m, l): how a kernel divides an index 0 <= x < 2**30 by `d` >= 1 (a span) without a
    division: x // d == umulhi(4x, m) >> l in unsigned 32-bit arithmetic, l = ceil(log2 d),
    m = ceil(2**(30 + l) / d) (exact: m·d exceeds 2**(30 + l) by less than d <= 2**l, so x·m
    stays within 2**(30 + l) of x·2**(30 + l)/d for every such x). m lies in [2**30, 2**31):
    a positive int32 for every d, which Triton never makes a constant (``writer.INDEX_DIV``).
    A span torch.compile traces symbolically (a SymInt) gets its shift by doubling, not
    `bit_length`: guards on its range instead of its value (``tuning._pow2``)."""
    if type(d) is int:
        shift = (d - 1).bit_length()
    else:
        shift = 0
        while (1 << shift) < d:
            shift += 1
    return -(-(1 << (30 + shift)) // d), shift


def _powers_of_two(**sizes):
    bad = [f"{k} = {v!r}" for k, v in sizes.items()
           if not (isinstance(v, int) and v > 0 and v & (v - 1) == 0)]
    if bad:
        raise ValueError(f"{NAME}: {', '.join(bad)}: tuning sizes must be powers of two "
                         "(Triton's blocks are)")


def _multiple_of(n):
    """The largest power of two, at most 16, that divides `n` (16 for 0). A kernel writes its
    element or column count as a multiple of it: Triton vectorizes a masked load only when it
    knows the bound is a multiple of the vector width, and checks integer arguments for 16
    only."""
    return min(16, n & -n) if n else 16


def _double_bits(value):
    """A Python float's IEEE double as two signed 32-bit integers (high word, low word), which
    a kernel doing fp64 math joins and reinterprets: the number exactly, in both launches
    (Triton's launcher passes a float argument as fp32, Inductor's as fp64). Two words, not one
    int64: Inductor in torch 2.11 fails compiling a kernel call given a constant past int32
    (measured on an H100)."""
    import struct

    low, high = struct.unpack("<ii", struct.pack("<d", float(value)))
    return high, low


def _dense_strides(shape, order):
    """Strides of a dense tensor of `shape` whose dims lie in memory in `order`."""
    drop = len(order) - len(shape)
    if drop > 0:  # fewer dims (right-aligned): the analysed order of the dims it has
        order = [k - drop for k in order if k >= drop]
    elif drop < 0:  # more dims than analysed: plain contiguous
        order = range(len(shape))
    strides, step = [0] * len(shape), 1
    for k in reversed(order):
        strides[k], step = step, step * max(shape[k], 1)
    return tuple(strides)


def _relaid(t, order, device, traced=False):
    """`t` copied into the analysed layout (`.contiguous()` when that is contiguous) on the
    kernel's `device`. A CPU 0-dim operand (``_device_copies``) gives its value, read now on
    the host as torch's own ops read it: no copy from the CPU, which would wait for the GPU (or
    race a later write to `t`) and which a CUDA graph cannot capture. `traced`: fake tensors
    hold no value, so the traced graph copies it at each call instead."""
    out = torch.empty_strided(t.shape, _dense_strides(t.shape, order), dtype=t.dtype,
                              device=device)
    if t.device != device and not traced:
        return out.fill_(t.item())
    return out.copy_(t)


def _run_device(*tensors):
    """Where torch computes an op over `tensors`, and so where the kernel runs: the device of
    the first one that is not a CPU 0-dim tensor (torch takes those as operands of an op on
    any device, `x.cuda() * torch.tensor(2.0)`), else the CPU."""
    for t in tensors:
        if t.dim() or t.device.type != "cpu":
            return t.device
    return tensors[0].device


def _device_copies(copies, tensors, device, names):
    """`copies` (each input's copy flag) with the CPU 0-dim tensors of a kernel that runs on
    another `device` flagged too: a Triton kernel reads its own device's memory only, so the
    launcher copies them there at each call. () where nothing is copied. `names`: the
    inputs' owners in the launcher's spelling, for the refusal of any other device."""
    flags = []
    for copy, t, name in zip(copies, tensors, names, strict=True):
        moved = t.device != device
        if moved and (t.dim() or t.device.type != "cpu"):
            raise ValueError(f"{NAME}: {name} is on {t.device}, the kernel runs on {device} "
                             "(where its other inputs are); move it there first")
        flags.append(copy or moved)
    return tuple(flags) if any(flags) else ()


def _layout(t, shape, groups, order, name="an input"):
    """(copy, strides): whether `t` (the launcher's `name`) must be copied into the analysed
    layout first (its own strides don't fit), and the strides of its non-unit index groups
    then."""
    if t.numel() == 0:  # nothing is read: any strides do
        return False, [0 for _, _, unit in groups if not unit]
    u = t
    for copy in (False, True):
        if copy:  # the strides `_relaid(t, order)` will have, without copying any data now
            u = torch.empty_strided(t.shape, _dense_strides(t.shape, order), device="meta")
        found = _group_strides(u, shape, groups)
        if found is not None:
            extent = sum((d - 1) * s for d, s in zip(u.shape, u.stride(), strict=True))
            if not INT64_INDEX and extent >= 2**31:
                raise ValueError(f"{NAME}: offsets into an input of shape {tuple(t.shape)} "
                                 "overflow this kernel's 32-bit index math; regenerate it")
            return copy, found
    raise ValueError(f"{NAME}: {name} of shape {tuple(t.shape)} {_misfit(t, shape, groups)}; "
                     "regenerate it at these sizes or keep the original ops")


def _misfit(t, shape, groups):
    """Why `_group_strides` finds no strides for `t` even in the analysed order, in words: a
    dim it varies along that the kernel reads it broadcast over (1 long, or absent, at
    analysis), else the first dim the kernel indexes with another length."""
    dims = (1,) * max(0, len(shape) - t.dim()) + tuple(t.shape)
    if len(dims) > len(shape):
        return f"has more dims than the {len(shape)} this kernel iterates over"
    covered = {k for first, end, _ in groups for k in range(first, end)}
    for k in range(len(shape)):
        if k not in covered and dims[k] != 1 and shape[k] != 1:
            return (f"is {dims[k]} long in dim {k}, which this kernel reads it broadcast over "
                    "(it was 1 long there, or absent, when analysed)")
    for k in sorted(covered):
        if shape[k] != 1 and dims[k] != shape[k]:
            return f"is {dims[k]} long in dim {k}, where the iteration is {shape[k]} long"
    return f"has strides {t.stride()} this kernel cannot index over {shape}"


def _group_strides(t, shape, groups):
    dims, strides = tuple(t.shape), tuple(t.stride())
    pad = len(shape) - len(dims)
    if pad < 0:
        return None
    dims, strides = (1,) * pad + dims, (0,) * pad + strides
    covered = {k for first, end, _ in groups for k in range(first, end)}
    if any(k not in covered and dims[k] != 1 and shape[k] != 1 for k in range(len(shape))):
        return None  # varies along a dim the kernel broadcasts it over
    found = []
    for first, end, unit in groups:
        step = outer = None
        for k in reversed(range(first, end)):
            if shape[k] == 1:
                continue
            if dims[k] != shape[k] or (outer is not None and strides[k] != outer):
                return None
            step = strides[k] if step is None else step
            outer = strides[k] * dims[k]
        if unit and step not in (None, 1):
            return None
        if not unit:
            found.append(0 if step is None else step)
    return found


def _written(t, shape, groups, result, sizes, grown):
    """The strides of a result's non-unit index groups at this call. `t`: a meta tensor laid
    out as the launcher allocates the result `result`, seen through its map; `sizes`: the
    result's shape here and at analysis. Where its dims no longer fall in the groups, a dim
    1 long at the analysed shapes hid that two of them lie apart: the refusal names the input
    longer there, the cause its caller can change. `grown`: per input, (the input as `_plan`
    sees it, its name, its analysed shape, {iteration dim: the input's dim that becomes it},
    for its dims 1 long at analysis)."""
    if t.numel() == 0 or _group_strides(t, shape, groups) is not None:
        return _layout(t, shape, groups, (), result)[1]
    for given, name, analysed, dims in grown:  # not `x`: a value name (same_source_key)
        pad = len(shape) - given.dim()
        longer = [(d, given.shape[k - pad]) for k, d in sorted(dims.items(), key=lambda kd: kd[1])
                  if k >= pad and given.shape[k - pad] != 1]
        if longer:
            one = len(longer) == 1
            said = " and ".join(str(d) for d, _ in longer)
            now = " and ".join(str(n) for _, n in longer)
            raise ValueError(
                f"{NAME}: {name}'s dim{'' if one else 's'} {said}, 1 long in the analysed "
                f"{analysed}, {'is' if one else 'are'} {now} long here; this kernel writes "
                f"{result} in an order that holds only while {'it is' if one else 'they are'}"
                " 1 long; regenerate it at these sizes or keep the original ops")
    raise ValueError(f"{NAME}: {result} is {sizes[0]} here, and its dims do not lie in memory "
                     f"as this kernel writes them (they did at the analysed {sizes[1]}); "
                     "regenerate it at these sizes or keep the original ops")


def _seats(raws, seen):
    """Where each input seen through an index map lies in its raw input, for later calls
    with the same layout: (shape, strides, storage offset past the raw input's). None when
    a view copied data (a reshape the strides did not allow) or there is nothing to read:
    then every call takes the views again."""
    out = []
    for raw, t in zip(raws, seen, strict=True):
        if t.numel() == 0 or t.untyped_storage().data_ptr() != raw.untyped_storage().data_ptr():
            return None
        out.append((tuple(t.shape), t.stride(), t.storage_offset() - raw.storage_offset()))
    return tuple(out)


def _narrowed(t, dim, start, length, size):
    """`t.narrow(dim, start, length)`: a slice the kernel reads, whose bounds were worked out
    where `t` was `size` long along `dim` (any size elsewhere)."""
    if t.shape[dim] != size:
        raise ValueError(f"{NAME}: an input sliced along dim {dim} is {t.shape[dim]} long "
                         f"there; this kernel slices it at {size} (regenerate it)")
    return t.narrow(dim, start, length)


def _repeated(t, dim, factor):
    """Each element of `t` along `dim` read `factor` times along a new dim after it, with
    no copy (stride 0): a nearest upsample's source as the kernel reads it."""
    t = t.unsqueeze(dim + 1)
    sizes = list(t.shape)
    sizes[dim + 1] = factor
    return t.expand(sizes)


def _arrivals(count, device):
    """A joined split kernel's `count` int32 counters on `device`, zero. Launched eagerly on
    a GPU, the set is kept in the file's ARRIVALS for the next launch on the current stream
    (the one Triton launches on): the kernel zeroes a row's counters as the row's last
    program leaves, so no fill kernel runs before each launch. One set per stream: launches
    running at once on two streams must not count each other's programs. A CUDA graph being
    captured takes a zeroed set of its own, made before the capture and kept as long as the
    file (a graph replays the counters it captured, and two graphs may replay at once), or
    where none was made, zeros the graph fills at each replay. Off the GPU, fresh zeros."""
    if device.type != "cuda":
        return torch.zeros(count, dtype=torch.int32, device=device)
    if torch.cuda.is_current_stream_capturing():
        spare = ARRIVALS.pop((device, "spare"), None)
        if spare is None or spare.numel() < count:
            return torch.zeros(count, dtype=torch.int32, device=device)
        ARRIVALS[device, "captured", spare.data_ptr()] = spare
        return spare
    key = (device, torch.cuda.current_stream().cuda_stream)
    kept = ARRIVALS.get(key)
    if kept is None or kept.numel() < count:
        kept = ARRIVALS[key] = torch.zeros(count, dtype=torch.int32, device=device)
    spare = ARRIVALS.get((device, "spare"))
    if spare is None or spare.numel() < count:  # for the next capture
        side = torch.cuda.Stream(device)
        with torch.cuda.stream(side):
            ARRIVALS[device, "spare"] = torch.zeros(count, dtype=torch.int32, device=device)
        side.synchronize()  # zero before a graph takes it: a graph replays on any stream
    return kept


HELPERS = (_iteration_shape, _spans, _divisor, _powers_of_two, _multiple_of, _double_bits,
           _dense_strides,
           _relaid, _run_device, _device_copies, _layout, _group_strides, _misfit, _written)
GLOBALS = ("NAME", "RANK", "INT64_INDEX")  # read by the helpers, defined by each file
VIEW_HELPERS = (_seats, _narrowed, _repeated)  # a launcher that sees inputs through views
SPLIT_HELPERS = (_arrivals,)  # a split kind's launcher; its file defines ARRIVALS = {}


def source(views: bool = False) -> str:
    """The helpers' text as a generated file holds it, two blank lines apart; `views`: with
    what a launcher that views its inputs keeps of them."""
    return source_of(HELPERS + (VIEW_HELPERS if views else ()))


def source_of(helpers: tuple) -> str:
    """`helpers`' text, two blank lines apart."""
    return joined(helpers) + "\n"
