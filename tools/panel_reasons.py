"""Static reasons for the shapes panel's rows under 85% of a same-size copy: our kernel at its
measured configuration beside Inductor's kernels for the same case, compiled for sm_90 on CPU.

Run from the repository root (no GPU needed; about five minutes on two cores):

    python tools/panel_reasons.py [PANEL_JSON] [--triton-path DIR] [--rows SUBSTRING]

For each row of PANEL_JSON (default: the 2026-12-04 evening H200 panel) with pct_copy < 0.85:
builds the case (benchmarks/panel_cases.py) at its benchmark shape, generates our kernel and
catches its launches on CPU tensors under the row's measured `user_config` (block, rows,
warps[, programs a row]); takes Inductor's Triton kernels for the same module from a CUDA
compile without a GPU (fusion_core.inductor.fake_cuda) and every configuration its heuristics
offer (Inductor picks one by timing on the device: not known here). Each kernel is compiled
for sm_90 in a subprocess (optionally with another Triton on `--triton-path`, put before the
venv's), ptxas -v gives registers, spills; Triton's metadata the shared memory; the PTX the
global access widths; the TTGIR the load sites a pointer argument has (tools/sm90_static.py).
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tools")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)
import torch  # noqa: E402

from fusion_core.codegen import generate, load_kernel, split_rows, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs  # noqa: E402
from fusion_core.inductor.fake_cuda import fake_cuda_capture  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402
from panel_cases import CASES, Fn1, Fn2  # noqa: E402
from sm90_static import (  # noqa: E402
    bytes_between_passes,
    global_accesses,
    issue_floor_us,
    load_sites,
    occupancy,
    sass_count,
    waves,
    widths_text,
)

PANEL = ROOT / "benchmarks" / "measured" / "shapes_panel_h200_2026-12-04_evening.json"
THRESHOLD = 0.85
_TL = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
       torch.int64: "i64", torch.int32: "i32"}

# Runs without the interpreter: compiles each job for sm_90, prints one JSON line a job.
_COMPILE = r"""
import importlib.util, json, os, subprocess, sys
import triton
from triton.backends.compiler import GPUTarget
bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
ptxas = next(os.path.join(bin_dir, n) for n in ("ptxas-blackwell", "ptxas")
             if os.path.exists(os.path.join(bin_dir, n)))

def load(path, inductor):
    if inductor:  # the autotuning decorators become identities: the bare jit function
        from torch._inductor.runtime import triton_helpers, triton_heuristics as th
        triton_helpers.set_driver_to_gpu = lambda: None  # no GPU driver here
        for name in ("reduction", "persistent_reduction", "pointwise", "split_scan"):
            setattr(th, name, lambda *a, **k: (lambda fn: fn))
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

for job in json.loads(sys.stdin.read()):
    try:
        fn = getattr(load(job["path"], job["inductor"]), job["name"])
        attrs = {(i,): [["tt.divisibility", 16]] for i in job["aligned"]}
        src = triton.compiler.ASTSource(fn=fn, signature=job["sig"], constexprs=job["consts"],
                                        attrs=attrs)
        options = {"num_warps": job["warps"]}
        if job.get("stages"):
            options["num_stages"] = job["stages"]
        done = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
        ptx = job["path"] + "." + job["name"] + ".ptx"
        with open(ptx, "w") as f:
            f.write(done.asm["ptx"])
        out = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", ptx, "-o", os.devnull],
                             capture_output=True, text=True).stderr
        cubin = ptx[:-4] + ".cubin"
        with open(cubin, "wb") as f:
            f.write(done.asm["cubin"])
        sass = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-sass", cubin],
                              capture_output=True, text=True).stdout
        print(json.dumps({"ptx": done.asm["ptx"], "ttgir": done.asm["ttgir"], "sass": sass,
                          "shared": done.metadata.shared, "ptxas": out}), flush=True)
    except Exception as e:  # one kernel's failure is its row's result
        print(json.dumps({"error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
"""


def _module(case, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(0)
    width = case.shapes[0][-1]
    params = {p: torch.randn(width, generator=gen).to(dtype) for p in case.params}
    module = (Fn2 if len(case.shapes) == 2 else Fn1)(case.fn, width, params)
    return module, tuple(torch.randn(s, generator=gen).to(dtype) for s in case.shapes)


def our_jobs(case, dtype, config: tuple[int, ...], work: Path) -> list[dict]:
    """Our kernel's launches at the benchmark shape under `config`, as compile jobs."""
    module, inputs = _module(case, dtype)
    analysis = analyze(module, *inputs)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, None, looped=case.looped)
    if kernel.looped and config[0] >= case.shapes[0][-1]:  # measured in one block, before
        kernel = generate(analysis, cluster, None, looped=False)  # the default loops here
    args = cluster_inputs(analysis, cluster, capture_values(analysis, *inputs))
    (path,) = write_kernels([kernel], work)
    launcher = load_kernel(path)
    launches, arg_names = [], {}

    class Catch:  # records a launch, runs nothing
        def __init__(self, name: str):
            self.name = name

        def __getitem__(self, grid):
            def launch(*a, **kw):
                launches.append((self.name, grid, a, kw))
            return launch

    for kind in ("kernel", "partials", "finish", "joined"):
        name = f"{kernel.name}_{kind}"
        if hasattr(launcher, name):
            jit = getattr(launcher, name)
            names = list(getattr(jit, "arg_names", None) or
                         jit.fn.__code__.co_varnames[:jit.fn.__code__.co_argcount])
            arg_names[name] = names
            setattr(launcher, name, Catch(name))
    launcher._choose = lambda key, configs, run, device: tuple(config)
    getattr(launcher, kernel.name)(*args)
    jobs = []
    for name, grid, a, kw in launches:
        names = arg_names[name]
        sig, consts = {}, {}
        for arg, value in zip(names, a, strict=False):
            sig[arg] = ("*" + _TL[value.dtype] if isinstance(value, torch.Tensor)
                        else "i64" if abs(value) >= 2**31 else "i32")
        for arg, value in kw.items():
            if arg in names:
                sig[arg], consts[arg] = "constexpr", value
        if "WAIT_POLLS" in consts:  # the joined kernel's wait as the GPU runs it (interpreted: 0)
            consts["WAIT_POLLS"] = split_rows.POLLS
        aligned = [i for i, v in enumerate(a) if isinstance(v, torch.Tensor) or v % 16 == 0]
        programs = 1
        for g in grid:
            programs *= g
        jobs.append({"path": str(path), "name": name, "sig": sig, "consts": consts,
                     "aligned": aligned, "warps": kw["num_warps"], "inductor": False,
                     "programs": programs, "label": name.rsplit("_", 1)[1]})
    return jobs


_KERNEL_SRC = re.compile(r"(\w+) = async_compile\.triton\('(\w+)', '''(.*?)'''", re.S)


def inductor_sources(case, dtype) -> list[tuple[str, str]]:
    """(name, source) of Inductor's Triton kernels for the case."""
    module, inputs = _module(case, dtype)
    cap = fake_cuda_capture(module, list(inputs))
    return [(name, source) for code in cap.code
            for _, name, source in _KERNEL_SRC.findall(code)]


def inductor_jobs(sources: list[tuple[str, str]], work: Path) -> list[dict]:
    """One compile job per kernel and configuration Inductor's heuristics offer (they are
    timed on the device, one kept). Runs the kernels' decorators in this process (main
    calls it in a process of its own for each case)."""
    jobs = []
    for name, source in sources:
        path = work / f"{name}.py"
        path.write_text(source)
        configs, meta = _inductor_configs(source, name)
        numel = {k: int(v) for k, v in re.findall(r"^\s+(\w)numel = (\d+)$", source, re.M)}
        for c in configs:
            kw = c["kwargs"]
            sig = dict(meta["signature"])
            programs = None  # only a 1D grid is worked out here
            if meta["grid_type"] == "Grid1D":
                programs = -(-numel.get("x", 1) // kw.get("XBLOCK", 1))
            blocks = ",".join(f"{k}={v}" for k, v in kw.items())
            jobs.append({"path": str(path), "name": name, "sig": sig,
                         "consts": {k: v for k, v in kw.items() if k in sig},
                         "aligned": [int(k.strip("(,)")) for k in meta["attrs"]],
                         "warps": c["num_warps"], "stages": c["num_stages"],
                         "inductor": True, "programs": programs,
                         "label": f"{name.split('_fused')[0]} {blocks} s{c['num_stages']}"})
    return jobs


def _inductor_jobs_apart(case, work: Path) -> list[dict]:
    """`inductor_jobs` of the case in a process of its own ([] if Inductor fails)."""
    work.mkdir(parents=True)
    dtype = str(case.dtype).removeprefix("torch.")
    proc = subprocess.run([sys.executable, __file__, "--inductor-jobs", case.label, dtype,
                           str(work)], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        print(f"{case.label} {dtype}: no Inductor kernels: {proc.stderr.strip()[-300:]}",
              file=sys.stderr)
        return []
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _inductor_configs(source: str, name: str) -> tuple[list[dict], dict]:
    """The configurations Inductor's decorator would autotune over, and the kernel's
    signature, divisibility attributes and grid type: the decorator is run with
    `cached_autotune` caught (this process's Triton is the interpreter's; nothing compiles)."""
    from torch._inductor.runtime import triton_helpers
    from torch._inductor.runtime import triton_heuristics as th

    seen: dict = {}

    def caught(size_hints, configs, triton_meta, inductor_meta=None, **_):
        seen.update(configs=configs, meta=triton_meta, inductor=inductor_meta or {})
        return lambda fn: fn

    originals = th.cached_autotune, triton_helpers.set_driver_to_gpu
    th.cached_autotune, triton_helpers.set_driver_to_gpu = caught, lambda: None  # no driver
    try:
        exec(compile(source, f"<{name}>", "exec"), {"__file__": f"{name}.py"})  # noqa: S102
    finally:
        th.cached_autotune, triton_helpers.set_driver_to_gpu = originals
    configs = [{"kwargs": dict(c.kwargs), "num_warps": c.num_warps,
                "num_stages": c.num_stages} for c in seen["configs"]]
    meta = seen["meta"]
    attrs = {str(k): v for k, v in (meta.get("configs") or [{}])[0].items()}
    return configs, {"signature": meta["signature"], "attrs": attrs,
                     "grid_type": seen["inductor"].get("grid_type", "?")}


def compile_jobs(jobs: list[dict], triton_path: str | None) -> list[dict]:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    if triton_path:
        env["PYTHONPATH"] = os.pathsep.join([triton_path, env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _COMPILE], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _usage(ptxas: str) -> tuple[int | None, int | None]:
    regs = re.search(r"Used (\d+) registers", ptxas)
    spill = re.search(r"(\d+) bytes spill stores", ptxas)
    return (int(regs.group(1)) if regs else None, int(spill.group(1)) if spill else None)


def summary(job: dict, out: dict) -> dict:
    """The table's numbers for one compiled kernel."""
    if "error" in out:
        return {"kernel": job["label"], "error": out["error"]}
    regs, spill = _usage(out["ptxas"])
    occ = occupancy(regs, job["warps"], out["shared"]) if regs else None
    acc = global_accesses(out["ptx"])
    sites = load_sites(out["ttgir"])
    names = [n for n, k in job["sig"].items() if k != "constexpr"]
    sass = sass_count(out.get("sass", ""))
    # Without a loop every warp issues at most the text's instructions: their issue time
    # over all programs, against the row's time, says whether issue (not memory) bounds it.
    issue = (None if sass.looped or not sass.instructions or not job["programs"]
             else round(issue_floor_us(sass.instructions, job["warps"], job["programs"]), 1))
    passes = {names[i] if i < len(names) else str(i): depths for i, depths in sites.items()}
    return {"kernel": job["label"], "warps": job["warps"], "regs": regs, "spill": spill,
            "smem": out["shared"], "blocks_sm": occ.blocks if occ else None,
            "warps_sm": occ.warps if occ else None, "limit": occ.limit if occ else None,
            "programs": job["programs"],
            "waves": (round(waves(job["programs"], occ.blocks), 2)
                      if occ and job["programs"] else None),
            "ld": widths_text(acc["ld"]), "st": widths_text(acc["st"]), "loads": passes,
            "sass": sass.instructions, "issue_us": issue, "branches": sass.branches}


def _loads_text(loads: dict[str, list[int]]) -> str:
    """`x:2(loop) w:1(loop)`: load sites a pointer has, `loop` where all sit in a loop."""
    return " ".join(f"{name}:{len(d)}{'(loop)' if all(d) else '' if not any(d) else '(mixed)'}"
                    for name, d in loads.items()) or "?"


def row_line(case_label: str, dtype: str, pct: float, who: str, s: dict) -> str:
    if "error" in s:
        return f"| {case_label} {dtype} | {pct:.0%} | {who} {s['kernel']} | {s['error']} |" + \
            " |" * 11
    return (f"| {case_label} {dtype} | {pct:.0%} | {who} {s['kernel']} | {s['warps']} | "
            f"{s['regs']} | {s['spill']} | {s['smem']} | {s['blocks_sm']}x{s['warps']}="
            f"{s['warps_sm']}/64 ({s['limit']}) | {s['programs']} | {s['waves']} | {s['ld']} | "
            f"{s['st']} | {_loads_text(s['loads'])} | {s['sass']} | "
            f"{_issue_text(s)} |")


def _issue_text(s: dict) -> str:
    """The issue floor; with forward branches it counts both sides, so a warp may issue less."""
    if s["issue_us"] is None:
        return "loop"
    return f"{s['issue_us']}" + (f" ({s['branches']} branches)" if s["branches"] else "")


HEADER = ("| row | % copy | kernel (config) | warps | regs | spill B | smem B | "
          "resident blocks x warps /SM (bound) | programs | waves | ld.global a thread | "
          "st.global | load sites a pointer | SASS a warp | issue floor µs |\n|" + "---|" * 15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("panel", nargs="?", default=str(PANEL))
    parser.add_argument("--triton-path", default=None)
    parser.add_argument("--rows", default="", help="only rows whose label contains this")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    parser.add_argument("--inductor-jobs", nargs=3, metavar=("LABEL", "DTYPE", "DIR"),
                        help="(internal) print one case's Inductor compile jobs as JSON")
    args = parser.parse_args()
    if args.inductor_jobs:
        label, dtype, work = args.inductor_jobs
        case = next(c for c in CASES if c.label == label and str(c.dtype) == f"torch.{dtype}")
        print(json.dumps(inductor_jobs(inductor_sources(case, case.dtype), Path(work))))
        return 0
    panel = json.loads(Path(args.panel).read_text())
    rows = [r for r in panel["rows"]
            if r.get("pct_copy", 1) < THRESHOLD and args.rows in r["case"]]
    by_label = {(c.label, str(c.dtype).removeprefix("torch.")): c for c in CASES}
    results, jobs = [], []
    print("compiling; Inductor's kernels first, one process a case", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        # A forced-loop case is the same module as its default one: captured once. Each
        # capture runs in its own process (after some, later captures in a process fail to
        # find libcuda: Inductor's code cache then loads kernels, which needs a driver).
        cases = [by_label[(row["case"], row["dtype"])] for row in rows]
        captured: dict[tuple, list] = {}
        for i, case in enumerate(cases):
            key = (case.label.removesuffix(" looped"), case.dtype)
            if key not in captured:
                captured[key] = _inductor_jobs_apart(case, Path(tmp) / f"i{i}")
        for i, (row, case) in enumerate(zip(rows, cases, strict=True)):
            jobs.append(our_jobs(case, case.dtype, tuple(row["user_config"][0]),
                                 Path(tmp) / f"r{i}")
                        + captured[(case.label.removesuffix(" looped"), case.dtype)])
        outs = iter(compile_jobs([j for row_jobs in jobs for j in row_jobs], args.triton_path))
        print(HEADER, flush=True)
        for row, row_jobs in zip(rows, jobs, strict=True):
            entry = {"case": row["case"], "dtype": row["dtype"], "pct_copy": row["pct_copy"],
                     "config": row["user_config"][0], "ours": [], "inductor": []}
            for job in row_jobs:
                s = summary(job, next(outs))
                who = "inductor" if job["inductor"] else "ours"
                entry[who].append(s)
                print(row_line(row["case"], row["dtype"], row["pct_copy"], who, s), flush=True)
            # What the resident programs read before the earliest starts a second pass over
            # its rows (if all advance together): against L2 it says whether a second pass
            # can come from L2. An estimate from the numbers above, not a measurement.
            first = entry["ours"][0]
            if first.get("blocks_sm"):
                case = by_label[(row["case"], row["dtype"])]
                n_rows, width = math.prod(case.shapes[0][:-1]), case.shapes[0][-1]
                entry["resident_mib"] = round(bytes_between_passes(
                    tuple(row["user_config"][0]), first["blocks_sm"], n_rows,
                    width * case.dtype.itemsize) / 2**20, 1)
            results.append(entry)
        l2 = panel.get("env", {}).get("l2_bytes")
        l2_text = f"; L2 {l2 / 2**20:.0f} MiB (the panel's env)" if l2 else ""
        print("\nours: rows in flight x their bytes (MiB; a split row: the whole input)"
              + l2_text)
        for entry in results:
            mib = entry.get("resident_mib")
            over = "" if mib is None or not l2 else (
                " (over L2)" if mib * 2**20 > l2 else " (within L2)")
            print(f"- {entry['case']} {entry['dtype']}: {mib if mib is not None else '?'}{over}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
