"""Generated kernels on shapes outside the model panel: wide rows, odd sizes, strided reductions.

Run on a CUDA machine from the repository root (one call, under six minutes on an H200):

    PYTHONPATH=. python benchmarks/shapes_panel.py --out shapes_panel.json

Each case is a small function (softmax, log_softmax, layer_norm, rms_norm with and without a
prologue/epilogue, elementwise chains on odd sizes, a softmax over a transposed view and over
the channel dim of NCHW, SiLU·mul, a row sum, a channels-last value permuted back to NCHW) at
one shape and dtype. The case is analyzed; when it does not give one cluster the row says "not
fused: <reason>" instead of a time. Otherwise its kernel is generated and checked against the
eager subgraph, and every column is timed with gpu_clusters.py's device clock (CUDA-graph
replays over rotating inputs larger than L2): the launcher as a user calls it, after its own
per-shape tuning (the headline: for few wide rows that includes whether each row is split over
several programs), the same kernel with timing turned off (FUSION_ADVISOR_AUTOTUNE=0: the
heuristic's pick) twice to show the spread, eager, Inductor (default mode), Liger-Kernel's
kernel for the same work when `liger_kernel` is importable, and a device copy of the same
bytes. A case past --case-timeout seconds, or started after --budget seconds, is recorded as
such. Full numbers go to --out; a Markdown table is printed last.

`--dry-run` builds every case at tiny sizes and checks the launcher's numerics (under the
Triton interpreter without CUDA); nothing is timed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402,N812
from torch import nn  # noqa: E402

from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402
from fusion_core.validate.numerics import no_worse_than_eager  # noqa: E402
from gpu_clusters import as_tuple, close, copy_us, environment, graph_us, rotating  # noqa: E402
from time_limit import OverTime, time_guard  # noqa: E402

EPS = 1e-6
# Tiny rows wider than 64 columns loop over column blocks, as the wide rows do at full size,
# and few of them are split over several programs (chunks of 16 columns or more), as few wide
# rows are at full size (64x262144).
DRY_RUN_TUNING = Tuning(max_block=64, loop_block=16, split_min_cols=16)
AUTOTUNE_ENV = "FUSION_ADVISOR_AUTOTUNE"


class _Fn1(nn.Module):
    """forward(x) = fn(module, x); the case's weights are parameters."""

    def __init__(self, fn, width: int, params: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.fn, self.width = fn, width  # the last dim, a plain int for layer_norm's shape
        for name, value in params.items():
            self.register_parameter(name, nn.Parameter(value, requires_grad=False))

    def forward(self, x):
        return self.fn(self, x)


class _Fn2(_Fn1):
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
]


def _liger() -> dict[str, tuple[Callable, Callable]]:
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


@contextlib.contextmanager
def autotune(on: bool):
    before = os.environ.get(AUTOTUNE_ENV)
    os.environ[AUTOTUNE_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(AUTOTUNE_ENV)
        else:
            os.environ[AUTOTUNE_ENV] = before


def build(case: Case, tiny: bool, device: str, gen: torch.Generator):
    """The case's module and its model inputs (random, on `device`)."""
    shapes = case.tiny if tiny else case.shapes
    width = shapes[0][-1]
    params = {p: torch.randn(width, generator=gen).to(case.dtype) for p in case.params}
    module = (_Fn2 if len(shapes) == 2 else _Fn1)(case.fn, width, params)
    inputs = [torch.randn(s, generator=gen).to(case.dtype) for s in shapes]
    return module.to(device), tuple(t.to(device) for t in inputs)


def fused_cluster(analysis):
    """(cluster, None), or (None, why there is no single cluster for the case)."""
    if len(analysis.clusters) == 1:
        return analysis.clusters[0], None
    reasons = "; ".join(f"{r.check}: {r.reason}" for r in analysis.rejections)[:300]
    chains = [c.chain for c in analysis.clusters]
    return None, f"{len(chains)} clusters {chains}" + (f" ({reasons})" if reasons else "")


def run_case(case: Case, args, l2_bytes: int, liger: dict, work: Path) -> dict:
    # A dry run checks numerics at tiny sizes: under the interpreter without CUDA, natively
    # (CUDA tensors, compiled kernels) where CUDA is.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(0)
    module, model_inputs = build(case, args.dry_run, device, gen)
    shapes = [tuple(t.shape) for t in model_inputs]
    row = {"case": case.label, "dtype": str(case.dtype).removeprefix("torch."),
           "shapes": shapes}
    analysis = analyze(module, *model_inputs)
    cluster, why = fused_cluster(analysis)
    if cluster is None:
        row["not_fused"] = why
        return row
    row["chain"] = cluster.chain
    values = capture_values(analysis, *model_inputs)
    inputs = cluster_inputs(analysis, cluster, values, torch.Generator(device).manual_seed(1))
    eager = eager_cluster(analysis, cluster)
    ref = eager(*inputs)
    try:
        kernel = generate(analysis, cluster, DRY_RUN_TUNING if args.dry_run else None,
                          looped=case.looped)
    except Exception as e:  # noqa: BLE001 - a lowering refusal is this case's result
        row["not_fused"] = f"code generator: {type(e).__name__}: {e}"[:300]
        return row
    path = write_kernels([kernel], work / f"case{len(list(work.iterdir()))}")[0]
    user, default = (getattr(load_kernel(path), kernel.name) for _ in range(2))
    out_dtype = as_tuple(ref)[-1].dtype
    row["kernel"] = {"looped": kernel.looped, "tiled": kernel.tiled,
                     "kind": user.__globals__["KIND"]}

    def checked(got) -> tuple[bool, float]:
        """The panel's tolerance, else validation's float64 rule (a long float32 sum adds in
        another order than eager's: fine if no further from float64 than eager is)."""
        ok, err = close(got, ref, out_dtype)
        if not ok and no_worse_than_eager(as_tuple(got), as_tuple(ref), eager, inputs):
            row["float64_rule"] = True
            ok = True
        return ok, err

    with autotune(False):  # the default module's buckets get the heuristic's pick
        row["default_ok"], row["default_err"] = checked(default(*inputs))
    row["ok"], row["max_abs_err"] = checked(user(*inputs))  # tunes on CUDA
    row["user_config"] = [list(c) for c in user.__globals__["CHOSEN"].values()]
    row["default_config"] = [list(c) for c in default.__globals__["CHOSEN"].values()]
    if args.dry_run or not row["ok"]:
        return row
    sets = rotating(inputs, l2_bytes)
    fused = cluster.traffic.fused_bytes
    row["fused_bytes"] = fused
    row["copy_us"] = copy_us(fused, l2_bytes)
    row["user_us"] = graph_us(user, sets)
    row["default_us"] = graph_us(default, sets)
    row["default_us_again"] = graph_us(default, sets)
    row["eager_us"] = graph_us(eager, sets)
    if case.liger and case.liger in liger:
        fn, reference = liger[case.liger]
        try:
            with torch.no_grad():
                row["liger_ok"] = close(fn(module, *model_inputs),
                                        reference(module, *model_inputs), case.dtype)[0]
            liger_sets = rotating(model_inputs, l2_bytes)
            row["liger_us"] = graph_us(lambda *xs: fn(module, *xs), liger_sets)
        except Exception as e:  # noqa: BLE001 - report, keep benchmarking
            row["liger_error"] = f"{type(e).__name__}: {e}"[:200]
    try:
        torch._dynamo.reset()
        compiled = torch.compile(eager)
        compiled(*inputs)
        row["inductor_us"] = graph_us(compiled, sets)
    except Exception as e:  # noqa: BLE001 - report, keep benchmarking
        row["inductor_error"] = f"{type(e).__name__}: {e}"[:200]
    row["pct_copy"] = row["copy_us"] / row["user_us"]
    if "inductor_us" in row:
        row["user_over_inductor"] = row["user_us"] / row["inductor_us"]
    return row


def _us(row: dict, key: str) -> str:
    return f"{row[key]:.1f}" if key in row else "-"


def table(rows: list[dict]) -> str:
    head = ("| case | dtype | copy µs | user gets µs | default µs (again) | eager µs | "
            "Inductor µs | Liger µs | % copy | user/Inductor | "
            "chosen (block, rows, warps[, programs per row]) |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        if "user_us" not in r:  # no timings: say why
            what = (f"not fused: {r['not_fused']}" if "not_fused" in r else
                    r.get("skipped") or r.get("error") or
                    ("numerics FAILED" if not r.get("ok") else
                     f"dry run: numerics ok, chosen {r.get('user_config')}"))
            lines.append(f"| {r['case']} | {r['dtype']} | {what} |" + " |" * 8)
            continue
        ratio = r.get("user_over_inductor")
        lines.append(
            f"| {r['case']} | {r['dtype']} | {_us(r, 'copy_us')} | {_us(r, 'user_us')} | "
            f"{_us(r, 'default_us')} ({_us(r, 'default_us_again')}) | {_us(r, 'eager_us')} | "
            f"{_us(r, 'inductor_us')} | {_us(r, 'liger_us')} | {r['pct_copy']:.0%} | "
            f"{f'{ratio:.2f}' if ratio else '-'} | {r.get('user_config')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="shapes_panel.json")
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny sizes, numerics only (the interpreter without CUDA)")
    ap.add_argument("--cases", default="all", help="comma-separated case numbers, or all")
    ap.add_argument("--case-timeout", type=int, default=40, help="seconds per case")
    ap.add_argument("--budget", type=int, default=290,
                    help="seconds after which remaining cases are skipped")
    args = ap.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("shapes_panel: no CUDA device; run with --dry-run for the CPU check",
              file=sys.stderr)
        return 2
    env = {"dry_run": True} if args.dry_run else environment()
    l2_bytes = env.get("l2_bytes", 0)
    liger = {} if args.dry_run else _liger()
    env["liger_kernel"] = bool(liger)
    if not args.dry_run:  # no compile worker processes competing for the host
        torch._inductor.config.compile_threads = 1
    chosen = range(len(CASES)) if args.cases == "all" else map(int, args.cases.split(","))
    rows, start = [], time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i in chosen:
            case = CASES[i]
            label = {"case": case.label, "dtype": str(case.dtype).removeprefix("torch.")}
            if time.monotonic() - start > args.budget:
                rows.append({**label, "skipped": f"panel budget of {args.budget} s spent"})
                continue
            t0 = time.monotonic()
            try:
                with time_guard(args.case_timeout):
                    row = run_case(case, args, l2_bytes, liger, Path(tmp))
            except (Exception, OverTime) as e:  # noqa: BLE001 - one case's failure is its row
                row = {**label, "error": f"{type(e).__name__}: {e}"[:300]}
            row["seconds"] = round(time.monotonic() - t0, 1)
            rows.append(row)
            print(f"[{i}] {case.label} {label['dtype']}: {row['seconds']} s", flush=True)
    Path(args.out).write_text(json.dumps({"env": env, "rows": rows}, indent=2, default=str))
    print(json.dumps(env))
    print(table(rows))
    bad = [r for r in rows if not r.get("ok", True) or not r.get("default_ok", True)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
