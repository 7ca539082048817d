"""Seeded fuzz: random small forwards mixing dtypes, through analysis, codegen and validation.

Each model mixes float16/bfloat16/float32/float64 inputs and parameters, casts, int and bool
tensors (HF-style attention masks and position ids, comparisons, `where`, `masked_fill`,
bitwise ops, integer arithmetic, `.long()` of floats), type promotion (int * float scalar,
fp16 + fp32, bf16 * python float) and reductions on low-precision values. The forward is
written as source text (stack traces name real lines), analysed as the CLI does, every
cluster's kernel generated and validated (gates 1 and 2, untimed), then every kernel patched
into the traced graph, which must return eager's dtypes and values within the project's model
tolerances (or, where eager itself errs, nearer a float64 run of the graph than eager is). A
seed is OK, REFUSED (a one-line reason), EAGER-NAN (an output eager makes NaN everywhere, so
validation compared nothing), or one of the DEFECT classes; SILENT marks two adjacent fusable
ops left out of every kernel with no rejection naming them.
Run: `python tests/dtype_fuzz.py --seeds A-B` (a helper, not a test module).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import tempfile
import time
import traceback
from pathlib import Path

import torch

# Patched graphs run on the GPU where there is one. TRITON_INTERPRET is main()'s to set.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

FLOATS = ["torch.float16", "torch.bfloat16", "torch.float32", "torch.float32",
          "torch.float64"]
SHAPES = [(2, 3, 8), (2, 4, 16), (1, 4, 8), (3, 2, 16)]


def _float_step(rng: random.Random, v: str, o: str) -> list[str]:
    """(B, T, C) float `v` -> (B, T, C) float `o`, its dtype maybe another."""
    k = rng.choice("ccpppiibbrrrsnnma")
    if k == "c":  # casts
        return [f"{o} = " + rng.choice([
            "{v}.float()", "{v}.half()", "{v}.to(torch.bfloat16)", "{v}.double()",
            "{v}.to(self.w.dtype)", "{v}.type_as(x)", "{v}.to(x.dtype)",
            "{v}.float().to({v}.dtype)", "({v}.float() * 2.0).half()",
        ]).format(v=v)]
    if k == "p":  # promotion between float dtypes and python scalars
        return [f"{o} = " + rng.choice([
            "{v} + self.w", "{v} * self.w2 + self.b", "{v} * 1.5", "0.5 * {v} - 0.25",
            "{v} + x", "x.float() * {v}", "{v} / (1.0 + self.w.abs())", "{v} * self.s",
            "{v} - {v}.half()", "{v}.to(torch.bfloat16) * 0.1 + {v}",
            "torch.sigmoid({v}) * {v}.double()", "{v} + self.w.to({v}.dtype)",
        ]).format(v=v)]
    if k == "i":  # integers back into floats
        return [f"{o} = " + rng.choice([
            "{v} + ids[..., None] * 0.5", "{v} * (ids[..., None] % 3)",
            "{v} + (ids[..., None] // 2).to({v}.dtype)", "{v} * ids[..., None]",
            "{v} + (({v} * 4).long() % 5)", "{v} - ({v} * 3).long()",
            "{v} + torch.floor_divide(ids, 3)[..., None]",
            "{v} + torch.remainder(ids - 7, 3)[..., None]",
            "{v} * (ids[..., None] + 1).float().rsqrt()",
            "{v} + (ids * 2 + 1)[..., None].to({v}.dtype)",
            "{v} + pos[..., None] * 0.01", "{v} + ({v}.int() * 2)",
        ]).format(v=v)]
    if k == "b":  # bools: comparisons, where, masked_fill, bitwise
        return rng.choice([
            [f"m_{o} = {v} > 0", f"{o} = torch.where(m_{o}, {v}, {v} * 0.1)"],
            [f"m_{o} = ({v} > 0) & mask_b[..., None]", f"{o} = torch.where(m_{o}, {v}, 0.0)"],
            [f"m_{o} = ({v} < -0.5) | ~mask_b[..., None]",
             f"{o} = {v}.masked_fill(m_{o}, torch.finfo({v}.dtype).min)"],
            [f"{o} = {v} * mask_b[..., None]"],
            [f"{o} = {v} + ({v} > 0.2).to({v}.dtype)"],
            [f"{o} = {v} * ({v} != 0) + (~({v} > 0)).float()"],
            [f"{o} = {v}.masked_fill(~mask_b[..., None], 0.0)"],
            [f"{o} = torch.where(mask_b[..., None] ^ ({v} > 0), {v}, -{v})"],
            [f"{o} = torch.where(ids[..., None] > 5, {v}, torch.zeros_like({v}))"],
            [f"{o} = {v} + ({v} > 0).sum(-1, keepdim=True)"],
        ])
    if k == "r":  # reductions, keepdim and dim variants
        red = rng.choice(["sum", "mean", "amax", "amin"])
        dims = rng.choice(["-1", "1", "(1, 2)", "2", "-2"])
        return rng.choice([
            [f"{o} = {v} - {v}.{red}({dims}, keepdim=True)"],
            [f"{o} = {v} * {v}.{red}({dims}, keepdim=True).float()"],
            [f"{o} = {v} + {v}.{red}(-1).unsqueeze(-1)"],
            [f"{o} = {v} + {v}.float().sum(-1, keepdim=True, dtype=torch.float64)"],
            [f"{o} = {v} * {v}.sum(1, keepdim=True, dtype=torch.float32)"],
        ])
    if k == "s":  # softmax, HF style
        d = rng.choice(["-1", "1", "-1"])
        return [f"{o} = " + rng.choice([
            "torch.softmax({v}, dim={d})", "torch.softmax({v}.float(), dim={d}).to({v}.dtype)",
            "torch.softmax({v}, dim={d}, dtype=torch.float32)",
            "torch.nn.functional.softmax({v} + ext, dim=-1)",
            "torch.log_softmax({v}.float(), {d}).type_as({v})",
            "({v} + ext).softmax(-1, dtype=torch.float32).to({v}.dtype)",
        ]).format(v=v, d=d)]
    if k == "n":  # norms with fp32 upcasts
        return rng.choice([
            [f"f_{o} = {v}.float()", f"var_{o} = f_{o}.pow(2).mean(-1, keepdim=True)",
             f"{o} = self.w * (f_{o} * torch.rsqrt(var_{o} + 1e-6)).to({v}.dtype)"],
            [f"{o} = torch.nn.functional.layer_norm({v}.float(), (C,), self.w.float(), "
             f"self.b.float()).to({v}.dtype)"],
            [f"{o} = torch.nn.functional.layer_norm({v}, (C,))"],
            [f"{o} = torch.nn.functional.layer_norm({v}, (C,), self.w.to({v}.dtype), "
             f"self.b.to({v}.dtype))"],
            [f"{o} = torch.nn.functional.rms_norm({v}.float(), (C,)).to({v}.dtype)"],
        ])
    if k == "a":  # attention scores with an additive or boolean key mask, fp32 softmax
        return [f"s_{o} = ({v} @ {v}.transpose(-1, -2)) * 0.3",
                rng.choice([f"s_{o} = s_{o} + ext",
                            f"s_{o} = s_{o}.masked_fill(~mask_b[:, None, :], "
                            f"torch.finfo(s_{o}.dtype).min)",
                            f"s_{o} = torch.where(mask_b[:, None, :], s_{o}, float('-inf'))"]),
                rng.choice([f"p_{o} = torch.softmax(s_{o}.float(), dim=-1).to({v}.dtype)",
                            f"p_{o} = torch.softmax(s_{o}, -1, dtype=torch.float32).type_as({v})",
                            f"p_{o} = s_{o}.softmax(-1)"]),
                f"{o} = p_{o} @ {v}"]
    return [f"{o} = {v} + mask_i[..., None]"]  # an int64 mask promotes to v's dtype


def source(rng: random.Random) -> str:
    xdt, pdt = rng.choice(FLOATS), rng.choice(FLOATS + ["None"] * 3)
    mask_kind = rng.choice(["bool", "long", "int32"])
    lines = ["B, T, C = x.shape",
             "mask_b = mask.bool()", "mask_i = mask.long()",
             "pos = (mask_i.cumsum(-1) - 1).masked_fill(mask_i == 0, 1)",
             "ext = (1.0 - mask_i[:, None, :].to(x.dtype)) * torch.finfo(x.dtype).min"]
    v = "x"
    for n in range(rng.randint(2, 5)):
        lines += _float_step(rng, v, f"h{n}")
        v = f"h{n}"
    tail = rng.choice(["return {v}", "return {v}", "return {v}.sum(-1)", "return {v}.float()",
                       "return {v}, ({v} > 0).sum(-1)", "return {v}.half(), pos",
                       "return {v}.mean(1)", "return {v}.amax(-1), {v}.argmax(-1)",
                       "return {v}.to(x.dtype)"])
    lines.append(tail.format(v=v))
    body = "\n".join("        " + ln for ln in lines)
    pdt_line = "" if pdt == "None" else f"        self.to({pdt})\n"
    return (f"import torch\n\n\nX_DTYPE = {xdt}\nMASK = {mask_kind!r}\n\n\n"
            "class M(torch.nn.Module):\n    def __init__(self, C):\n        super().__init__()\n"
            "        g = torch.Generator().manual_seed(0)\n"
            "        self.w = torch.nn.Parameter(torch.randn(C, generator=g), False)\n"
            "        self.b = torch.nn.Parameter(torch.randn(C, generator=g), False)\n"
            "        self.w2 = torch.nn.Parameter(torch.randn(1, C, generator=g), False)\n"
            "        self.s = torch.nn.Parameter(torch.randn(1, generator=g), False)\n"
            f"{pdt_line}\n"
            f"    def forward(self, x, mask, ids):\n{body}\n")


def inputs(mod, size, seed):
    """x of the model's dtype; an attention mask (left-aligned ones, some padding); ids."""
    g = torch.Generator().manual_seed(seed)
    B, T, C = size
    x = torch.randn(B, T, C, generator=g).to(mod.X_DTYPE)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None] < lens[:, None]
    mask = mask.to({"bool": torch.bool, "long": torch.int64, "int32": torch.int32}[mod.MASK])
    ids = torch.randint(0, 16, (B, T), generator=g)
    return x, mask, ids


MODEL_TOL = {torch.float32: (1e-4, 1e-3), torch.float64: (1e-8, 1e-6),
             torch.float16: (1e-2, 2e-2), torch.bfloat16: (5e-2, 1e-1)}


def mismatch(got, want, rounded: bool, narrow: torch.dtype | None = None) -> str | None:
    """Why the patched graph's outputs are not eager's: dtype, shape or values (the model
    tolerances of validate/numerics.py, at least those of `narrow`, the narrowest float dtype
    the graph computes in; doubled, as size_fuzz does, where the chain rounds to a 16-bit
    float midway: the kernel rounds once, eager at every op)."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    if len(got) != len(want):
        return f"DEFECT-arity: {len(got)} outputs, eager {len(want)}"
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if a.dtype != b.dtype:
            return f"DEFECT-dtype: output {i} is {a.dtype}, eager {b.dtype}"
        if a.shape != b.shape:
            return f"DEFECT-shape: output {i} is {tuple(a.shape)}, eager {tuple(b.shape)}"
        atol, rtol = MODEL_TOL.get(b.dtype, (0.0, 0.0))
        if narrow is not None and b.dtype.is_floating_point:
            atol, rtol = (max(t, n) for t, n in zip((atol, rtol), MODEL_TOL[narrow], strict=True))
        if rounded and b.dtype.is_floating_point:
            atol, rtol = max(atol, 3e-2), max(rtol, 3e-2)
        a64, b64 = a.double(), b.double()
        finite = b64.isfinite()
        if not torch.equal(a64[~finite].nan_to_num(), b64[~finite].nan_to_num()):
            return f"DEFECT-wrong: output {i} non-finite values differ"
        diff = (a64 - b64).abs()[finite]
        bad = diff > atol + rtol * b64.abs()[finite]
        if bad.any():
            # ints and bools from comparisons of floats the kernel rounds once: a value at
            # a threshold may flip (argmax of ties, `h > 0` of a 1-ulp difference)
            tag = "DEFECT-wrong" if b.dtype.is_floating_point else "DEFECT-flip"
            return (f"{tag}: output {i} ({b.dtype}): {int(bad.sum())} of {b.numel()} "
                    f"beyond atol {atol:g} rtol {rtol:g}, max err {float(diff.max()):.3g}")
    return None


def nearer_float64(gm, args, got, want, narrow: torch.dtype | None) -> str | None:
    """Why a patched graph beyond eager's tolerance is right after all, or None: every float
    output, element by element, is within 2x eager's distance from the graph run in float64
    (validate/float64.py) plus the model tolerance, all values finite (eager CPU's float16
    layer_norm of a row `finfo.min` fills whole is -0.71, not 0)."""
    from fusion_core.validate.float64 import graph_in_float64, inputs_in_float64

    # `patch(...).to(DEVICE)` moved the graph's own tensors: its inputs go there too
    moved = [t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in args]
    with torch.no_grad():
        ref = graph_in_float64(gm)(*inputs_in_float64(moved))
    ref = tuple(t.cpu() for t in ref) if isinstance(ref, tuple) else ref.cpu()
    got, want, ref = ((t,) if not isinstance(t, tuple) else t for t in (got, want, ref))
    worst = 0.0
    for a, b, r in zip(got, want, ref, strict=True):
        if not b.dtype.is_floating_point:
            continue
        a64, b64, r64 = a.double(), b.double(), r.double()
        if not all(bool(t.isfinite().all()) for t in (a64, b64, r64)):
            return None
        tols = [MODEL_TOL[b.dtype], *([MODEL_TOL[narrow]] if narrow else [])]
        atol, rtol = max(t[0] for t in tols), max(t[1] for t in tols)
        ours, eager = (a64 - r64).abs(), (b64 - r64).abs()
        if not bool((ours <= 2 * eager + atol + rtol * r64.abs()).all()):
            return None
        worst = max(worst, float(eager.max()))
    return f"patched graph nearer float64 than 2x eager, whose largest error is {worst:.3g}"


def silent(a) -> list[str]:
    """Adjacent fusable ops (pointwise/reduction producer and consumer) in no kernel, with no
    rejection holding either: a chain left unfused with no reason."""
    clustered = {n for c in a.clusters for n in c.nodes}
    rejected = {n for r in a.rejections for n in (*r.nodes, *r.culprits)}

    def op(n) -> bool:  # a cast to the dtype it has already moves no data
        same = n.op == "to" and n.refs and a.graph[n.refs[0]].meta == n.meta
        return n.kind.is_compute and not same and n.name not in clustered | rejected

    out = []
    for n in a.graph.nodes:
        if not op(n):
            continue
        for r in n.refs:
            p = a.graph[r]
            if op(p):
                out.append(f"{p.op}({p.name}) -> {n.op}({n.name})")
    return out


def opaque(a) -> list[str]:
    """Ops the registry does not know (each splits a chain; the report lists none)."""
    return sorted({n.target or n.op for n in a.graph.nodes if n.kind.name == "OPAQUE"})


def run_one(seed: int, work: Path) -> list[tuple[str, str]]:
    from fusion_core.errors import FusionAdvisorError
    from fusion_core.pipeline import analyze
    from fusion_core.validate.kernels import build_kernels
    from fusion_core.validate.numerics import EAGER_NAN_EVERYWHERE
    from fusion_core.validate.run import load_generated, validate
    from fusion_core.validate.subgraph import PatchError, patch

    rng = random.Random(seed)
    path = work / f"d{seed}.py"
    text = source(rng)
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"dtypefuzz{seed}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    size = rng.choice(SHAPES)
    model = mod.M(size[2]).eval()
    args = inputs(mod, size, seed)
    try:
        with torch.no_grad():
            want = model(*args)
    except Exception as e:  # noqa: BLE001 - torch refuses this mix itself: not ours to fuse
        return [("INVALID", f"eager: {type(e).__name__}: {e}".splitlines()[0])]
    out: list[tuple[str, str]] = [("info", str(path))]
    try:
        a = analyze(model, *args)
    except (FusionAdvisorError, ValueError) as e:
        msg = str(e)
        return out + [("REFUSED" if "\n" not in msg.strip() else "DEFECT-refusal", msg[:300])]
    except Exception as e:  # noqa: BLE001
        return out + [("DEFECT-analyze", f"{type(e).__name__}: {e}".splitlines()[0])]
    out += [("opaque", op) for op in opaque(a)]
    out += [("SILENT", s) for s in silent(a)]
    for r in a.rejections:
        out.append(("rejected", f"{r.check}: {r.reason}"[:200]))
    if not a.clusters:
        return out + [("no-clusters", "")]
    try:
        ks = build_kernels(a)
    except Exception as e:  # noqa: BLE001
        return out + [("DEFECT-gen", f"{type(e).__name__}: {e}".splitlines()[0])]
    for i, why in ks.failed.items():  # the dry run said it lowers
        out.append(("DEFECT-gen", f"cluster {i} {a.clusters[i].chain}: {why}"))
    try:
        report = validate(a, kernels=ks, workdir=work / f"v{seed}", timing=False)
    except Exception as e:  # noqa: BLE001
        return out + [("DEFECT-validate-crash", f"{type(e).__name__}: {e}".splitlines()[0])]
    for r in report.results:
        if r.failed is not None:
            # eager NaN in every element of an output: nothing to compare, not our kernel's
            tag = "EAGER-NAN" if EAGER_NAN_EVERYWHERE in r.status else "DEFECT-validate"
            out.append((tag, f"cluster {r.cluster} "
                        f"{a.clusters[r.cluster].chain}: {r.status}"[:400]))
    launchers = {}
    for i, k in ks.kernels.items():
        launchers[i] = (a.clusters[i], load_generated(k, work / f"k{seed}_{i}").launcher)
    try:
        gm = patch(a.graph_module, launchers).to(DEVICE)
    except PatchError as e:
        return out + [("REFUSED", f"patch: {e}".splitlines()[0])]
    try:
        with torch.no_grad():
            got = gm(*(t.to(DEVICE) for t in args))
        got = tuple(t.cpu() for t in got) if isinstance(got, tuple) else got.cpu()
    except ValueError as e:
        msg = str(e)
        return out + [("REFUSED" if "\n" not in msg.strip() else "DEFECT-refusal", msg[:300])]
    except Exception as e:  # noqa: BLE001
        tb = [ln.strip() for ln in traceback.format_exc().splitlines()
              if "fusion_core" in ln or "cluster" in ln][-3:]
        return out + [("DEFECT-exception", f"{type(e).__name__}: {e} | {tb}"[:400])]
    rounded = any(s in text for s in ("half", "bfloat16", "float16"))
    narrow = max((n.meta.dtype for n in a.graph.nodes if n.kind.is_compute and n.meta
                  and n.meta.dtype in MODEL_TOL), key=lambda d: torch.finfo(d).eps, default=None)
    why = mismatch(got, want, rounded, narrow)
    if why is not None and why.startswith("DEFECT-wrong") and "non-finite" not in why:
        excuse = nearer_float64(a.graph_module, args, got, want, narrow)
        if excuse is not None:
            return out + [("eager-errs", excuse), ("OK", f"{len(a.clusters)} clusters")]
    if why is not None:
        tag, _, msg = why.partition(": ")
        return out + [(tag, msg + " | chains: " + "; ".join(c.chain for c in a.clusters))]
    return out + [("OK", f"{len(a.clusters)} clusters")]


def verdict(res: list[tuple[str, str]]) -> str:
    """The seed's class: its first DEFECT, else SILENT, EAGER-NAN (an output eager makes NaN
    everywhere: a kernel there stays unverified), REFUSED, INVALID or OK."""
    tags = [t for t, _ in res]
    for t in tags:
        if t.startswith("DEFECT"):
            return t
    for t in ("SILENT", "EAGER-NAN", "REFUSED", "INVALID", "no-clusters"):
        if t in tags:
            return t
    return "OK"


def main() -> None:
    if DEVICE == "cpu":  # before fusion_core imports triton (run_one imports it)
        os.environ.setdefault("TRITON_INTERPRET", "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-49", help="A-B, inclusive")
    ap.add_argument("--quiet", action="store_true", help="only each seed's class")
    ns = ap.parse_args()
    lo, hi = (int(s) for s in ns.seeds.split("-"))
    work = Path(tempfile.mkdtemp(prefix="dtypefuzz"))
    totals: dict[str, int] = {}
    t0 = time.time()
    for seed in range(lo, hi + 1):
        try:
            res = run_one(seed, work)
        except Exception as e:  # noqa: BLE001
            res = [("DEFECT-harness", f"{type(e).__name__}: {e}".splitlines()[0])]
        v = verdict(res)
        totals[v] = totals.get(v, 0) + 1
        print(seed, v, flush=True)
        if not ns.quiet:
            for tag, msg in res:
                if tag not in ("info", "OK", "no-clusters"):
                    print("   ", tag, msg, flush=True)
    print("TOTALS", dict(sorted(totals.items())), f"seeds {hi - lo + 1}",
          f"{time.time() - t0:.0f}s", "dir", work, flush=True)


if __name__ == "__main__":
    main()
