"""Generated kernels on shapes outside the model panel: wide rows, odd sizes, strided reductions.

Run on a CUDA machine from the repository root (one call; issue 28's 34 cases and cases 17,
2, 3, 4 took 120 s of wall time on a fresh H100 on 2026-12-06 with three interleaved rounds;
a budget of 300 s is ample):

    PYTHONPATH=. python benchmarks/shapes_panel.py --cases issue28 --budget 300 --out panel.json

Each case (``panel_cases.py``; ``--list`` prints them and the named groups) is a small function
(softmax, log_softmax, layer_norm, rms_norm with and without a prologue/epilogue, elementwise
chains on odd sizes, a softmax over a transposed view and over the channel dim of NCHW,
SiLU·mul, a row sum, a channels-last value permuted back to NCHW) at one shape and dtype. The
case is analyzed; when it does not give one cluster the row says "not fused: <reason>" instead
of a time. Otherwise its kernel is generated and checked against the eager subgraph, and every
column is timed with gpu_clusters.py's device clock (CUDA-graph replays over rotating inputs
larger than L2): the launcher as a user calls it, after its own per-shape tuning (the headline:
for few wide rows that includes whether each row is split over several programs; the tuning
cache starts empty, and a second load of the file must find the choice there: ``cache_hit``),
the same kernel with timing turned off (FUSION_ADVISOR_AUTOTUNE=0: the heuristic's pick,
"default") twice to show the spread, every candidate configuration of the bucket ("best
candidate": the fastest; "default/best" is what the heuristic leaves on the table: 1.0 where
both are one configuration, else the two timed again in interleaved rounds,
``panel_timing.default_vs_best``), eager, Inductor (default mode), Liger-Kernel's kernel for
the same work when `liger_kernel` is importable, and a device copy of the same bytes. The
columns the ratios compare (the user's, Inductor's, Liger's) are timed in --rounds interleaved
rounds (default 3), each the lowest of its rounds (``panel_timing.interleaved``). A case past
--case-timeout seconds, or started after --budget seconds, is recorded as such. Full numbers go
to --out; a Markdown table is printed last.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)
import torch  # noqa: E402

from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402
from fusion_core.validate.numerics import no_worse_than_eager  # noqa: E402
from panel_cases import CASES, GROUPS, Case, Fn1, Fn2, liger_ops  # noqa: E402
from gpu_clusters import as_tuple, close, copy_us, environment, graph_us, rotating  # noqa: E402
from time_limit import OverTime, time_guard  # noqa: E402
from panel_timing import (  # noqa: E402
    cache_check,
    candidate_us,
    default_vs_best,
    interleaved,
    pinned,
)

# Tiny rows wider than 64 columns loop over column blocks, as the wide rows do at full size,
# and few of them are split over several programs (chunks of 16 columns or more), as few wide
# rows are at full size (64x262144).
DRY_RUN_TUNING = Tuning(max_block=64, loop_block=16, split_min_cols=16)
AUTOTUNE_ENV = "FUSION_ADVISOR_AUTOTUNE"
CACHE_ENV = "FUSION_ADVISOR_CACHE_DIR"


@contextlib.contextmanager
def _env(name: str, value: str):
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name)
        else:
            os.environ[name] = before


def autotune(on: bool):
    return _env(AUTOTUNE_ENV, "1" if on else "0")


def build(case: Case, tiny: bool, device: str, gen: torch.Generator):
    """The case's module and its model inputs (random, on `device`)."""
    shapes = case.tiny if tiny else case.shapes
    width = shapes[0][-1]
    params = {p: torch.randn(width, generator=gen).to(case.dtype) for p in case.params}
    module = (Fn2 if len(shapes) == 2 else Fn1)(case.fn, width, params)
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
    start = time.perf_counter()
    row["ok"], row["max_abs_err"] = checked(user(*inputs))  # tunes on CUDA
    row["first_call_s"] = round(time.perf_counter() - start, 3)  # the timing, compiles
    row["user_config"] = [list(c) for c in user.__globals__["CHOSEN"].values()]
    if not args.dry_run:
        row["user_config_tuples"] = list(user.__globals__["CHOSEN"].values())
        cache_check(path, kernel.name, inputs, row)
        del row["user_config_tuples"]
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
    ratios = {"user_us": (user, sets)}  # the columns the ratios compare, timed again below
    if case.liger and case.liger in liger:
        fn, reference = liger[case.liger]
        try:
            with torch.no_grad():
                row["liger_ok"] = close(fn(module, *model_inputs),
                                        reference(module, *model_inputs), case.dtype)[0]
            liger_sets = rotating(model_inputs, l2_bytes)
            theirs = lambda *xs: fn(module, *xs)  # noqa: E731
            row["liger_us"] = graph_us(theirs, liger_sets)
            ratios["liger_us"] = (theirs, liger_sets)
        except Exception as e:  # noqa: BLE001 - report, keep benchmarking
            row["liger_error"] = f"{type(e).__name__}: {e}"[:200]
    try:
        torch._dynamo.reset()
        compiled = torch.compile(eager)
        compiled(*inputs)
        row["inductor_us"] = graph_us(compiled, sets)
        ratios["inductor_us"] = (compiled, sets)
    except Exception as e:  # noqa: BLE001 - report, keep benchmarking
        row["inductor_error"] = f"{type(e).__name__}: {e}"[:200]
    interleaved(row, ratios, args.rounds)
    row["candidates"] = candidate_us(path, kernel.name, inputs, sets)
    best = min(row["candidates"], key=lambda c: c["us"])
    row["best_us"], row["best_config"] = best["us"], best["config"]
    default_vs_best(row, default, pinned(path, kernel.name, inputs, best["config"]), sets,
                    args.rounds)
    row["pct_copy"] = row["copy_us"] / row["user_us"]
    if "inductor_us" in row:
        row["user_over_inductor"] = row["user_us"] / row["inductor_us"]
    if "liger_us" in row:
        row["user_over_liger"] = row["user_us"] / row["liger_us"]
    return row


def _us(row: dict, key: str) -> str:
    return f"{row[key]:.1f}" if key in row else "-"


def _ratio(row: dict, key: str) -> str:
    return f"{row[key]:.2f}" if key in row else "-"


def table(rows: list[dict]) -> str:
    head = ("| case | dtype | copy µs | user gets µs | default µs (again) | best candidate µs | "
            "default/best | eager µs | Inductor µs | Liger µs | % copy | user/Inductor | "
            "user/Liger | chosen (block, rows, warps[, programs per row]) | best |")
    lines = [head, "|" + "---|" * 15]
    for r in rows:
        if "user_us" not in r:  # no timings: say why
            what = (f"not fused: {r['not_fused']}" if "not_fused" in r else
                    r.get("skipped") or r.get("error") or
                    ("numerics FAILED" if not r.get("ok") else
                     f"dry run: numerics ok, chosen {r.get('user_config')}"))
            lines.append(f"| {r['case']} | {r['dtype']} | {what} |" + " |" * 12)
            continue
        lines.append(
            f"| {r['case']} | {r['dtype']} | {_us(r, 'copy_us')} | {_us(r, 'user_us')} | "
            f"{_us(r, 'default_us')} ({_us(r, 'default_us_again')}) | {_us(r, 'best_us')} | "
            f"{_ratio(r, 'default_over_best')} | {_us(r, 'eager_us')} | "
            f"{_us(r, 'inductor_us')} | {_us(r, 'liger_us')} | {r['pct_copy']:.0%} | "
            f"{_ratio(r, 'user_over_inductor')} | {_ratio(r, 'user_over_liger')} | "
            f"{r.get('user_config')} | {r.get('best_config')} |")
    return "\n".join(lines)


def case_numbers(spec: str) -> list[int]:
    """`all`, or comma-separated case numbers and group names (GROUPS), in that order."""
    if spec == "all":
        return list(range(len(CASES)))
    found: list[int] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if part in GROUPS:
            found += GROUPS[part]
        elif part.isdigit() and int(part) < len(CASES):
            found.append(int(part))
        else:
            raise ValueError(f"no case {part!r}: pass case numbers 0-{len(CASES) - 1}, 'all' "
                             f"or a group ({', '.join(GROUPS)})")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="shapes_panel.json")
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny sizes, numerics only (the interpreter without CUDA)")
    ap.add_argument("--cases", default="all",
                    help=f"comma-separated case numbers or groups ({', '.join(GROUPS)}), or all")
    ap.add_argument("--list", action="store_true", help="print the cases and groups, then exit")
    ap.add_argument("--case-timeout", type=int, default=60, help="seconds per case")
    ap.add_argument("--budget", type=int, default=290,
                    help="seconds after which remaining cases are skipped")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved timings of ours, Inductor and Liger (each the lowest)")
    args = ap.parse_args(argv)
    if args.list:
        for i, case in enumerate(CASES):
            print(f"{i:3d}  {case.label}  {str(case.dtype).removeprefix('torch.')}"
                  + (f"  (Liger: {case.liger})" if case.liger else ""))
        print("groups: " + "; ".join(f"{k} = {','.join(map(str, v))}" for k, v in GROUPS.items()))
        return 0
    if not args.dry_run and not torch.cuda.is_available():
        print("shapes_panel: no CUDA device; run with --dry-run for the CPU check",
              file=sys.stderr)
        return 2
    env = {"dry_run": True} if args.dry_run else environment()
    l2_bytes = env.get("l2_bytes", 0)
    liger = {} if args.dry_run else liger_ops()
    env["liger_kernel"] = bool(liger)
    if not args.dry_run:  # no compile worker processes competing for the host
        torch._inductor.config.compile_threads = 1
    try:
        chosen = case_numbers(args.cases)
    except ValueError as e:
        print(f"shapes_panel: {e}", file=sys.stderr)
        return 2
    rows, start = [], time.monotonic()
    # A fresh tuning cache: the user's column times its candidates, as a first run would.
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as cache, \
            _env(CACHE_ENV, cache):
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
