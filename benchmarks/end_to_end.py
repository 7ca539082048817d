"""The whole model, eager against our kernels against torch.compile, measured in one run.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python benchmarks/end_to_end.py --out end_to_end.json

For Hugging Face GPT-2 (12 layers, fp16, input 8×512) and a LLaMA-style model (4 layers,
hidden 2048, bf16, input 4×512), random weights, it analyzes the model, generates and
validates every cluster's kernel (numerics only, as the CLI does), patches every usable
kernel into the traced graph, and times, per forward:

- the HF module in eager mode, and the traced graph in eager mode;
- the traced graph with our kernels patched in, called from Python ("applied");
- that patched graph captured once in a CUDA graph and replayed ("applied, CUDA graph");
- torch.compile (default mode) of the HF module (the user's baseline), of the traced graph
  (the graph our passes made: a boolean attention mask already converted once, as
  ``ir/sdpa_mask.py`` does), and of the patched graph with each kernel registered as the
  torch operator `--apply`'s package makes of it; with `--handback` (an experiment) that
  patched graph with the clusters where Inductor's own kernel computes more than ours,
  or the same, left to Inductor (``handed_back``).

Two clocks: wall time per forward (a loop of calls, one synchronize, divided: what a caller
waits for, host work included; taken in --rounds interleaved rounds, each row its lowest) and
device time per forward (one CUDA-graph replay of the forward timed with events: the GPU's own
work, host launch cost out). GPU kernels per forward are counted with the profiler and kept by
name in the JSON (`census`). A row whose compile or capture fails says why and keeps the
others. The headline is the applied model's wall time against eager's, as a user calling it
would see it; the device time is printed beside it. After each model's table, issue 26's
targets for it (``targets``), each met or missed with the two numbers it compares."""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from torch._dynamo.utils import counters

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fusion_core.ir.shapes import InputSpec  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402
from fusion_core.validate.devicetime import capture, device_time  # noqa: E402
from fusion_core.validate.kernels import build_kernels  # noqa: E402
from fusion_core.validate.modeltime import as_operators  # noqa: E402
from fusion_core.validate.prepare import recording  # noqa: E402
from fusion_core.validate.run import load_generated, validate  # noqa: E402
from fusion_core.validate.subgraph import patch  # noqa: E402


def gpt2(tiny: bool) -> tuple[torch.nn.Module, InputSpec]:
    import transformers

    size = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64) if tiny else \
        dict(n_layer=12, n_embd=768, n_head=12)
    config = transformers.GPT2Config(**size, use_cache=False)
    model = transformers.GPT2Model(config).to(torch.float16)
    return model, InputSpec((2, 16) if tiny else (8, 512), torch.int64)


def llama(tiny: bool) -> tuple[torch.nn.Module, InputSpec]:
    import transformers

    size = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                num_attention_heads=4, num_key_value_heads=4, vocab_size=128,
                max_position_embeddings=64) if tiny else \
        dict(num_hidden_layers=4, hidden_size=2048, intermediate_size=5632,
             num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
             max_position_embeddings=1024)
    config = transformers.LlamaConfig(**size, use_cache=False)
    model = transformers.LlamaModel(config).to(torch.bfloat16)
    return model, InputSpec((2, 16) if tiny else (4, 512), torch.int64)


MODELS: dict[str, Callable[[bool], tuple[torch.nn.Module, InputSpec]]] = {
    "GPT-2 12L fp16 8x512": gpt2, "LLaMA-style 4L bf16 4x512": llama}


def wall_us(fn: Callable[[], Any], calls: int = 30, repeat: int = 5) -> float:
    """Wall time per call: `calls` calls back to back, one synchronize, median of repeats."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def device_us(fn: Callable[[], Any]) -> float:
    """GPU time per call of `fn`: CUDA-graph replays timed with events (devicetime.py's
    method, the one the timing gate uses), median of the samples."""
    return statistics.median(device_time(fn, [()]).samples_us)


def kernel_census(fn: Callable[[], Any]) -> tuple[dict[str, int], dict[str, float]]:
    """GPU kernels one call launches, by name (the profiler's), most launched first, and the
    µs spent in each (the profiler's own clock per kernel, summed over its launches), most
    first, from one profiled call; copies and fills (memcpy, memset) are not kernels here."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    launches: Counter = Counter()
    spent: Counter = Counter()
    for e in prof.events():
        if (e.device_type == torch.autograd.DeviceType.CUDA
                and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()):
            launches[e.name] += 1
            spent[e.name] += e.device_time_total
    return (dict(launches.most_common()),
            {name: round(us, 2) for name, us in spent.most_common()})


def more_rounds(rows: list[dict[str, Any]], fns: dict[str, Callable[[], Any]], rounds: int,
                timer: Callable[[Callable[[], Any]], float] = wall_us) -> None:
    """Wall time in `rounds` interleaved rounds: a row's first round is its `row()` timing,
    then each round times every row once, one after another; a row keeps its lowest round
    (`wall_us`) and all of them (`wall_us_rounds`). Timed once each, row after row, one
    row's wall time moved up to 2x between calls on a shared host (2026-12-06 evening): a burst
    of load landed on some rows and not others. A round that fails keeps the rounds before
    it (`wall_error`)."""
    timed = [r for r in rows if "wall_us" in r and r["row"] in fns]
    for r in timed:
        r["wall_us_rounds"] = [r["wall_us"]]
    for _ in range(rounds - 1):
        for r in timed:
            if "wall_error" in r:
                continue
            try:
                r["wall_us_rounds"].append(timer(fns[r["row"]]))
            except Exception as e:  # noqa: BLE001 - one row's failure keeps the others
                r["wall_error"] = (f"round {len(r['wall_us_rounds']) + 1}: "
                                   f"{type(e).__name__}: {e}")[:200]
    for r in timed:
        r["wall_us"] = min(r["wall_us_rounds"])


def row(name: str, fn: Callable[[], Any], graphable: bool = True) -> dict[str, Any]:
    """Wall time, device time, kernel count and device time by kernel of one way to run the
    forward."""
    out: dict[str, Any] = {"row": name}
    try:
        out["wall_us"] = wall_us(fn)
        out["census"], out["kernel_us"] = kernel_census(fn)
        out["kernels"] = sum(out["census"].values())
        if graphable:
            out["device_us"] = device_us(fn)
    except Exception as e:  # noqa: BLE001 - one row's failure keeps the others
        out["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}"
        traceback.print_exc()
    return out


def usable_launchers(kernels: Any, usable: list[int], workdir: Path) -> dict[int, Callable]:
    """Each usable cluster's loaded launcher, one module per distinct kernel (`kernels`: the
    analysis' KernelSet)."""
    loaded: dict[int, Callable] = {}
    for i in usable:
        first = kernels.same_as.get(i, i)
        if first not in loaded:
            loaded[first] = load_generated(kernels.kernels[first], workdir).launcher
        loaded[i] = loaded[first]
    return loaded


@dataclass(frozen=True)
class Prepared:
    """A model analysed for CUDA, its kernels validated, and its traced graph with every
    usable kernel patched in."""

    hf: torch.nn.Module  # the module as the user runs it for inference (eval), on the GPU
    analysis: Any
    kernels: Any  # the analysis' KernelSet
    report: Any  # the numerics-only ValidationReport
    usable: list[int]
    rec: Any  # the Recording: traced graph, inputs (and values, with `values=True`)
    loaded: dict[int, Callable]  # usable cluster -> its launcher
    applied: torch.fx.GraphModule


def prepare(label: str, build: Callable[[bool], tuple[torch.nn.Module, InputSpec]],
            tiny: bool, workdir: Path, values: bool = False) -> Prepared:
    """Build, analyse, generate and validate (as the CLI does, untimed), then patch. With
    `values`, the recording keeps every usable cluster's input values too."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, spec = build(tiny)
    hf = copy.deepcopy(model).to("cuda").eval()  # as analyze() runs it: dropout off
    started = time.perf_counter()
    analysis = analyze(model, spec, device="cuda")
    kernels = build_kernels(analysis)
    report = validate(analysis, kernels=kernels, workdir=workdir, timing=False)
    usable = [r.cluster for r in report.results if r.usable]
    print(f"{label}: {len(analysis.clusters)} clusters, {len(usable)} usable, "
          f"{len(kernels.distinct)} distinct kernels; model numerics "
          f"{'pass' if report.model.passed else 'FAIL: ' + report.model.detail} "
          f"({time.perf_counter() - started:.0f} s)", flush=True)
    rec = recording(analysis, [], keep_rows=False, device="cuda", seed=0,
                    clusters=usable if values else ())
    loaded = usable_launchers(kernels, usable, workdir)
    applied = patch(rec.gm, {i: (rec.clusters[i], loaded[i]) for i in usable})
    return Prepared(hf, analysis, kernels, report, usable, rec, loaded, applied)


def handed_back(p: Prepared, inputs: list[torch.Tensor]) -> dict[str, torch.fx.GraphModule]:
    """An experiment before a product rule: the applied graph for torch.compile with some
    clusters left to Inductor (their original ops kept), by what Inductor does with the same
    model (``inductor.capture`` on the GPU, ``match``): where one of its kernels computes the
    cluster and more ("Inductor fuses more": an embedding gather, a mask's neighbours); where
    it makes the same kernel ("same group": ours then only saves kernel time and costs the
    wrapper an operator's allocation); and both. Row name -> patched graph."""
    from fusion_core.inductor.capture import capture as inductor_capture
    from fusion_core.inductor.match import SAME, match
    from fusion_core.validate.inputs import graph_inputs

    device = inputs[0].device
    model = copy.deepcopy(p.analysis.module).to(device)
    example = graph_inputs(p.analysis.graph, p.analysis.inputs, model, device, seed=0)
    verdicts = {v.cluster: v for v in match(p.analysis, inductor_capture(model, example)).clusters}
    usable = set(p.usable)
    wider = {i for i, v in verdicts.items()
             if i in usable and v.detail.startswith("Inductor fuses more")}
    same = {i for i, v in verdicts.items() if i in usable and v.verdict == SAME}
    print(f"{p.analysis.model_name}: of the usable clusters, Inductor fuses more than "
          f"{sorted(wider)}, makes the same kernel as {sorted(same)}", flush=True)
    out: dict[str, torch.fx.GraphModule] = {}
    tried = [frozenset()]  # the product's row keeps every operator
    for what, left in (("Inductor fuses wider", wider), ("Inductor makes the same", same),
                       ("either", wider | same)):
        if frozenset(left) in tried:  # the same graph as a row already compiled
            continue
        tried.append(frozenset(left))
        kept = as_operators(p.rec, {i: p.loaded[i] for i in p.usable if i not in left})
        out[f"torch.compile of the applied graph, clusters {what} left to it "
            f"({len(kept)} of {len(p.usable)} kernels as operators)"] = patch(p.rec.gm, kept)
    return out


def measure_model(label: str, build: Callable[[bool], tuple[torch.nn.Module, InputSpec]],
                  tiny: bool, workdir: Path, rounds: int = 3,
                  handback: bool = False) -> dict[str, Any]:
    p = prepare(label, build, tiny, workdir)
    hf, rec, loaded, applied, usable = p.hf, p.rec, p.loaded, p.applied, p.usable
    inputs = rec.inputs
    hf_inputs = [t.clone() for t in inputs]
    rows: list[dict[str, Any]] = []
    fns: dict[str, Callable[[], Any]] = {}

    def add(name: str, fn: Callable[[], Any], graphable: bool = True) -> dict[str, Any]:
        rows.append(row(name, fn, graphable))
        fns[name] = fn
        return rows[-1]

    with torch.no_grad():
        add("the HF module, eager", lambda: hf(*hf_inputs))
        add("traced graph, eager", lambda: rec.gm(*inputs))
        add("traced graph, our kernels applied", lambda: applied(*inputs))
        try:
            graph = capture(lambda: applied(*inputs), [()])
            # A replay cannot be captured again: its device time is its wall time here
            add("applied, as one CUDA graph", graph.replay, graphable=False)
        except Exception as e:  # noqa: BLE001
            rows.append({"row": "applied, as one CUDA graph", "error": str(e).splitlines()[0]})
        # Compiled, each kernel is the operator `--apply`'s package makes of it: Inductor
        # traces into it and launches our kernel from its own code (no graph break).
        # Input-less kernels (`arange → add`) cannot be operators: their ops stay as traced.
        operators_in = as_operators(rec, {i: loaded[i] for i in usable})
        as_ops = patch(rec.gm, operators_in)
        # Before the reset below: Inductor's capture resets Dynamo itself.
        trials: dict[str, torch.fx.GraphModule] = {}
        if handback:  # an experiment: its failure keeps the model's other rows
            try:
                trials = handed_back(p, inputs)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
        # One reset for all: each keeps its compiled code for the later rounds (a reset
        # between them would make each round compile them again).
        torch._dynamo.reset()
        for name, gm, args in (
                ("torch.compile of the HF module", hf, hf_inputs),
                ("torch.compile of the traced graph", rec.gm, inputs),
                (f"torch.compile of the applied graph ({len(operators_in)} of "
                 f"{len(usable)} kernels as operators)", as_ops, inputs),
                *((name, gm, inputs) for name, gm in trials.items())):
            counters.clear()  # this compile's graph breaks (it compiles at its first call)
            compiled = torch.compile(gm)
            r = add(name, lambda c=compiled, a=args: c(*a))
            r["graph_breaks"] = sum(counters["graph_break"].values())
        more_rounds(rows, fns, rounds)
    return {"model": label, "clusters": len(p.report.results), "usable": len(usable),
            "model_numerics": p.report.model.passed, "rows": rows}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| model | how it runs | wall per forward | device per forward | GPU kernels "
             "| wall vs traced eager |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for res in results:
        base = next((r.get("wall_us") for r in res["rows"] if r["row"] == "traced graph, eager"),
                    None)
        for r in res["rows"]:
            if "error" in r and "wall_us" not in r:
                lines.append(f"| {res['model']} | {r['row']} | failed: {r['error']} | | | |")
                continue
            dev = f"{r['device_us'] / 1e3:.2f} ms" if "device_us" in r else "–"
            ratio = f"{base / r['wall_us']:.2f}×" if base else "–"
            breaks = f" ({r['graph_breaks']} graph breaks)" if r.get("graph_breaks") else ""
            lines.append(f"| {res['model']} | {r['row']}{breaks} | {r['wall_us'] / 1e3:.2f} ms "
                         f"| {dev} | {r.get('kernels', '–')} | {ratio} |")
    return "\n".join(lines)


def targets(res: dict[str, Any]) -> list[str]:
    """Issue 26's targets for one model's rows, each a line saying met or missed with the
    numbers it compares (a target whose rows failed is said to be not judged)."""
    rows = {r["row"]: r for r in res["rows"]}
    compiled = {name: r for name, r in rows.items() if name.startswith("torch.compile of")}

    def get(name: str, key: str) -> float | None:
        return rows.get(name, {}).get(key)

    def line(what: str, got: float | None, limit: float | None) -> str:
        if got is None or limit is None:
            return f"{what}: not judged (a row failed)"
        verdict = "met" if got <= limit else "missed"
        return f"{what}: {verdict} ({got / 1e3:.3f} ms against {limit / 1e3:.3f})"

    eager, applied = "traced graph, eager", "traced graph, our kernels applied"
    graphed = "applied, as one CUDA graph"
    kernels = (get(eager, "kernels"), get(applied, "kernels"))
    eager_wall = get(eager, "wall_us")
    proportional = (eager_wall * kernels[1] / kernels[0]
                    if eager_wall and all(kernels) else None)
    counted = f" ({kernels[1]} of {kernels[0]})" if all(kernels) else ""
    out = [line(f"eager wall in proportion to the kernels removed{counted}",
                get(applied, "wall_us"), proportional),
           line("as one CUDA graph, wall <= 1.1x the applied device time",
                get(graphed, "wall_us"),
                None if get(applied, "device_us") is None else 1.1 * get(applied, "device_us"))]
    alone = {name: r for name, r in compiled.items() if "applied" not in name}
    # the product's row first (`measure_model` adds it before the hand-back trials)
    both = [(name, r) for name, r in compiled.items() if "applied" in name]
    for name, r in alone.items():
        of = name.removeprefix("torch.compile of ")
        out.append(line(f"device time <= torch.compile of {of}'s", get(applied, "device_us"),
                        r.get("device_us")))
        for i, (mine, b) in enumerate(both):  # the first is the product's; the rest, trials
            which = "the applied graph" if i == 0 else mine.split(" (")[0].removeprefix(
                "torch.compile of ")
            out.append(line(f"torch.compile of {which}, wall <= torch.compile of {of}'s",
                            b.get("wall_us"), r.get("wall_us")))
    return [f"{res['model']}: {text}" for text in out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated labels or prefixes (gpt2 → GPT-2…)")
    parser.add_argument("--tiny", action="store_true", help="small configs (a smoke run)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--handback", action="store_true",
                        help="add rows compiling the applied graph with clusters left to "
                             "Inductor (an experiment, `handed_back`: no rule followed from it "
                             "on an H100, RESULTS.md 2026-12-07)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds of wall time, each row its lowest (default 3)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("end_to_end.py times CUDA graphs and device time: it needs a CUDA GPU")
    wanted = [w.strip().lower() for w in args.models.split(",")]
    def plain(text: str) -> str:  # "GPT-2 12L" and "gpt2" name the same model
        return "".join(ch for ch in text.lower() if ch.isalnum())

    chosen = {k: v for k, v in MODELS.items() if any(plain(w) in plain(k) for w in wanted)}
    if not chosen:
        sys.exit(f"--models {args.models}: none of {', '.join(MODELS)}")
    import triton

    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "python": sys.version.split()[0],
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(env, flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="fusion-e2e-") as work:
        for label, build in chosen.items():
            try:
                results.append(measure_model(label, build, args.tiny, Path(work),
                                             args.rounds, args.handback))
            except Exception:  # noqa: BLE001 - the next model still runs
                traceback.print_exc()
                continue
            print(table(results), flush=True)
            print("", *targets(results[-1]), sep="\n", flush=True)
            if args.out:  # after each model: a run cut off by a timeout keeps the ones done
                args.out.write_text(json.dumps({"environment": env, "results": results},
                                               indent=1))


if __name__ == "__main__":
    main()
