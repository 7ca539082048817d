"""Wide rows read from HBM once: two hand-written kernel forms against a copy, on a GPU.

Run on a CUDA machine (sm_90) from the repository root:

    PYTHONPATH=. python benchmarks/wide_rows_probe.py [--budget 240] [--out F.json]

Issue 28 asks for rows wider than one program's registers (softmax, LayerNorm and RMSNorm over
32k-262k columns) read from HBM once. The generator's kernels loop over a row twice (its
statistics, then each element), the second pass from L2 where the rows in flight fit
(benchmarks/panel_reasons_2026-12-06_afternoon.md). Before building a kernel form, this probe
measures whether either way of keeping a row on chip reaches 85% of a same-size copy:

- ``cluster``: the whole row one Triton block, its program a cluster of ``num_ctas`` CTAs on
  neighbouring SMs (Hopper thread-block clusters), so that each CTA holds a part of the row in
  registers and Triton's compiler does the reduction across them;
- ``split``: each row split over RSPLIT programs, each holding its chunk in registers; each
  writes its partial statistics (sum of squares; mean and centered sum of squares; max and sum
  of exponentials), then waits on a per-row counter for its partners and combines all
  partials. ``ordered`` launches rows x RSPLIT programs and relies on the GPU starting them in
  order (a partner is resident when its program waits); ``cooperative`` launches only as many
  programs as fit at once (a cooperative launch guarantees it) and loops over the rows;
  ``reread`` is ``ordered`` loading its chunk again after the wait (from L1 or L2) instead of
  keeping it in registers; ``looped`` steps over its chunk twice in column blocks, as one
  kernel made of the generator's two split kernels would.

Each variant's device time (CUDA-graph replays over inputs past L2, ``validate/devicetime``)
is printed beside a copy of the same bytes (read the input, write the output) and its max abs
error against eager; a variant that fails to compile or launch says why. Nothing here is
product code: the numbers decide whether a kernel form is worth generating. The kernels are in
``wide_rows_kernels.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from wide_rows_kernels import row_split, row_split_looped, row_whole  # noqa: E402

from fusion_core.validate.devicetime import capture, device_times, rotating  # noqa: E402

EPS = 1e-5
CLUSTERS = "--ctas" in sys.argv  # also time blocks spread over clusters of 2 CTAs
@dataclass(frozen=True)
class Case:
    label: str
    kind: int  # 0 rms_norm, 1 layer_norm (times 2), 2 softmax (of x/8)
    rows: int
    cols: int
    dtype: torch.dtype


CASES = [  # the panel's rows under 85% of a copy, the most telling first
    Case("rms_norm 512x65536 bf16", 0, 512, 65536, torch.bfloat16),
    Case("layer_norm*2 256x65536 fp32", 1, 256, 65536, torch.float32),
    Case("softmax(x/8) 2048x50257 fp32", 2, 2048, 50257, torch.float32),
    Case("softmax(x/8) 64x262144 fp16", 2, 64, 262144, torch.float16),
    Case("layer_norm*2 512x65536 fp16", 1, 512, 65536, torch.float16),
    Case("rms_norm 128x65536 fp32 (the panel's rms_norm*2 rows)", 0, 128, 65536, torch.float32),
    Case("rms_norm 256x65536 fp32", 0, 256, 65536, torch.float32),
    Case("rms_norm 512x65536 fp16", 0, 512, 65536, torch.float16),
    Case("softmax(x/8) 2048x50304 fp32", 2, 2048, 50304, torch.float32),
]


def eager(case: Case, x, w, b):
    if case.kind == 2:
        return torch.softmax(x.float() * 0.125, -1).to(x.dtype)
    if case.kind == 0:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)
    return (F.layer_norm(x.float(), (case.cols,), w.float(), b.float(), EPS) * 2.0).to(x.dtype)


def _workspace(state: dict, rows: int, rsplit: int) -> None:
    """A split variant's partials (`p`) and per-row arrival counters (`cnt`), made at its
    first call; the counters zeroed once: the kernels set each row's back to 0."""
    if "p" not in state:
        state["p"] = torch.empty(rows * rsplit * 2, device="cuda", dtype=torch.float32)
        state["cnt"] = torch.zeros(rows, device="cuda", dtype=torch.int32)


def variants(case: Case):
    """(name, launch(x, w, b, y)) per configuration tried on this case."""
    out = []
    block = triton.next_power_of_2(case.cols)
    scale = 0.125 if case.kind == 2 else 2.0
    if block <= 65536:
        # Triton 3.6 does not compile these reductions for num_ctas > 1 ("parent layout must
        # have at least rank >= 2", H100, 2026-12-06): the cluster rows need --ctas.
        for ctas, warps in ((1, 32), *(((2, 32), (2, 16)) if CLUSTERS else ())):
            state = {}

            def whole(x, w, b, y, ctas=ctas, warps=warps, state=state):
                k = row_whole[(case.rows,)](x, w, b, y, case.cols, case.rows, EPS, scale,
                                             KIND=case.kind, BLOCK=block, num_warps=warps,
                                             num_ctas=ctas)
                state.setdefault("regs", k.n_regs)
                state.setdefault("spills", k.n_spills)
                # whether the compiler split the row over the cluster's CTAs (its PTX reads
                # the other CTAs' shared memory) or kept it whole in each (replicated)
                state.setdefault("xcta", "ptx" in k.asm and "shared::cluster" in k.asm["ptx"])
            whole.state = state
            out.append((f"cluster ctas={ctas} warps={warps}", whole))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for rsplit in (2, 4, 8):
        chunk = triton.next_power_of_2(triton.cdiv(case.cols, rsplit))
        if chunk > 32768 or chunk < 4096 or (rsplit - 1) * chunk >= case.cols:  # empty chunk
            continue
        for warps in (max(8, min(32, chunk // 1024)),):
            for mode in ("ordered", "cooperative", "reread"):
                state: dict = {}

                def split(x, w, b, y, rsplit=rsplit, chunk=chunk, warps=warps, mode=mode,
                          state=state):
                    _workspace(state, case.rows, rsplit)
                    cnt = state["cnt"]
                    grid = state.get("grid", case.rows * rsplit)
                    if mode == "cooperative" and "grid" not in state:
                        grid = min(grid, sms // rsplit * rsplit)  # one program an SM fits
                    k = row_split[(grid,)](x, w, b, y, state["p"], cnt, case.cols, case.rows,
                                            EPS, scale, KIND=case.kind, RSPLIT=rsplit,
                                            CHUNK=chunk, REREAD=mode == "reread",
                                            num_warps=warps,
                                            launch_cooperative_grid=mode == "cooperative")
                    if "grid" not in state:  # as many programs as the SMs hold at once
                        state["regs"], state["spills"] = k.n_regs, k.n_spills
                        warp_regs = -(-k.n_regs * 32 // 256) * 256  # allocated in 256s
                        per_sm = min(2048 // (32 * warps), 65536 // max(1, warp_regs * warps))
                        fit = sms * max(1, per_sm) // rsplit * rsplit
                        state["grid"] = (min(case.rows * rsplit, fit) if mode == "cooperative"
                                         else case.rows * rsplit)
                split.state = state
                out.append((f"split {mode} rsplit={rsplit} chunk={chunk} warps={warps}", split))
    for rsplit, step, warps in ((2, 4096, 16), (4, 4096, 16), (8, 4096, 16), (8, 2048, 8)):
        chunk = triton.cdiv(triton.cdiv(case.cols, rsplit), 16) * 16  # as split_rows cuts
        if chunk < step:
            continue
        state = {}

        def looped(x, w, b, y, rsplit=rsplit, chunk=chunk, step=step, warps=warps,
                   state=state):
            _workspace(state, case.rows, rsplit)
            k = row_split_looped[(case.rows * rsplit,)](
                x, w, b, y, state["p"], state["cnt"], case.cols, EPS, scale, KIND=case.kind,
                RSPLIT=rsplit, CHUNK=chunk, STEP=step, num_warps=warps)
            state.setdefault("regs", k.n_regs)
            state.setdefault("spills", k.n_spills)
        looped.state = state
        out.append((f"split looped rsplit={rsplit} step={step} warps={warps}", looped))
    return out


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0][:160]


def copy_fn(x, w, b, y):
    y.copy_(x)


def run_case(case: Case, l2: int, budget_end: float) -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(case.rows, case.cols, device="cuda", dtype=case.dtype, generator=gen) * 3
    w = torch.randn(case.cols, device="cuda", dtype=case.dtype, generator=gen)
    b = torch.randn(case.cols, device="cuda", dtype=case.dtype, generator=gen)
    want = eager(case, x, w, b).float()
    rows = []
    calls = [("copy", copy_fn)]
    for name, fn in variants(case):
        if time.monotonic() > budget_end:
            rows.append({"case": case.label, "variant": name, "error": "skipped: budget spent"})
            continue
        y = torch.empty_like(x)
        try:
            fn(x, w, b, y)  # the first call sizes a cooperative grid...
            fn(x, w, b, y)  # ...which the second (checked) and the timed ones use
            torch.cuda.synchronize()
            err = (y.float() - want).abs().max().item()
        except Exception as e:  # noqa: BLE001 - one variant's failure keeps the others
            rows.append({"case": case.label, "variant": name,
                         "error": f"{type(e).__name__}: {_first_line(e)}"})
            continue
        kept = {k: v for k, v in fn.state.items() if k in ("regs", "spills", "grid", "xcta")}
        rows.append({"case": case.label, "variant": name, "max_abs_err": err, **kept})
        calls.append((name, fn))
    args = rotating([x, w, b, torch.empty_like(x)], l2)
    for name, fn in calls[1:]:  # one graph that fails to capture would fail them all
        try:
            capture(fn, args[:1])
        except Exception as e:  # noqa: BLE001
            calls.remove((name, fn))
            row = next(r for r in rows if r["variant"] == name)
            row["error"] = f"not captured in a CUDA graph: {_first_line(e)}"
    try:
        times = device_times([(fn, args) for _, fn in calls], samples=3)
    except Exception as e:  # noqa: BLE001
        rows.append({"case": case.label, "variant": "(timing)", "error": str(e)[:200]})
        return rows
    us = {name: min(t.samples_us) for (name, _), t in zip(calls, times, strict=True)}
    for r in rows:
        if r["variant"] in us:
            r["us"] = us[r["variant"]]
            r["copy_us"] = us["copy"]
            r["pct_copy"] = 100 * us["copy"] / us[r["variant"]]
    rows.insert(0, {"case": case.label, "variant": "copy", "us": us["copy"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=240.0)
    ap.add_argument("--cases", default="", help="comma-separated substrings of case labels")
    ap.add_argument("--out", default="")
    ap.add_argument("--ctas", action="store_true",
                    help="also blocks over clusters of 2 CTAs (read at import: CLUSTERS)")
    args = ap.parse_args()
    end = time.monotonic() + args.budget
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    wanted = [s for s in args.cases.split(",") if s]
    results = []
    for case in CASES:
        if wanted and not any(s in case.label for s in wanted):
            continue
        rows = run_case(case, l2, end)
        results += rows
        for r in rows:
            if "us" in r and r["variant"] != "copy":
                print(f"| {case.label} | {r['variant']} | {r['us']:.1f} | {r['copy_us']:.1f} | "
                      f"{r['pct_copy']:.0f}% | {r['max_abs_err']:.2e} | {r.get('regs')} | "
                      f"{r.get('spills')} | {r.get('grid', case.rows)} | {r.get('xcta', '')} |",
                      flush=True)
            if "error" in r:
                print(f"| {case.label} | {r['variant']} | {r['error']} |", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
