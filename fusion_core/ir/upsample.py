"""Nearest upsampling by integer factors as a view: `out[n, c, h] = x[n, c, h // s]`.

Reads one FX node: `F.interpolate` (`nn.Upsample`, traced through, calls it) under FX,
`aten.upsample_nearest{1,2,3}d` under torch.export; returns its index steps
(``ir/views.py``): per upsampled dim a ``Repeat`` (the element read `s` times along a new
dim, stride 0) and then a ``Merge`` of each (size, s) pair, the same as
`x[:, :, :, None].expand(..., s).flatten(2, 3)`. ``codegen/indexing.py`` splits the
kernel's domain along those dims again, so the merge cancels and the source is read with
stride 0: the upsampled tensor is never written.

Only where every index is the source's `h // s` at the analysed sizes, in the float32
arithmetic torch's kernels use (`floor(h * scale)`, the scale `1 / scale_factor` or
`in / out`): mode 'nearest' with an integer factor. Other modes, non-integer factors and
'nearest-exact' stay opaque calls with a reason (``OPAQUE_WHY``), which a barrier names.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from .views import Merge, Repeat, Step

OPAQUE_WHY = "opaque_why"  # the params key of an opaque node's reason, for barriers

_INTERPOLATE = inspect.signature(F.interpolate)
_UPSAMPLE_PACKETS = {f"upsample_nearest{k}d": "nearest" for k in (1, 2, 3)}
_OTHER_PACKETS = {
    **{f"_upsample_nearest_exact{k}d": "nearest-exact" for k in (1, 2, 3)},
    "upsample_linear1d": "linear", "upsample_bilinear2d": "bilinear",
    "_upsample_bilinear2d_aa": "bilinear", "upsample_bicubic2d": "bicubic",
    "_upsample_bicubic2d_aa": "bicubic", "upsample_trilinear3d": "trilinear",
}
FIX = "mode='nearest' with an integer scale_factor (or a size that many times larger) fuses"


def is_upsample(n: fx.Node) -> bool:
    """An interpolate call of any mode, either capture's spelling."""
    return n.op == "call_function" and (n.target is F.interpolate or _packet(n.target) in (
        *_UPSAMPLE_PACKETS, *_OTHER_PACKETS))


def _packet(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return target._overloadpacket.__name__
    return ""


def upsample_steps(n: fx.Node) -> tuple[tuple[Step, ...] | None, str]:
    """(steps, "") for a nearest upsample by integer factors (module docstring); (None,
    why not) for any other interpolate."""
    src, out = n.args[0] if n.args else None, n.meta.get("val")
    src_val = src.meta.get("val") if isinstance(src, fx.Node) else None
    if not isinstance(out, torch.Tensor) or not isinstance(src_val, torch.Tensor):
        return None, "its shapes are unknown"
    mode, scales, antialias = _call(n)
    if scales and not all(isinstance(s, (int, float)) for s in scales):
        return None, f"its scale factor is computed at run time; {FIX}"
    if mode != "nearest" or antialias:
        how = "reads at (i + 0.5) / scale" if mode == "nearest-exact" else "blends elements"
        return None, f"mode={mode!r} {how}, no index map of whole elements; {FIX}"
    ins, outs = tuple(src_val.shape[2:]), tuple(out.shape[2:])
    factors = []
    for k, (i, o) in enumerate(zip(ins, outs, strict=True)):
        scale = scales[k] if scales and scales[k] > 0 else None  # torch: none given
        if i == 0 or o % i or (scale is not None and scale != o // i):
            said = f"scale factor {scale:g}" if scale is not None else f"size {i} -> {o}"
            return None, f"its {said} along dim {k + 2} is no integer factor; {FIX}"
        if not _exact(i, o, scale):
            return None, (f"torch's float32 index `floor(h * scale)` is not `h // {o // i}` "
                          f"along dim {k + 2} at {o} elements")
        factors.append(o // i)
    return _steps(tuple(factors)), ""


def _call(n: fx.Node) -> tuple[str, tuple[float, ...] | None, bool]:
    """(mode, the scale per spatial dim that torch indexes by, or None: in / out; antialias)."""
    if n.target is F.interpolate:
        try:
            bound = _INTERPOLATE.bind(*n.args, **n.kwargs)
        except TypeError:
            return "unknown", None, False
        bound.apply_defaults()
        a = bound.arguments
        factor = a["scale_factor"]
        if factor is None or a["recompute_scale_factor"] or a["size"] is not None:
            scales = None
        else:
            rank = len(n.args[0].meta["val"].shape) - 2
            scales = tuple(factor) if isinstance(factor, (tuple, list)) else (factor,) * rank
        return str(a["mode"]), scales, bool(a["antialias"])
    packet = _packet(n.target)
    mode = _UPSAMPLE_PACKETS.get(packet) or _OTHER_PACKETS.get(packet, "unknown")
    names = [a.name for a in n.target._schema.arguments]
    values = {**dict(zip(names, n.args, strict=False)), **n.kwargs}  # trailing defaults
    if "scale_factors" in names:  # `.vec`: (input, output_size, scale_factors)
        factors = values.get("scale_factors")
        return mode, tuple(factors) if factors else None, False
    # (input, output_size, scales_d=None, scales_h=None, scales_w=None): per dim or None
    given = tuple(values.get(k) for k in names if k.startswith("scales"))
    if any(s is not None for s in given):
        return mode, tuple(s if s is not None else 0.0 for s in given), False
    return mode, None, False


def _exact(size: int, out: int, scale: float | None) -> bool:
    """Torch's own index (float32 `floor(dst * scale)`, clamped) is `dst // (out // size)`
    for every `dst` of this length."""
    factor = out // size
    if factor in (1, 2):  # torch's kernels copy or shift by one there
        return True
    if scale is not None:  # `1.0 / scale` in double, then float32
        f = torch.tensor(1.0 / scale, dtype=torch.float32)
    else:  # `in / out` divided in float32
        f = torch.tensor(size, dtype=torch.float32) / torch.tensor(out, dtype=torch.float32)
    dst = torch.arange(out, dtype=torch.float32)
    got = torch.floor(dst * f).clamp(max=size - 1).to(torch.int64)
    return bool(torch.equal(got, torch.arange(out) // factor))


def _steps(factors: tuple[int, ...]) -> tuple[Step, ...]:
    """A ``Repeat`` after each upsampled dim (dims from 2), then each (size, factor) pair
    merged, outermost first."""
    grown = [2 + k for k, s in enumerate(factors) if s != 1]
    repeats = tuple(Repeat(d + j, factors[d - 2]) for j, d in enumerate(grown))
    return repeats + tuple(Merge(d, d + 2) for d in grown)


def factors_of(steps: tuple[Step, ...]) -> dict[int, int]:
    """{result dim: factor} of an upsample's steps (``_steps``); {} for any other view."""
    repeats = [s for s in steps if isinstance(s, Repeat)]
    return {s.dim - j: s.factor for j, s in enumerate(repeats)}
