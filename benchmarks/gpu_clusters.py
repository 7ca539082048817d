"""Generated kernels against eager, Inductor and the device's copy bandwidth, per cluster.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python benchmarks/gpu_clusters.py --out results.json

For ExampleNet at 16384×1024 (float32 and bfloat16), microgpt at 32×256 tokens, the
MLP-Mixer block at 256×64×128, the LLaMA-style block at 64×256×128 and the gated MLP
between dtype-remembering RMSNorms (bf16, 64×256×128) and the two LayerNorms of one value
(64×256×64, one kernel) it
analyzes the model, generates each cluster's kernel under a few tuning variants, checks
each variant against the eager subgraph on fresh random inputs, and times eager, every
variant, and torch.compile (Inductor, default mode) of the same subgraph with
two clocks: device time from CUDA-graph replays over rotating input copies (several
times the L2 in total, so data comes from DRAM and host launch overhead is out), and
host-timed `triton.testing.do_bench` medians (L2 flushed, launch overhead in). The
ceiling is a device-to-device copy moving the same number of bytes (read + write) as
the cluster, measured in the same run, plus a 1 GiB copy. The default variant is timed
twice to show the spread. A table is printed last; full numbers go to --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels  # noqa: E402
from fusion_core.codegen.choices import CANDIDATES  # noqa: E402
from fusion_core.codegen.reference import (  # noqa: E402
    capture_values,
    cluster_inputs,
    eager_cluster,
)
from fusion_core.ir.shapes import InputSpec  # noqa: E402
from fusion_core.pipeline import analyze_file  # noqa: E402
from fusion_core.validate.devicetime import device_time  # noqa: E402

CASES = [
    ("ExampleNet fp32", "examples/example_net.py", (16384, 1024), torch.float32),
    ("ExampleNet bf16", "examples/example_net.py", (16384, 1024), torch.bfloat16),
    ("microgpt 32x256", "examples/microgpt.py", (32, 256), torch.int64),
    # Recomputed residuals, the split Linear bias (Mixer) and rotary/RMSNorm (LLaMA block).
    ("Mixer 256x64x128", "examples/mixer_block.py", (256, 64, 128), torch.float32),
    ("LlamaBlock 64x256x128", "examples/llama_block.py", (64, 256, 128), torch.float32),
    # HF LlamaRMSNorm's `dtype = x.dtype; ...; x.to(dtype)` (eager reference recomputes it).
    ("DtypeRMSNorm MLP bf16 64x256x128", "examples/dtype_rmsnorm.py", (64, 256, 128),
     torch.bfloat16),
    # Two LayerNorms of one value in one kernel (several reductions over the same rows).
    ("TwoNorms 64x256x64 (x2 inputs)", "examples/two_norms.py", [(64, 256, 64)] * 2,
     torch.float32),
    # Reductions over other dims: squeeze-excite's mean over (H, W) after BatchNorm and SiLU,
    # and GroupNorm's (sample, group) rows over channels and the image.
    ("MBConv-SE 64x16x56x56", "examples/mbconv_se.py", (64, 16, 56, 56), torch.float32),
    ("GroupNorm ResBlock 32x32x64x64", "examples/groupnorm_silu.py", (32, 32, 64, 64),
     torch.float32),
    # Views inside groups: LayerNorm over channels between two permutes (ConvNeXt), and a
    # softmax over the strided channel dim of NCHW.
    ("ConvNeXt block 64x32x56x56", "examples/convnext_block.py", (64, 32, 56, 56),
     torch.float32),
    ("ChannelSoftmax 64x16x56x56", "examples/channel_softmax.py", (64, 16, 56, 56),
     torch.float32),
]
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}


def median_us(fn, inputs) -> float:
    """Host-timed: what a caller sees, launch overhead included. The lower of two do_bench
    medians: a whole window can be slowed by the host (one run showed 21.6 µs where the
    same kernel's twin took 8.6 µs), which would mislabel a cluster launch-bound."""
    return min(do_bench(lambda: fn(*inputs), warmup=25, rep=100, return_mode="median")
               for _ in range(2)) * 1e3


def graph_us(fn, input_sets, samples: int = 15) -> float:
    """Device time per call: median over CUDA-graph replays that cycle through
    `input_sets` (together larger than L2, so every call reads from DRAM), timed as the
    timing gate times (validate/devicetime.py)."""
    return statistics.median(device_time(fn, input_sets, samples=samples).samples_us)


def rotating(inputs, l2_bytes: int) -> list[tuple]:
    """Copies of `inputs` (activations only; params shared) totalling >= 3x L2."""
    size = sum(t.numel() * t.element_size() for t in inputs) or 1
    k = min(32, max(2, -(-3 * l2_bytes // size)))
    return [tuple(t.clone() if t.numel() * t.element_size() > 2**20 else t for t in inputs)
            for _ in range(k)]


def copy_us(nbytes: int, l2_bytes: int) -> float:
    """Device time of a device-to-device copy that reads and writes `nbytes` in total."""
    n = max(nbytes // 8, 1)  # float32 elements: 16-byte vector copies, as a kernel would do
    src = torch.randn(n, device="cuda")
    dsts = rotating((torch.empty_like(src),), l2_bytes)
    srcs = rotating((src,), l2_bytes)
    sets = [(d[0], s_[0]) for d, s_ in zip(dsts, srcs, strict=False)]
    return graph_us(lambda d, s_: d.copy_(s_), sets)


def variants(kernel) -> list[Tuning]:
    base = Tuning()
    if kernel.tiled:  # elements per tile, widest column block (transposed inputs), warps
        return [base] + [replace(base, block=b, tile_cols=c, num_warps=w)
                         for b, c, w in CANDIDATES["tiled"]]
    if kernel.skeleton == "elementwise":
        return [base] + [replace(base, block=b, num_warps=w)
                         for b, w in ((1024, 8), (2048, 4), (2048, 8), (4096, 8), (4096, 16))
                         if (b, w) != (base.block, base.num_warps)]
    # a reduction file's NUM_WARPS is the fewest warps its programs take (`row_min_warps`)
    return [base] + [replace(base, row_min_warps=w, pack_elements=p)
                     for w, p in ((2, 2048), (8, 2048), (4, 1024), (4, 4096), (8, 4096),
                                  (8, 8192))
                     if (w, p) != (base.row_min_warps, base.pack_elements)]


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def close(got, ref, dtype) -> tuple[bool, float]:
    rtol, atol = TOL.get(dtype, (1e-5, 1e-5))
    err, ok = 0.0, True
    for g, r in zip(as_tuple(got), as_tuple(ref), strict=True):
        if g.dtype.is_floating_point:
            d = (g.float() - r.float()).abs()
            err = max(err, float(d.nan_to_num(float("inf")).max()))
            ok &= bool(torch.allclose(g.float(), r.float(), rtol=rtol, atol=atol))
            ok &= not bool(g.isnan().any() and not r.isnan().any())
        else:
            ok &= bool(torch.equal(g, r))
    return ok, err


def model_inputs(spec: InputSpec, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    if spec.dtype.is_floating_point:
        return (torch.randn(spec.shape, generator=gen, device="cuda").to(spec.dtype),)
    return (torch.randint(0, 256, spec.shape, generator=gen, device="cuda", dtype=spec.dtype),)


def run_case(label, path, shape, dtype, l2_bytes, work: Path) -> list[dict]:
    """`shape`: one input's shape, or a list of shapes for a model with several inputs."""
    specs = [InputSpec(tuple(sh), dtype) for sh in (shape if isinstance(shape, list) else [shape])]
    analysis = analyze_file(ROOT / path, specs)
    analysis.graph_module.to("cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    values = capture_values(analysis, *(t for spec in specs for t in model_inputs(spec, gen)))
    rows = []
    for cluster in analysis.clusters:
        if not cluster.inputs:  # every value generated (`arange → …`): no inputs to rotate
            print(f"{label} cluster {cluster.index}: no tensor input, not timed", flush=True)
            continue
        inputs = cluster_inputs(analysis, cluster, values, gen)
        eager = eager_cluster(analysis, cluster)
        ref = eager(*inputs)
        out_dtype = as_tuple(ref)[-1].dtype
        fused = cluster.traffic.fused_bytes
        sets = rotating(inputs, l2_bytes)
        row = {"case": label, "cluster": cluster.index, "chain": cluster.chain,
               "category": cluster.category, "fused_bytes": fused,
               "unfused_bytes": cluster.traffic.unfused_bytes,
               "eager_us": graph_us(eager, sets),
               "eager_host_us": median_us(eager, inputs),
               "copy_us": copy_us(fused, l2_bytes), "variants": []}
        best = None
        for i, tuning in enumerate(variants(generate(analysis, cluster))):
            kernel = generate(analysis, cluster, tuning)
            folder = work / f"{label.replace(' ', '_')}_{cluster.index}_{i}"
            module = load_kernel(write_kernels([kernel], folder)[0])
            launch = getattr(module, kernel.name)
            ok, err = close(launch(*inputs), ref, out_dtype)
            entry = {"tuning": asdict(tuning), "ok": ok, "max_abs_err": err,
                     "looped": kernel.looped, "tiled": kernel.tiled}
            if ok:
                entry["us"] = graph_us(launch, sets)
                if i == 0:
                    entry["us_again"] = graph_us(launch, sets)
                    entry["host_us"] = median_us(launch, inputs)
                if best is None or entry["us"] < best["us"]:
                    best = entry
            row["variants"].append(entry)
        try:
            torch._dynamo.reset()  # a fresh compile per cluster, never the recompile limit
            compiled = torch.compile(eager)
            compiled(*inputs)
            row["inductor_us"] = graph_us(compiled, sets)
            row["inductor_host_us"] = median_us(compiled, inputs)
        except Exception as e:  # noqa: BLE001 - report, keep benchmarking
            row["inductor_error"] = f"{type(e).__name__}: {e}"[:200]
        if generate(analysis, cluster).tiled:  # the flat kernel it replaces, same run
            flat = load_kernel(write_kernels([generate(analysis, cluster, tiled=False)],
                                             work / f"{label.replace(' ', '_')}_flat")[0])
            launch = getattr(flat, f"cluster{cluster.index}")
            ok, err = close(launch(*inputs), ref, out_dtype)
            row["flat"] = {"ok": ok, "max_abs_err": err,
                           **({"us": graph_us(launch, sets)} if ok else {})}
        row["default"] = row["variants"][0]
        row["best"] = best
        if best is not None:
            us = best["us"]
            row["gbps"] = fused / us / 1e3
            row["pct_copy"] = row["copy_us"] / us
            # Launch-bound: a caller waits mostly on the host, not on the kernel.
            host = row["default"].get("host_us", us)
            row["regime"] = ("launch-bound" if us < 0.5 * host else
                             "l2-resident" if fused <= l2_bytes else "dram-bound")
            if "inductor_us" in row:
                row["ours_over_inductor"] = us / row["inductor_us"]
        rows.append(row)
        print(f"[{label}] cluster {cluster.index} {cluster.chain}: done", flush=True)
    return rows


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(query, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    return {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "gpu": props.name, "capability": f"{props.major}.{props.minor}",
            "l2_bytes": props.L2_cache_size, "driver": driver, "torch": torch.__version__,
            "triton": triton.__version__, "python": sys.version.split()[0]}


def table(rows: list[dict], big_copy_gbps: float) -> str:
    head = ("| case | # | cluster | fused | copy µs | eager µs | ours µs (2nd) | Inductor µs | "
            "GB/s | % same-size copy | ours/Inductor | ours host µs | regime |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        b, d = r.get("best"), r["default"]
        ours = f"{b['us']:.1f}" if b else "FAILED"
        again = f" ({d['us_again']:.1f})" if "us_again" in d else ""
        ind = f"{r['inductor_us']:.1f}" if "inductor_us" in r else "error"
        lines.append(
            f"| {r['case']} | {r['cluster']} | {r['chain']} | {r['fused_bytes'] / 2**20:.1f} MB | "
            f"{r['copy_us']:.1f} | {r['eager_us']:.1f} | {ours}{again} | {ind} | "
            f"{r.get('gbps', 0):.0f} | {r.get('pct_copy', 0):.0%} | "
            f"{r.get('ours_over_inductor', float('nan')):.2f} | {d.get('host_us', 0):.1f} | "
            f"{r.get('regime', '-')} |")
    lines.append(f"\n1 GiB device-to-device copy: {big_copy_gbps:.0f} GB/s (read + write).")
    for r in rows:
        if "flat" in r and r.get("best"):
            flat = r["flat"]
            was = f"{flat['us']:.1f} µs" if "us" in flat else "FAILED"
            lines.append(f"{r['case']} cluster {r['cluster']}: flat-index kernel {was}, "
                         f"tiled {r['best']['us']:.1f} µs (best tuning {r['best']['tuning']})")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu_clusters.json")
    ap.add_argument("--cases", default="all", help="comma-separated case labels, or all")
    args = ap.parse_args()
    # Each variant is one fixed tuning: its launcher uses its own constants (the heuristic's
    # pick) instead of timing the candidates per shape (benchmarks/shapes_panel.py does that).
    os.environ.setdefault("FUSION_ADVISOR_AUTOTUNE", "0")
    env = environment()
    big = 2**30
    torch._inductor.config.compile_threads = 1  # no worker processes competing for the host
    big_gbps = 2 * big / copy_us(2 * big, env["l2_bytes"]) / 1e3
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, path, shape, dtype in CASES:
            if args.cases == "all" or label in args.cases.split(","):
                rows += run_case(label, path, shape, dtype, env["l2_bytes"], Path(tmp))
    Path(args.out).write_text(json.dumps({"env": env, "copy_1gib_gbps": big_gbps,
                                          "rows": rows}, indent=2))
    print(json.dumps(env))
    print(table(rows, big_gbps))


if __name__ == "__main__":
    main()
