"""Compile one generated kernel for an H100/H200 (sm_90) without a GPU and print the layout
of each of its loads and stores, as JSON: whether Triton walks a tile fastest along the rows
or the columns (`order`) and how many elements a thread moves at once (`sizePerThread`), and
the global load instructions of its PTX (`ld.global.v4.b32`: four floats at once, a masked
load Triton could not vectorize is `ld.global.b32`).

Run as a script (Triton must be imported without TRITON_INTERPRET, so not inside the test
process): `python tests/ttgir_layouts.py SHAPE CASE [SHAPE CASE ...]`, CASE a key of CASES,
one JSON line per pair (one process for several: its start costs more than a compile). Integer
arguments divisible by 16 and the pointers are marked so, as Triton's launcher
specializes them. Exit status 3: this Triton cannot compile for sm_90 here.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from codegen_harness import Lambda, catch_launch  # noqa: E402

from fusion_core.codegen import generate, load_kernel  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402

CASES = {
    "channel softmax": lambda m, x: torch.softmax(x * 2.0, 1),
    "channel sum": lambda m, x: (x * 2.0).sum(1),
    "row softmax": lambda m, x: torch.softmax(x * 2.0, -1),
    "flat chain": lambda m, x: torch.tanh(x) * x + 1.0,
    # ConvNeXt's tail: a channels-last value permuted back to NCHW, plus an NCHW one
    "channels-last add": lambda m, y, x: (y * 2.0).permute(0, 3, 1, 2) + x,
    # ...and a result written channels-last beside the NCHW one
    "channels-last result": lambda m, x: ((a := torch.sigmoid(x)), a.permute(0, 2, 3, 1) * 3),
    # a chain over a channels-last input: iterated in its memory order, flat
    "channels-last chain": lambda m, x: torch.relu(x * 2.0 + 1.0).sigmoid(),
}
# Cases with other inputs than one tensor of SHAPE, in the kernel's argument order.
INPUTS = {
    "channels-last add": lambda n, c, h, w: (torch.randn(n, h, w, c), torch.randn(n, c, h, w)),
    "channels-last chain": lambda n, c, h, w: (
        torch.randn(n, c, h, w).to(memory_format=torch.channels_last),),
}


def load_layouts(shape: tuple[int, ...], case: str) -> dict:
    from triton.runtime.jit import JITFunction

    inputs = INPUTS[case](*shape) if case in INPUTS else (torch.randn(shape),)
    analysis = analyze(Lambda(CASES[case], arity=len(inputs)), *inputs)
    kernel = generate(analysis, analysis.clusters[0])
    with tempfile.TemporaryDirectory() as d:  # Triton reads the kernel's source file
        caught = catch_launch(kernel, Path(d), inputs)
        jit = getattr(load_kernel(Path(caught["path"])), f"{kernel.name}_kernel")
        return _compiled_loads(JITFunction(getattr(jit, "fn", jit)), caught)


def _compiled_loads(jit, caught: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget

    sig, consts, attrs = {}, {}, {}
    for i, (name, value) in enumerate(zip(caught["names"], caught["args"], strict=False)):
        tensor = isinstance(value, torch.Tensor)
        sig[name] = "*fp32" if tensor else "i32"
        if tensor or value % 16 == 0:
            attrs[(i,)] = [["tt.divisibility", 16]]
    for name, value in caught["kwargs"].items():
        if name in caught["names"]:
            sig[name], consts[name] = "constexpr", value
    source = triton.compiler.ASTSource(fn=jit, signature=sig, constexprs=consts, attrs=attrs)
    asm = triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm
    ir = asm["ttgir"]
    blocked = dict(re.findall(r"^(#blocked\d*) = #ttg.blocked<(.*)>$", ir, re.M))
    found = {"loads": [], "stores": []}
    for line in ir.splitlines():
        op = "loads" if "tt.load" in line else "stores" if "tt.store" in line else None
        if op and (m := re.search(r"(#blocked\d*)>", line)):
            fields = blocked[m.group(1)]
            found[op].append({k: [int(v) for v in re.search(rf"{k} = \[([\d, ]+)\]", fields)
                                  .group(1).split(",")] for k in ("order", "sizePerThread")})
    found["ptx_loads"] = sorted(set(re.findall(r"\bld\.global[.\w]*", asm["ptx"])))
    # ...and every global load and store with its cache qualifiers (`ld.global.L1::evict_last
    # .L2::cache_hint.v4.b32`: a looped row's load that asks L2 to keep it, four floats at once)
    found["ptx_memory"] = sorted(set(re.findall(r"\b(?:ld|st)\.global[.\w:]*", asm["ptx"])))
    return {"rows_per_program": caught["kwargs"].get("ROWS_PER_PROGRAM"), **found}


if __name__ == "__main__":
    pairs = sys.argv[1:]
    for shape, case in zip(pairs[::2], pairs[1::2], strict=True):
        try:
            found = load_layouts(tuple(int(v) for v in shape.split(",")), case)
        except (ImportError, RuntimeError) as e:  # no sm_90 compiler in this Triton
            print(f"cannot compile for sm_90: {e}", file=sys.stderr)
            sys.exit(3)
        print(json.dumps(found), flush=True)
