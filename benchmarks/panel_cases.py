"""The shapes panel's cases (benchmarks/shapes_panel.py runs them): each a small function at one
shape and dtype, its tiny shapes for --dry-run, and Liger-Kernel's kernel for the same work
where it has one; GROUPS names sets of case numbers for --cases."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

EPS = 1e-6


class Fn1(nn.Module):
    """forward(x) = fn(module, x); the case's weights are parameters."""

    def __init__(self, fn, width: int, params: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.fn, self.width = fn, width  # the last dim, a plain int for layer_norm's shape
        for name, value in params.items():
            self.register_parameter(name, nn.Parameter(value, requires_grad=False))

    def forward(self, x):
        return self.fn(self, x)


class Fn2(Fn1):
    def forward(self, x, y):
        return self.fn(self, x, y)


@dataclass(frozen=True)
class Case:
    label: str
    fn: Callable  # (module, *inputs) -> tensor
    shapes: tuple[tuple[int, ...], ...]  # the inputs at benchmark size
    tiny: tuple[tuple[int, ...], ...]  # ...and for --dry-run
    dtype: torch.dtype
    params: tuple[str, ...] = ()  # weights as wide as the last dim of the first input
    liger: str | None = None  # Liger-Kernel's function for the same work (`_liger`)
    looped: bool | None = None  # force (or forbid) the column loop; None: the generator's choice


def _causal(m, x, mask):
    return torch.softmax(x * 0.125 + mask, dim=-1)


def _rms(x, w):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS).to(x.dtype) * w


def _ln(m, x):
    return F.layer_norm(x, (m.width,), m.w, m.b, EPS)


def _t(x):
    return x.transpose(-1, -2)


def _layer_scale_tail(m, y, x):
    return (y * m.g).permute(0, 3, 1, 2) + x


BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
# A lone op is no fusion (the analyzer makes no cluster of it): every case has a prologue or
# an epilogue. Liger-Kernel's kernels do the op alone, moving the same bytes.
CASES = [
    Case("softmax(x/8) 4096x1024", lambda m, x: torch.softmax(x * 0.125, -1),
         ((4096, 1024),), ((3, 40),), FP32, liger="softmax"),
    Case("softmax(x/8) 4096x4096", lambda m, x: torch.softmax(x * 0.125, -1),
         ((4096, 4096),), ((3, 40),), BF16, liger="softmax"),
    Case("log_softmax(x.float()) 512x32768", lambda m, x: torch.log_softmax(x.float(), -1),
         ((512, 32768),), ((2, 70),), BF16),
    Case("softmax(x/8) 256x50257", lambda m, x: torch.softmax(x * 0.125, -1),
         ((256, 50257),), ((2, 77),), FP32, liger="softmax"),
    Case("softmax(x/8) 64x262144", lambda m, x: torch.softmax(x * 0.125, -1),
         ((64, 262144),), ((2, 90),), FP16, liger="softmax"),
    Case("causal-mask softmax 8x1024x1024", _causal, ((8, 1024, 1024), (1024, 1024)),
         ((2, 8, 8), (8, 8)), FP16),
    Case("layer_norm->gelu 4096x4096", lambda m, x: F.gelu(_ln(m, x)), ((4096, 4096),),
         ((3, 40),), FP16, ("w", "b"), liger="layer_norm"),
    Case("layer_norm->gelu 2048x8192", lambda m, x: F.gelu(_ln(m, x)), ((2048, 8192),),
         ((3, 40),), FP32, ("w", "b")),
    # The same rows through the column loop (the generator keeps 8192 fp32 in one block):
    # which of the two is faster says where MAX_BLOCK should be.
    Case("layer_norm->gelu 2048x8192 looped", lambda m, x: F.gelu(_ln(m, x)),
         ((2048, 8192),), ((3, 40),), FP32, ("w", "b"), looped=True),
    Case("layer_norm->gelu 1024x16384", lambda m, x: F.gelu(_ln(m, x)), ((1024, 16384),),
         ((3, 70),), BF16, ("w", "b"), liger="layer_norm"),
    Case("residual+layer_norm 4096x4096", lambda m, x, r: _ln(m, x + r),
         ((4096, 4096), (4096, 4096)), ((3, 40), (3, 40)), FP16, ("w", "b")),
    Case("rms_norm 4096x4096", lambda m, x: _rms(x, m.w), ((4096, 4096),), ((3, 40),), BF16,
         ("w",), liger="rms_norm"),
    Case("rms_norm*2 128x65536", lambda m, x: _rms(x, m.w) * 2.0, ((128, 65536),),
         ((2, 70),), FP32, ("w",)),
    Case("silu(a)*b 4096x11008", lambda m, a, b: F.silu(a) * b,
         ((4096, 11008), (4096, 11008)), ((3, 37), (3, 37)), BF16, liger="swiglu"),
    Case("sigmoid(gelu(x*w)+1) 1000x3001", lambda m, x: torch.sigmoid(F.gelu(x * m.w) + 1.0),
         ((1000, 3001),), ((5, 31),), FP32, ("w",)),
    Case("tanh(x)*y+x 1000x3001", lambda m, x, y: torch.tanh(x) * y + x,
         ((1000, 3001), (1000, 3001)), ((5, 31), (5, 31)), BF16),
    Case("sum(x*w) 8192x4096", lambda m, x: (x * m.w).sum(-1), ((8192, 4096),),
         ((3, 40),), FP32, ("w",)),
    Case("softmax(x.T/8) 4096x4096", lambda m, x: torch.softmax(_t(x) * 0.125, -1),
         ((4096, 4096),), ((40, 3),), FP32),
    Case("relu(x.T*2) 4096x4096", lambda m, x: torch.relu(_t(x) * 2.0),
         ((4096, 4096),), ((40, 3),), FP32),
    Case("softmax(x/8, dim=1) NCHW 32x64x56x56", lambda m, x: torch.softmax(x * 0.125, 1),
         ((32, 64, 56, 56),), ((2, 5, 3, 3),), FP32),
    # ConvNeXt's block tail: a channels-last value scaled per channel, back to NCHW, plus the
    # NCHW residual (the tile's rows are (N, C), its columns (H, W)); a first-stage and a
    # last-stage shape (7x7 images: 49 columns).
    Case("(y*g).permute(0,3,1,2)+x 64x96x56x56", _layer_scale_tail,
         ((64, 56, 56, 96), (64, 96, 56, 56)), ((2, 3, 5, 7), (2, 7, 3, 5)), FP32, ("g",)),
    Case("(y*g).permute(0,3,1,2)+x 64x768x7x7", _layer_scale_tail,
         ((64, 7, 7, 768), (64, 768, 7, 7)), ((2, 3, 3, 9), (2, 9, 3, 3)), BF16, ("g",)),
    # Issue 28: aligned and odd widths (rows 16-byte aligned or not), Liger's softmax beside.
    *(Case(f"softmax(x/8) {rows}x{width}", lambda m, x: torch.softmax(x * 0.125, -1),
           ((rows, width),), ((2, tiny),), FP32, liger="softmax")
      for rows, width, tiny in ((2048, 50257, 77), (2048, 50304, 80), (1024, 32000, 70),
                                (1024, 32768, 72))),
    # Issue 28: LayerNorm and RMSNorm at 1k-64k columns in each dtype, 64 MiB inputs (past
    # L2), an epilogue as cheap as the norm's own multiply so Liger's norm moves the same bytes.
    *(Case(f"{name} {(64 << 20) // (width * dtype.itemsize)}x{width}", fn,
           (((64 << 20) // (width * dtype.itemsize), width),), ((3, 40 if width < 8192 else 70),),
           dtype, params, liger=liger)
      for name, fn, params, liger in (("layer_norm*2", lambda m, x: _ln(m, x) * 2.0, ("w", "b"),
                                       "layer_norm"),
                                      ("rms_norm", lambda m, x: _rms(x, m.w), ("w",), "rms_norm"))
      for width in (1024, 4096, 16384, 65536) for dtype in (FP16, BF16, FP32)),
    # The issue's headline rows with the row forced through the column loop, to compare with
    # the default (one block up to NORM_ONE_BLOCK columns).
    Case("layer_norm->gelu 1024x16384 looped", lambda m, x: F.gelu(_ln(m, x)),
         ((1024, 16384),), ((3, 70),), BF16, ("w", "b"), looped=True),
    Case("layer_norm*2 2048x16384 looped", lambda m, x: _ln(m, x) * 2.0, ((2048, 16384),),
         ((3, 70),), BF16, ("w", "b"), liger="layer_norm", looped=True),
]
# Named groups of case numbers for --cases (PANEL_CASES): issue 28's run is the issue's
# headline rows (6, 9, 7, 12), then the widths, the norms and the forced loops added for it.
ISSUE28_FIRST = 22
GROUPS = {"widths": list(range(ISSUE28_FIRST, ISSUE28_FIRST + 4)),
          "norms": list(range(ISSUE28_FIRST + 4, len(CASES)))}
# The issue's run, most telling first (a spent --budget skips the rest): the headline rows,
# the widths, the two forced column loops, then the norms.
GROUPS["issue28"] = [6, 9, 7, 12, *GROUPS["widths"], *GROUPS["norms"][-2:],
                     *GROUPS["norms"][:-2]]


def liger_ops() -> dict[str, tuple[Callable, Callable]]:
    """Liger-Kernel's forward for each op, given the case's module and inputs, and the same op
    in torch to check it against (the case's prologue/epilogue left out of both)."""
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except ImportError:
        return {}
    return {
        "rms_norm": (lambda m, x: LigerRMSNormFunction.apply(x, m.w, EPS, 0.0, "llama", False),
                     lambda m, x: _rms(x, m.w)),
        "layer_norm": (lambda m, x: LigerLayerNormFunction.apply(x, m.w, m.b, EPS), _ln),
        "softmax": (lambda m, x: LigerSoftmaxFunction.apply(x),
                    lambda m, x: torch.softmax(x, -1)),
        "swiglu": (lambda m, a, b: LigerSiLUMulFunction.apply(a, b),
                   lambda m, a, b: F.silu(a) * b),
    }
