"""How many verified clusters of the shipped examples `--apply` would write (issue 26.5).

Runs `python -m fusion_core.cli --no-timing --json` on each example at the shapes of the
table in benchmarks/RESULTS.md ("Which verified clusters `--apply` can write") and counts,
per model, the clusters whose kernels passed numerics (`usable`) and, of those, the ones the
source map gives an exact edit (what the "Source edits" section prints as a diff). On CPU the
kernels run under Triton's interpreter (`TRITON_INTERPRET=1`, set here when CUDA is absent).

    python benchmarks/applied_examples.py [--only NAME ...] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> (file, class or None, CLI arguments for the inputs)
MODELS: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "example_net": ("examples/example_net.py", None, ("--input-shape", "4,1024")),
    "microgpt": ("examples/microgpt.py", "MicroGPT", ("--input-shape", "1,8", "--dtype",
                                                      "int64")),
    "gpt12": ("examples/gpt12.py", "GPT12", ("--input-shape", "1,8", "--dtype", "int64")),
    "channel_softmax": ("examples/channel_softmax.py", None, ("--input-shape", "1,16,8,8")),
    "convnext_block": ("examples/convnext_block.py", None, ("--input-shape", "1,32,8,8")),
    "dtype_rmsnorm": ("examples/dtype_rmsnorm.py", "DtypeNormMLP",
                      ("--input-shape", "2,16,128", "--dtype", "bfloat16")),
    "groupnorm_silu": ("examples/groupnorm_silu.py", None, ("--input-shape", "1,32,8,8")),
    "llama_block": ("examples/llama_block.py", "LlamaBlock", ("--input-shape", "1,16,128")),
    "mbconv_se": ("examples/mbconv_se.py", "MBConv", ("--input-shape", "1,16,8,8")),
    "mixer_block": ("examples/mixer_block.py", "MixerBlock", ("--input-shape", "1,64,128")),
    "resnet_block": ("examples/resnet_block.py", None, ("--input-shape", "1,32,8,8")),
    "two_norms": ("examples/two_norms.py", None, ("--input-shape", "1,32,64", "--input-shape",
                                                  "1,32,64")),
}


def count(name: str, out_dir: Path) -> dict[str, object]:
    """One model's verified and applicable cluster counts, or its CLI error."""
    path, cls, inputs = MODELS[name]
    json_path = out_dir / f"{name}.json"
    cmd = [sys.executable, "-m", "fusion_core.cli", "--model", str(ROOT / path),
           *(("--model-class", cls) if cls else ()), *inputs, "--no-timing",
           "--json", str(json_path)]
    start = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    seconds = time.perf_counter() - start
    if run.returncode != 0 or not json_path.exists():
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": name, "error": tail, "seconds": seconds}
    data = json.loads(json_path.read_text())
    usable = {c["cluster"] for c in data["validation"]["clusters"] if c["usable"]}
    exact = {m["cluster"] for m in data["source_map"] if m["map"] == "exact"}
    return {"model": name, "clusters": len(data["clusters"]), "verified": len(usable),
            "with_a_diff": len(usable & exact), "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda n: count(n, Path(tmp)), args.only))
    print("| model | clusters | verified | with a diff | s |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | error: {r['error']} | | | {r['seconds']:.0f} |")
        else:
            print(f"| {r['model']} | {r['clusters']} | {r['verified']} | {r['with_a_diff']} "
                  f"| {r['seconds']:.0f} |")
    ok = [r for r in rows if "error" not in r]
    print(f"| **total** | {sum(r['clusters'] for r in ok)} | {sum(r['verified'] for r in ok)} "
          f"| **{sum(r['with_a_diff'] for r in ok)}** | |")


if __name__ == "__main__":
    main()
