"""What `--apply` gives a user whose model is their own code, measured in one run.

    PYTHONPATH=. python benchmarks/applied_source.py [--models gpt12,llama_block] [--out F]

`end_to_end.py` patches kernels into a traced graph (Hugging Face models live in library files
`--apply` does not edit); this script measures the model a user of `--apply` runs afterwards:
their own file, rewritten. For each model below it copies the example file to a temporary
folder, runs `fusion-advisor --model COPY:CLASS --apply --yes` on the copy at the timed input
(kernels generated, verified and, on CUDA, timed as the CLI does by default), imports the
original and the rewritten module, loads one state dict into both, and times per forward:

- the original module in eager mode, and the rewritten one ("applied"), also captured as one
  CUDA graph and replayed (its launches with no host work between them);
- torch.compile (default mode) of the original, and of the rewritten module.

Wall time is a loop of calls with one synchronize (host work included: what a caller waits
for), the lowest of three rounds taken row after row; device time one CUDA-graph replay
(`end_to_end.py`'s clocks); GPU kernels per forward are counted with the profiler, and each
row's device time is listed by kernel. Each model's rows are printed (and --out written) as
soon as it is measured, so a run cut off by a time limit keeps the models it finished. The
target line compares the applied wall time with the eager wall time scaled by the kernels
the rewrite removed. Without CUDA (or with --dry-run) it runs the same steps at a tiny input
under Triton's interpreter and checks that both modules give the same output: nothing is
timed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fusion_core.fileio import write_atomic  # noqa: E402
from fusion_core.load import import_model_file  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    file: str  # under examples/
    cls: str
    shape: tuple[int, ...]  # timed input
    tiny: tuple[int, ...]  # the dry run's input
    dtype: str  # of the input: int64 token ids or float32 activations


ROUNDS = 3  # interleaved wall-time rounds per row
GRAPH_ROW = "applied, as one CUDA graph"

CASES = (
    Case("gpt12", "gpt12.py", "GPT12", (8, 512), (1, 16), "int64"),
    Case("llama_block", "llama_block.py", "LlamaBlock", (8, 256, 128), (1, 8, 128), "float32"),
)


def applied_copy(case: Case, shape: tuple[int, ...], folder: Path) -> tuple[Path, Path, str]:
    """The example copied to `folder` as the original and again rewritten by `--apply`;
    returns (original, rewritten, what the CLI said it applied and did not)."""
    original = folder / "original" / case.file
    rewritten = folder / "applied" / case.file
    for path in (original, rewritten):
        path.parent.mkdir(parents=True)
        shutil.copy(ROOT / "examples" / case.file, path)
    command = [sys.executable, "-m", "fusion_core.cli", "--model", f"{rewritten}:{case.cls}",
               "--input-shape", ",".join(map(str, shape)), "--dtype", case.dtype,
               "--apply", "--yes"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder)
    lines = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode != 0:
        raise RuntimeError(f"fusion-advisor --apply failed on {case.file} "
                           f"(exit {done.returncode}):\n" + "\n".join(lines[-6:]))
    said = [ln for ln in lines if ln.startswith(("Applied ", "Not applied", "Nothing to apply"))]
    return original, rewritten, "\n".join(said)


def models(case: Case, original: Path, rewritten: Path, device: str):
    """(original model, rewritten model) with the same weights, in eval mode on `device`."""
    torch.manual_seed(0)
    # The CLI's own import: the rewritten file's sibling `*_fused` package resolves.
    plain = getattr(import_model_file(original), case.cls)()
    fused = getattr(import_model_file(rewritten), case.cls)()
    fused.load_state_dict(plain.state_dict())
    return plain.eval().to(device), fused.eval().to(device)


def example_input(case: Case, shape: tuple[int, ...], device: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    if case.dtype == "int64":
        return torch.randint(0, 128, shape, generator=gen).to(device)
    return torch.randn(shape, generator=gen).to(device)


def measure(case: Case, folder: Path) -> dict[str, Any]:
    from end_to_end import more_rounds, row

    from fusion_core.validate.devicetime import capture

    original, rewritten, tail = applied_copy(case, case.shape, folder)
    plain, fused = models(case, original, rewritten, "cuda")
    x = example_input(case, case.shape, "cuda")
    result: dict[str, Any] = {"model": case.name, "input": list(case.shape), "cli": tail}
    with torch.no_grad():
        err = (plain(x) - fused(x)).abs().max().item()
        result["max_abs_err"] = err
        fns = {"eager": lambda: plain(x), "applied": lambda: fused(x)}
        rows = [row(name, fn) for name, fn in fns.items()]
        try:  # the rewritten model's launches replayed with no host work: its floor
            graph = capture(lambda: fused(x), [()])
            # A replay cannot be captured again: its wall time is its device time here
            rows.append(row(GRAPH_ROW, graph.replay, graphable=False))
            fns[GRAPH_ROW] = graph.replay
        except Exception as e:  # noqa: BLE001 - one row's failure keeps the others
            rows.append({"row": GRAPH_ROW, "error": str(e).splitlines()[0]})
        for name, module in (("torch.compile", plain), ("torch.compile of applied", fused)):
            compiled = torch.compile(module)
            fns[name] = lambda c=compiled: c(x)
            rows.append(row(name, fns[name]))
        # A shared host's bursts of load land on some rows and not others: every row's wall
        # time is its lowest of ROUNDS rounds taken row after row (end_to_end.more_rounds).
        more_rounds(rows, fns, ROUNDS)
    result["rows"] = rows
    eager, applied = rows[0], rows[1]
    if "error" not in eager and "error" not in applied:
        target = eager["wall_us"] * applied["kernels"] / eager["kernels"]
        result["target_wall_us"] = target
        result["target_met"] = applied["wall_us"] <= target
    return result


def dry_run(case: Case, folder: Path) -> dict[str, Any]:
    original, rewritten, tail = applied_copy(case, case.tiny, folder)
    plain, fused = models(case, original, rewritten, "cpu")
    x = example_input(case, case.tiny, "cpu")
    with torch.no_grad():
        err = (plain(x) - fused(x)).abs().max().item()
    edits = (rewritten.read_text() != original.read_text())
    return {"model": case.name, "input": list(case.tiny), "rewritten": edits,
            "max_abs_err": err, "cli": tail}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| model | input | how it runs | wall per forward | device per forward | kernels |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for r in results:
        shape = "×".join(map(str, r["input"]))
        for x in r["rows"]:
            if "error" in x:
                lines.append(f"| {r['model']} | {shape} | {x['row']} | {x['error']} | | |")
                continue
            device = f"{x['device_us'] / 1000:.2f} ms" if "device_us" in x else "–"
            lines.append(f"| {r['model']} | {shape} | {x['row']} | {x['wall_us'] / 1000:.2f} ms "
                         f"| {device} | {x['kernels']} |")
    for r in results:
        if "target_wall_us" in r:
            met = "met" if r["target_met"] else "missed"
            lines.append(f"\n{r['model']}: applied wall ≤ eager wall × kernels kept "
                         f"({r['target_wall_us'] / 1000:.2f} ms): {met}; outputs differ by at "
                         f"most {r['max_abs_err']:.2e}")
    return "\n".join(lines)


def short(kernel: str, width: int = 70) -> str:
    """A kernel's name cut to `width`: cuBLAS's and ATen's names run to hundreds of chars."""
    return kernel if len(kernel) <= width else kernel[:width - 1] + "…"


def kernel_lines(result: dict[str, Any], top: int = 12) -> str:
    """Per row, where its device time goes: the `top` kernels by µs per forward (the
    profiler's clock), then the rest summed: which kernels make one row slower than another."""
    lines = []
    for x in result["rows"]:
        spent = x.get("kernel_us")
        if not spent:
            continue
        lines.append(f"\n{result['model']}, {x['row']}: {sum(spent.values()):.0f} µs in "
                     f"{len(spent)} kernel names (profiler)")
        for name, us in list(spent.items())[:top]:
            lines.append(f"  {us:8.1f} µs  {x['census'].get(name, 0):3d}×  {short(name)}")
        rest = list(spent.values())[top:]
        if rest:
            lines.append(f"  {sum(rest):8.1f} µs  in {len(rest)} more kernel names")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(c.name for c in CASES))
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny inputs, interpreter, no timing: the steps and the outputs")
    args = parser.parse_args()
    wanted = args.models.split(",")
    unknown = set(wanted) - {c.name for c in CASES}
    if unknown:
        parser.error(f"unknown model(s) {', '.join(sorted(unknown))}; known: "
                     + ", ".join(c.name for c in CASES))
    dry = args.dry_run or not torch.cuda.is_available()
    if dry and os.environ.get("TRITON_INTERPRET") != "1":
        parser.error("a dry run needs TRITON_INTERPRET=1 in the environment (set before "
                     "triton is imported)")
    print(f"torch {torch.__version__}, "
          + (torch.cuda.get_device_name() if not dry else "dry run (no timing)"))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            if case.name not in wanted:
                continue
            folder = Path(tmp) / case.name
            results.append(dry_run(case, folder) if dry else measure(case, folder))
            r = results[-1]
            print(f"{case.name}: {r['cli']}", flush=True)
            # each model's rows as soon as they are measured: a call cut off by its time
            # limit keeps the models it finished
            if dry:
                print(f"{r['model']} {r['input']}: rewritten {r['rewritten']}, outputs differ "
                      f"by at most {r['max_abs_err']:.2e}", flush=True)
            else:
                print(table([r]), kernel_lines(r), sep="\n", flush=True)
            if args.out:
                write_atomic(args.out, json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
