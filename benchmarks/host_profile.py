"""Where the host time of a forward goes: the traced graph against it with our kernels applied.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python benchmarks/host_profile.py --models gpt2

For each model of ``end_to_end.py`` it builds the traced graph and the applied graph the same
way, then prints (1) the graph's nodes by kind and target, before and after patching, (2) each
distinct launcher's host time per warm call beside its eager subgraph's (back-to-back calls,
one synchronize: when the kernels are short the GPU waits on the host, so this is host time),
and (3) cProfile's heaviest functions over a few forwards of each graph. It answers whether an
applied model's wall time is spent in our launchers or in the graph's other nodes.

With ``--compiled`` it profiles torch.compile instead: of the traced graph and of the applied
graph with each kernel as `--apply`'s operator, which asks Inductor to launch our kernels
with its static launcher (``operators._static_launch``): wall time per forward, cProfile's
heaviest functions (``_launch_kernel`` counts the static launches), and a census of the
lines Inductor's wrapper runs per forward (launches, allocations, asserts); ``--code-dir``
keeps the wrapper code. ``--triton-launch`` sets
TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=0 first, which the package leaves
as it is: our kernels then go through Triton's launcher (compile workers read the variable
when they start, so the two ways need two runs).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import fx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from end_to_end import MODELS, prepare  # noqa: E402

from fusion_core.validate.modeltime import as_operators  # noqa: E402
from fusion_core.validate.subgraph import eager_subgraph, launch_args, patch  # noqa: E402


def census(gm: fx.GraphModule) -> collections.Counter:
    """Nodes by kind: `call_function:<target>`, `call_method:<name>`, `get_attr`, ..."""
    counts: collections.Counter = collections.Counter()
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method", "call_module"):
            target = getattr(n.target, "__name__", str(n.target))
            counts[f"{n.op}:{target}"] += 1
        else:
            counts[n.op] += 1
    return counts


def per_call_us(fn: Callable[[], Any], calls: int = 300) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def profile_top(fn: Callable[[], Any], calls: int = 10, top: int = 25) -> str:
    fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def plain(text: str) -> str:  # "GPT-2 12L" and "gpt2" name the same model
    return "".join(ch for ch in text.lower() if ch.isalnum())


def profile_model(label: str, build: Callable, workdir: Path) -> None:
    p = prepare(label, build, False, workdir, values=True)
    rec, applied, inputs = p.rec, p.applied, p.rec.inputs
    print(f"== {label}: {len(p.usable)} usable clusters", flush=True)
    before, after = census(rec.gm), census(applied)
    print(f"nodes: traced {sum(before.values())}, applied {sum(after.values())}")
    for key in sorted(set(before) | set(after), key=lambda k: -before.get(k, 0)):
        print(f"  {key:60s} {before.get(key, 0):5d} {after.get(key, 0):5d}")
    with torch.no_grad():
        print("\nper warm call, host-bound (µs): launcher | its eager subgraph | cluster")
        seen = set()
        for i in p.usable:
            first = p.kernels.same_as.get(i, i)
            if first in seen:
                continue
            seen.add(first)
            c = rec.clusters[i]
            sub = eager_subgraph(rec.gm, c)
            values = [rec.values[n] for n in sub.inputs]
            kargs = launch_args(values, rec.device)
            eargs = values + [rec.values[n] for n in sub.extras]
            ours = per_call_us(lambda a=kargs, f=p.loaded[i]: f(*a))
            eager = per_call_us(lambda a=eargs, m=sub.module: m(*a))
            print(f"  {ours:8.1f} {eager:8.1f}  {c.chain}")
        traced_us = per_call_us(lambda: rec.gm(*inputs), 30)
        applied_us = per_call_us(lambda: applied(*inputs), 30)
        print(f"\nforward wall (µs): traced {traced_us:.0f}, applied {applied_us:.0f}",
              flush=True)
        print("\n-- cProfile, traced graph, 10 forwards")
        print(profile_top(lambda: rec.gm(*inputs)))
        print("-- cProfile, applied graph, 10 forwards")
        print(profile_top(lambda: applied(*inputs)))


STATIC_LAUNCH = "TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS"
WRAPPER_LINES = {  # what Inductor's wrapper does per forward, by the text of its call lines
    "kernel launches (.run)": re.compile(r"\.run\("),
    "allocations (empty_strided)": re.compile(r"empty_strided"),
    "extern calls (extern_kernels.)": re.compile(r"extern_kernels\."),
    "size/stride asserts": re.compile(r"assert_size_stride\("),
    "alignment asserts": re.compile(r"assert_alignment\("),
}


def wrapper_census(code: str) -> dict[str, int]:
    """Lines of `def call(` in Inductor's wrapper module, counted by kind."""
    body = code[code.find("def call("):] if "def call(" in code else code
    body = body[:body.find("\ndef ", 1)] if "\ndef " in body[1:] else body
    return {name: len(pattern.findall(body)) for name, pattern in WRAPPER_LINES.items()}


def profile_compiled(label: str, build: Callable, workdir: Path, code_dir: Path | None) -> None:
    import torch._dynamo
    from torch._inductor.utils import run_and_get_code

    p = prepare(label, build, False, workdir)
    rec, inputs = p.rec, p.rec.inputs
    operators_in = as_operators(rec, {i: p.loaded[i] for i in p.usable})
    as_ops = patch(rec.gm, operators_in)
    print(f"== {label}: {len(operators_in)} of {len(p.usable)} kernels as operators", flush=True)
    launch = os.environ.get(STATIC_LAUNCH)
    print(f"   {STATIC_LAUNCH}={launch} (user-defined kernels: "
          f"{'static launcher' if launch == '1' else 'Triton launcher'})", flush=True)
    with torch.no_grad():
        for name, gm in (("traced graph", rec.gm), ("applied graph", as_ops)):
            torch._dynamo.reset()
            compiled = torch.compile(gm)
            _, codes = run_and_get_code(compiled, *inputs)
            wall = per_call_us(lambda c=compiled: c(*inputs), 50)
            print(f"\n-- torch.compile of the {name}: wall {wall:.0f} µs per forward")
            for i, code in enumerate(codes):
                print(f"   wrapper {i}: {wrapper_census(code)}")
                if code_dir is not None:
                    code_dir.mkdir(parents=True, exist_ok=True)
                    (code_dir / f"{plain(label)}_{plain(name)}_{i}.py").write_text(code)
            print(profile_top(lambda c=compiled: c(*inputs), 20, 30), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2")
    parser.add_argument("--compiled", action="store_true",
                        help="profile torch.compile of the traced and the applied graph")
    parser.add_argument("--code-dir", type=Path, help="with --compiled: keep Inductor's code")
    parser.add_argument("--triton-launch", action="store_true",
                        help=f"with --compiled: {STATIC_LAUNCH}=0 (Triton's launcher)")
    args = parser.parse_args()
    if args.triton_launch:  # before any compile worker starts
        os.environ[STATIC_LAUNCH] = "0"
    torch.backends.cuda.matmul.allow_tf32 = True
    workdir = Path(tempfile.mkdtemp(prefix="host_profile_"))
    for label, build in MODELS.items():
        if any(plain(m) in plain(label) for m in args.models.split(",")):
            if args.compiled:
                profile_compiled(label, build, workdir, args.code_dir)
            else:
                profile_model(label, build, workdir)


if __name__ == "__main__":
    main()
