"""Seeded fuzz: random small forwards analysed at one size, their kernels run at others.

Each model's forward is generated as source text (so stack traces name real lines), analysed
at one (B, T, C), every cluster's kernel generated, loaded and patched in; the patched graph
module then runs at other sizes and must match eager, or refuse with a one-line ValueError.
Run: `python tests/size_fuzz.py START COUNT` (a helper, not a test module; the test is
tests/test_codegen_size_fuzz.py). Each seed prints its refusals and defects, then totals.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import tempfile
import traceback
from pathlib import Path

import torch

# Patched graphs run on the GPU where there is one, their eager references on the CPU.
# TRITON_INTERPRET is the runner's to set (conftest, or main() below): set at import, it
# would make a GPU worker decorate every later test's kernels for the interpreter.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

H = 2
SIZES = [(2, 4, 8), (3, 5, 8), (1, 4, 8), (2, 1, 8), (3, 4, 8), (2, 6, 8), (1, 1, 8),
         (2, 4, 12), (4, 3, 8)]
UNARY = ["torch.sigmoid({v})", "torch.tanh({v})", "torch.relu({v})", "{v} * 1.5",
         "{v} + 0.25", "torch.nn.functional.gelu({v})", "torch.nn.functional.silu({v})",
         "torch.exp(torch.tanh({v}))", "{v}.abs()", "-{v}"]
OPERANDS = ["y", "self.w", "self.w2", "self.col[:T]", "pos.view(1, T, 1) * 0.1",
            "yc", "yr", "self.s"]


def step(rng: random.Random, v: str, n: int, has_y: bool) -> list[str]:
    """Source lines turning (B, T, C) value `v` into a new (B, T, C) value `h{n}`."""
    o = f"h{n}"
    operands = [x for x in OPERANDS if has_y or x not in ("y", "yc", "yr")]
    k = rng.choice("uuubbbwrrrsnhcxdpattt")
    if k == "u":
        return [f"{o} = " + rng.choice(UNARY).format(v=v)]
    if k == "b":
        a = rng.choice(operands)
        op = rng.choice(["+", "*", "-", "/ (1.5 + torch.abs({a})) *"])
        if "{a}" in op:
            return [f"{o} = {v} " + op.format(a=a) + " 1.0"]
        return [f"{o} = {v} {op} {a}"] if rng.random() < 0.7 else [f"{o} = {a} {op} {v}"]
    if k == "w":
        a = rng.choice(operands)
        return rng.choice([
            [f"{o} = torch.where({v} > {a}, {v}, {a} * 0.5)"],
            [f"{o} = {v}.masked_fill({v} < -0.5, 0.0)"],
            [f"{o} = torch.maximum({v}, {a})"],
            [f"{o} = ({v} > 0).to({v}.dtype) * {a}"],
        ])
    if k == "r":
        red = rng.choice(["sum", "mean", "amax", "var"])
        # var over dims that may hold one element is NaN, which every kernel keeps as eager
        # does (max reductions too: tests/test_nan_reductions.py)
        dims = rng.choice(["-1", "1", "(1, 2)", "0", "2", "(0, 1)"])
        if red == "amax" or rng.random() < 0.6:
            return [f"{o} = {v} - {v}.{red}({dims}, keepdim=True)"]
        return [f"{o} = {v} * torch.sigmoid({v}.{red}({dims}, keepdim=True))"]
    if k == "s":
        f = rng.choice(["softmax", "log_softmax"])
        d = rng.choice(["-1", "1", "-1", "0"])
        return [f"{o} = torch.{f}({v}, dim={d})"]
    if k == "n":
        return rng.choice([
            [f"{o} = torch.nn.functional.layer_norm({v}, (C,), self.w, self.b)"],
            [f"{o} = torch.nn.functional.layer_norm({v}, (C,))"],
            [f"{o} = torch.nn.functional.rms_norm({v}, (C,), self.w)"],
            [f"{o} = torch.nn.functional.group_norm({v}.transpose(1, 2), 2, self.w, self.b)"
             ".transpose(1, 2)"],
        ])
    if k == "h":
        return rng.choice([
            [f"q{n} = {v}.view(B, T, {H}, C // {H}).transpose(1, 2)",
             f"q{n} = q{n} * torch.sigmoid(q{n}.sum(-1, keepdim=True))",
             f"{o} = q{n}.transpose(1, 2).reshape(B, T, C)"],
            [f"s{n} = {v} @ {v}.transpose(-1, -2)",
             f"s{n} = s{n}.masked_fill(self.mask[:T, :T] == 0, float('-inf'))",
             f"{o} = torch.softmax(s{n}, dim=-1) @ {v}"],
            [f"q{n} = {v}.view(B, T, {H}, C // {H}).transpose(1, 2)",
             f"s{n} = (q{n} * 0.5).softmax(-1)",
             f"{o} = s{n}.transpose(1, 2).contiguous().view(B, T, C) + {v}"],
        ])
    if k == "c":
        return rng.choice([
            [f"c{n} = torch.cat(({v}, torch.sigmoid({v})), -1)",
             f"{o} = c{n}[..., :C] * c{n}[..., C:]"],
            [f"c{n} = torch.cat(({v}, {v}), -1)", f"{o} = c{n}.view(B, T, 2, C).amax(2)"],
            [f"c{n} = torch.cat(({v} * 2.0, {v}), -1)",
             f"{o} = c{n}.sum(-1, keepdim=True) + {v}"],
        ])
    if k == "x":
        return rng.choice([
            [f"{o} = {v} + {v}.mean(-1).unsqueeze(-1).expand(B, T, C)"],
            [f"{o} = {v} * {v}.amax(1).unsqueeze(1)"],
            [f"{o} = {v} + {v}[:, -1:].expand(-1, T, -1)"],
            [f"{o} = {v} - {v}[:, :1, :]"],
        ])
    if k == "d":
        return rng.choice([
            [f"{o} = {v}.half().float() * 2.0"],
            [f"{o} = {v}.to(torch.bfloat16).float()"],
            [f"{o} = ({v}.double() * 0.5).float()"],
            [f"{o} = ({v} > 0.1).float() + {v}"],
        ])
    if k == "p":
        return rng.choice([
            [f"{o} = {v}.masked_fill((pos % 2 == 0).view(1, T, 1), 0.0)"],
            [f"{o} = {v} + torch.arange(x.shape[1], device=x.device).view(1, -1, 1) * 0.1"],
            [f"{o} = {v} * (pos.view(1, T, 1) + 1).float().rsqrt()"],
        ])
    if k == "t":  # token shifts, flattened rows, scans, transposed elementwise ops
        return rng.choice([
            [f"{o} = torch.cat(({v}[:, :1], {v}[:, :-1]), 1) * 0.5 + {v}"],
            [f"{o} = torch.nn.functional.pad({v}, (0, 0, 1, 0))[:, :T] + {v}"],
            [f"{o} = torch.relu({v}.reshape(B * T, C) * 2.0).view(B, T, C)"],
            [f"{o} = torch.sigmoid({v}.flatten(0, 1)).view(B, T, -1)"],
            [f"{o} = torch.sigmoid({v}.transpose(1, 2)).transpose(1, 2)"],
            [f"{o} = {v}.cumsum(-1) * 0.1"],
            [f"{o} = {v}.cumsum(1) * 0.1"],
            [f"{o} = {v}.unsqueeze(2).expand(B, T, 2, C).reshape(B, T, 2 * C)"
             ".view(B, T, 2, C).sum(2)"],
            [f"{o} = torch.where(pos.view(1, T, 1) < T // 2, {v}, -{v})"],
            [f"{o} = {v} - {v}.mean((0, 2), keepdim=True)"],
            [f"{o} = {v}.mean(1, keepdim=True).expand_as({v}) + {v}"],
        ])
    return [f"{o} = {v} + {v}.sum(0, keepdim=True) * 0.1"]  # a reduction over the batch


def source(rng: random.Random) -> str:
    has_y = rng.random() < 0.5
    y_kind = rng.choice(["full", "col", "row"])
    lines = ["B, T, C = x.shape", "pos = torch.arange(T, device=x.device)"]
    if has_y:
        lines += {"full": ["yc = y.mean(-1, keepdim=True)", "yr = y[:1]"],
                  "col": ["yc = y", "yr = y * 2.0"],
                  "row": ["yc = y.sum(-1, keepdim=True)", "yr = y"]}[y_kind]
    v = "x"
    for n in range(rng.randint(2, 5)):
        lines += step(rng, v, n, has_y)
        v = f"h{n}"
    tail = rng.choice(["return {v}", "return {v}", "return {v}.sum(-1)", "return {v}.mean(1)",
                       "return {v}, {v}.amax(-1)", "return {v}.half()"])
    lines.append(tail.format(v=v))
    args = "self, x, y" if has_y else "self, x"
    body = "\n".join("        " + ln for ln in lines)
    return (f"import torch\n\n\nY_KIND = {y_kind!r}\nHAS_Y = {has_y}\n\n\n"
            f"class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        g = torch.Generator().manual_seed(0)\n"
            "        self.w = torch.nn.Parameter(torch.randn(8, generator=g), False)\n"
            "        self.b = torch.nn.Parameter(torch.randn(8, generator=g), False)\n"
            "        self.w2 = torch.nn.Parameter(torch.randn(1, 8, generator=g), False)\n"
            "        self.s = torch.nn.Parameter(torch.randn(1, generator=g), False)\n"
            "        self.col = torch.nn.Parameter(torch.randn(8, 1, generator=g), False)\n"
            "        self.register_buffer('mask', torch.tril(torch.ones(8, 8)))\n\n"
            f"    def forward({args}):\n{body}\n")


def inputs(mod, size, seed, variant=0, dtype=torch.float32):
    """`variant` 1: `x` strided (a transposed buffer); 2: `y` one long in a dim (eager
    broadcasts it, or refuses: the size is skipped); 3: both."""
    g = torch.Generator().manual_seed(seed)
    B, T, C = size
    x = torch.randn(B, T, C, generator=g)
    if variant & 1:
        x = torch.randn(B, C, T, generator=g).transpose(1, 2)
    if not mod.HAS_Y:
        return (x.to(dtype),)
    shape = list({"full": (B, T, C), "col": (B, T, 1), "row": (B, 1, C)}[mod.Y_KIND])
    if variant & 2:
        shape[seed % 2] = 1
    return x.to(dtype), torch.randn(*shape, generator=g).to(dtype)


def close(got, want, rounded=False):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want), (len(got), len(want))
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        # a bf16/fp16 rounding inside the chain: one step apart where the kernel's math
        # (tanh through sigmoid) lands on the other side of a rounding boundary
        tol = (0.1 if b.dtype == torch.bfloat16 else 3e-2 if rounded
               else 2e-3 if b.dtype == torch.float16 else 1e-4)
        torch.testing.assert_close(a, b, atol=tol, rtol=tol, equal_nan=True)


def run_one(seed: int, work: Path) -> list[tuple[str, str]]:
    from fusion_core.codegen import generate, load_kernel, write_kernels
    from fusion_core.pipeline import analyze
    from fusion_core.validate.subgraph import PatchError, patch

    rng = random.Random(seed)
    path = work / f"m{seed}.py"
    path.write_text(source(rng))
    spec = importlib.util.spec_from_file_location(f"fuzzm{seed}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.M().eval()
    dtype = torch.bfloat16 if rng.random() < 0.15 else torch.float32
    model = model.to(dtype)
    sizes = [s for s in SIZES]
    analysed = rng.choice(sizes[:5])
    others = rng.sample([s for s in sizes if s != analysed], 3)
    out = []
    try:
        a = analyze(model, *inputs(mod, analysed, seed, dtype=dtype))
    except Exception as e:  # noqa: BLE001
        return [("analyze-error", f"{type(e).__name__}: {e}".splitlines()[0])]
    launchers = {}
    for c in a.clusters:
        try:
            kernel = generate(a, c)
        except Exception as e:  # noqa: BLE001
            out.append(("gen-error", f"{c.chain}: {type(e).__name__}: {e}".splitlines()[0]))
            continue
        (kp,) = write_kernels([kernel], work / f"k{seed}_{c.index}")
        launchers[c.index] = (c, getattr(load_kernel(kp), kernel.name))
    if not launchers:
        return out + [("no-clusters", "")]
    try:
        gm = patch(a.graph_module, launchers).to(DEVICE)
    except PatchError as e:  # refused before any call (a cluster's result read early)
        return out + [("patch-refused", str(e).splitlines()[0])]
    out.append(("info", f"analysed {analysed} at {path}"))
    variants = [0] + [rng.choice([0, 0, 1, 2, 3]) for _ in others]
    for size, variant in zip([analysed, *others], variants, strict=True):
        args = inputs(mod, size, seed + 1, variant, dtype)
        if os.environ.get("SIZEFUZZ_VERBOSE"):  # a kernel writing out of bounds aborts later
            print(seed, "calls at", size, f"v{variant}", flush=True)
        try:
            with torch.no_grad():
                want = model(*args)
        except Exception:  # noqa: BLE001
            out.append(("eager-skip", f"{size} v{variant}"))
            continue
        try:
            with torch.no_grad():
                got = gm(*(t.to(DEVICE) for t in args))  # `to` keeps a transposed stride
            got = tuple(t.cpu() for t in got) if isinstance(got, tuple) else got.cpu()
        except ValueError as e:
            msg = str(e)
            tag = "refused" if "\n" not in msg and size != analysed else "DEFECT-refusal"
            out.append((tag, f"{size} (analysed {analysed}) v{variant}: {msg}"))
            continue
        except Exception as e:  # noqa: BLE001
            tb = [ln.strip() for ln in traceback.format_exc().splitlines()
                  if "fusion_core" in ln or "cluster" in ln][-3:]
            out.append(("DEFECT-exception", f"{size} v{variant}: {type(e).__name__}: {e} | {tb}"))
            continue
        try:
            close(got, want, dtype == torch.bfloat16 or "bfloat16" in path.read_text()
                  or "half()" in path.read_text())
            out.append(("ok", str(size)))
        except AssertionError as e:
            first = " ".join(str(e).split())[:200]
            out.append(("DEFECT-wrong", f"{size} v{variant} (analysed {analysed}): {first}"))
    return out


def main() -> None:
    if DEVICE == "cpu":  # before fusion_core imports triton (run_one imports it)
        os.environ.setdefault("TRITON_INTERPRET", "1")
    start, count = int(sys.argv[1]), int(sys.argv[2])
    work = Path(tempfile.mkdtemp(prefix="sizefuzz"))
    totals: dict[str, int] = {}
    for seed in range(start, start + count):
        try:
            res = run_one(seed, work)
        except Exception as e:  # noqa: BLE001
            res = [("harness-error", f"{type(e).__name__}: {e}".splitlines()[0])]
        for tag, msg in res:
            totals[tag] = totals.get(tag, 0) + 1
            if tag not in ("ok", "eager-skip", "no-clusters", "info"):
                print(seed, tag, msg, flush=True)
    print("TOTALS", totals, "models", count, "dir", work, flush=True)


if __name__ == "__main__":
    main()
