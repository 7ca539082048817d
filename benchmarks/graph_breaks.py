"""Graph breaks of torch.compile on the applied model, with Dynamo's reasons.

Builds a model of ``end_to_end.py`` (``--models``), generates and validates its kernels,
patches every usable one in as the operator `--apply`'s package makes of it
(``modeltime.as_operators``) and prints, for the traced graph and for the applied graph,
``torch._dynamo.explain``'s graph count, break count and each break's reason with the user
frames that led to it; then compiles both with torch.compile (default backend) and prints
``counters["graph_break"]``, the count ``end_to_end.py`` reports. Exits 1 when the applied
graph breaks. Runs on CPU (interpreter kernels; use --tiny) and on CUDA (Triton-compiled
kernels as ``triton_op``s):

    python benchmarks/graph_breaks.py --models gpt2 --tiny --device cpu
    python benchmarks/graph_breaks.py --models gpt2 --device cuda
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

if not torch.cuda.is_available():  # before any kernel is decorated
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch._dynamo  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from end_to_end import MODELS, usable_launchers  # noqa: E402

from fusion_core.ir.shapes import InputSpec  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402
from fusion_core.validate.kernels import build_kernels  # noqa: E402
from fusion_core.validate.modeltime import as_operators  # noqa: E402
from fusion_core.validate.prepare import Recording, recording  # noqa: E402
from fusion_core.validate.run import validate  # noqa: E402
from fusion_core.validate.subgraph import patch  # noqa: E402


def applied_graph(build: Callable[[bool], tuple[torch.nn.Module, InputSpec]], tiny: bool,
                  device: str, workdir: Path
                  ) -> tuple[Recording, torch.fx.GraphModule, list[int]]:
    """The model's recording, its graph with every usable kernel as an operator (what
    ``end_to_end.py`` compiles as "torch.compile of the applied graph"), and the usable
    clusters' indices."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, spec = build(tiny)
    analysis = analyze(model, spec, device=device)
    kernels = build_kernels(analysis)
    report = validate(analysis, kernels=kernels, workdir=workdir, timing=False)
    usable = [r.cluster for r in report.results if r.usable]
    rec = recording(analysis, [], keep_rows=False, device=device, seed=0)
    loaded = usable_launchers(kernels, usable, workdir)
    return rec, patch(rec.gm, as_operators(rec, {i: loaded[i] for i in usable})), usable


def break_lines(gm: torch.fx.GraphModule, inputs: list[Any]) -> tuple[int, list[str]]:
    """Dynamo's break count for `gm(*inputs)` and one line per break (reason, then the
    innermost user frames)."""
    torch._dynamo.reset()
    explained = torch._dynamo.explain(gm)(*inputs)
    lines = []
    for reason in explained.break_reasons:
        lines.append(f"  - {str(reason.reason).strip().splitlines()[0]}")
        lines.extend(f"      at {f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}"
                     for f in reason.user_stack[-3:])
    return explained.graph_break_count, lines


def compiled_breaks(gm: torch.fx.GraphModule, inputs: list[Any]) -> int:
    """`counters["graph_break"]` after a first torch.compile call (as end_to_end.py counts)."""
    torch._dynamo.reset()
    counters.clear()
    torch.compile(gm)(*inputs)
    return sum(counters["graph_break"].values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2", help="substring of a model's label")
    parser.add_argument("--tiny", action="store_true", help="small configs")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-compile", action="store_true", help="explain only")
    args = parser.parse_args()
    wanted = args.models.lower().replace("-", "")
    broken = False
    for label, build in MODELS.items():
        if wanted not in label.lower().replace("-", ""):
            continue
        with tempfile.TemporaryDirectory() as work, torch.no_grad():
            rec, applied, usable = applied_graph(build, args.tiny, args.device, Path(work))
            size = " (tiny config)" if args.tiny else ""
            print(f"{label}{size} on {args.device}: {len(usable)} usable clusters", flush=True)
            for name, gm in (("traced graph", rec.gm), ("applied graph", applied)):
                count, lines = break_lines(gm, rec.inputs)
                print(f"{name}: {count} graph breaks (explain)", *lines, sep="\n", flush=True)
                if not args.no_compile:
                    print(f"{name}: {compiled_breaks(gm, rec.inputs)} graph breaks "
                          "(torch.compile, counters)", flush=True)
                broken |= name == "applied graph" and count > 0
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
