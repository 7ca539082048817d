"""The model zoo: common torchvision, timm and transformers models, analyzed end to end.

    python benchmarks/model_zoo.py [--out FILE] [--only NAME ...] [--no-inductor]
                                   [--no-validate] [--model-timeout S] [--budget S] [--list]

Builds each model from a small config (random weights, nothing downloaded), analyzes it
(`--capture auto`), compiles it with torch.compile and matches Inductor's fused kernels
(`--vs-inductor`), validates every cluster's kernel and the patched model (under the
Triton interpreter without CUDA, natively with it; numerics only, as `--no-timing`: the
table has no timings), and writes one Markdown table: model, frontend, nodes, clusters,
Inductor kernels, exact/partial/missed with the reasons for the misses, kernels verified,
applied, model numerics, analysis seconds, wall seconds for the whole model. Each model's
phases (analysis, Inductor comparison, validation, source edits) and their wall seconds go
to stderr, one line per model.

"applied" is "N of M": M clusters whose kernel was verified, N of them in the edit plan
`fusion-advisor --apply` would write (`sourcemap.apply_plan.plan_apply`, given what the CLI gives
it: the source map, the generated kernels, the validation verdicts) with the file that
defines the model's class as the model file. Nothing is written. A cluster whose lines lie
in an installed library (site-packages: every torchvision, timm and transformers model here)
maps only as a pointer, which the plan skips as the CLI does, so such a model reads "0 of M";
"(K if yours)" follows when the same plan with only that library-file check lifted would
edit K of them (what a user who owns such a file gets); the log counts that plan's reasons
for each verified cluster it skips. Without validation
the column is "-". A model whose library is not importable is listed as skipped; a model that fails
gets its error in the table; a model past --model-timeout gets "not finished (over N s)" in
the column of the phase it was in, and the next model runs; models not started within
--budget seconds get "not run" rows.

On the GPU machine: `python benchmarks/model_zoo.py --out $OUT/zoo.md`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated

from time_limit import OverTime, time_guard  # noqa: E402
from vision_libs import import_timm, import_torchvision  # noqa: E402

from fusion_core.ir.shapes import InputSpec  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402

_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # where Inductor compiles
IMAGE = (InputSpec((1, 3, 32, 32)),)
TOKENS = (InputSpec((1, 16), torch.int64),)
SMALL_LM = dict(vocab_size=128, max_position_embeddings=64, use_cache=False)


@dataclass(frozen=True)
class ZooModel:
    name: str
    library: str  # "torchvision", "timm" or "transformers"
    build: Callable[[Any], torch.nn.Module]  # gets the imported library
    inputs: tuple[InputSpec, ...] = IMAGE


def _tv(fn: str, **kw) -> Callable[[Any], torch.nn.Module]:
    return lambda tv: getattr(tv.models, fn)(weights=None, num_classes=10, **kw)


def _timm(name: str, **kw) -> Callable[[Any], torch.nn.Module]:
    return lambda timm: timm.create_model(name, pretrained=False, num_classes=10, **kw)


def _hf(model: str, config: str, **kw) -> Callable[[Any], torch.nn.Module]:
    return lambda T: getattr(T, model)(getattr(T, config)(**kw))


def _vit(tv: Any) -> torch.nn.Module:
    return tv.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                       hidden_dim=32, mlp_dim=64, num_classes=10)


def _swin(tv: Any) -> torch.nn.Module:
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                           window_size=[4, 4], stochastic_depth_prob=0.1, num_classes=10)


DECODER = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
               num_attention_heads=4, num_key_value_heads=2, **SMALL_LM)
ENCODER = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
               num_attention_heads=4, vocab_size=128, max_position_embeddings=64)

ZOO = (
    ZooModel("resnet18", "torchvision", _tv("resnet18")),
    ZooModel("mobilenet_v3_small", "torchvision", _tv("mobilenet_v3_small")),
    ZooModel("efficientnet_b0", "torchvision", _tv("efficientnet_b0")),
    ZooModel("convnext_tiny", "torchvision",
             lambda tv: tv.models.convnext.ConvNeXt(
                 [tv.models.convnext.CNBlockConfig(16, 32, 1),
                  tv.models.convnext.CNBlockConfig(32, None, 1)],
                 stochastic_depth_prob=0.1, num_classes=10)),
    ZooModel("vit (small config)", "torchvision", _vit),
    ZooModel("swin (small config)", "torchvision", _swin),
    ZooModel("shufflenet_v2_x0_5", "torchvision", _tv("shufflenet_v2_x0_5")),
    ZooModel("resnet18", "timm", _timm("resnet18")),
    ZooModel("efficientnet_b0", "timm", _timm("efficientnet_b0")),
    ZooModel("mobilenetv3_small_100", "timm", _timm("mobilenetv3_small_100")),
    ZooModel("convnext_atto", "timm", _timm("convnext_atto")),
    ZooModel("vit_tiny_patch16", "timm",
             _timm("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2)),
    ZooModel("levit_128s", "timm", _timm("levit_128s", img_size=64), (InputSpec((1, 3, 64, 64)),)),
    ZooModel("gpt2", "transformers", _hf("GPT2Model", "GPT2Config", n_layer=2, n_embd=64,
                                        n_head=4, vocab_size=128, n_positions=64,
                                        use_cache=False), TOKENS),
    ZooModel("llama", "transformers", _hf("LlamaModel", "LlamaConfig", **DECODER), TOKENS),
    ZooModel("mistral", "transformers", _hf("MistralModel", "MistralConfig", **DECODER), TOKENS),
    ZooModel("qwen2", "transformers", _hf("Qwen2Model", "Qwen2Config", **DECODER), TOKENS),
    ZooModel("gemma3 (text)", "transformers",
             _hf("Gemma3TextModel", "Gemma3TextConfig", head_dim=16, **DECODER), TOKENS),
    ZooModel("phi3", "transformers", _hf("Phi3Model", "Phi3Config", pad_token_id=0, **DECODER),
             TOKENS),
    ZooModel("bert", "transformers", _hf("BertModel", "BertConfig", **ENCODER), TOKENS),
    ZooModel("roberta", "transformers",
             _hf("RobertaModel", "RobertaConfig", pad_token_id=1, **ENCODER), TOKENS),
    ZooModel("distilbert", "transformers",
             _hf("DistilBertModel", "DistilBertConfig", n_layers=2, dim=64, hidden_dim=128,
                 n_heads=4, vocab_size=128, max_position_embeddings=64), TOKENS),
)

COLUMNS = ("model", "library", "frontend", "nodes", "clusters", "Inductor kernels", "exact",
           "partial", "missed (reasons)", "kernels verified", "applied", "model numerics",
           "analysis s", "wall s")
# The column that says a phase did not finish.
PHASE_COLUMNS = {"build": "frontend", "analysis": "frontend", "Inductor": "Inductor kernels",
                 "validation": "kernels verified", "source edits": "applied"}
MODEL_TIMEOUT_S = 150.0  # --model-timeout default: the H200 finished most models in < 60 s


def _library(name: str) -> Any:
    if name == "torchvision":
        return import_torchvision()
    if name == "timm":
        return import_timm()
    try:
        import transformers
    except ImportError:
        return None
    return transformers


def _reasons(agreement: Any) -> str:
    """`3 (2 epilogue, 1 aliasing)`: misses counted by the head of their reason."""
    missed = [k.reason for k in agreement.kernels if k.status == "missed"]
    if not missed:
        return "0"
    heads = collections.Counter(_reason_head(r) for r in missed)
    return f"{len(missed)} ({', '.join(f'{n} {h}' for h, n in heads.most_common())})"


def _reason_head(reason: str) -> str:
    if reason.startswith("Inductor fuses across"):
        return "GEMM/conv epilogue"
    if reason.startswith("Inductor fuses the ops that feed"):
        return "GEMM/attention prologue"
    if reason.startswith("split by our "):
        return reason.removeprefix("split by our ").split(" check")[0] + " check"
    if reason.startswith("capture"):
        return "capture"
    if "horizontal" in reason:
        return "horizontal"
    return reason.split(":")[0][:40] or "no reason"


class Phases:
    """Wall seconds per phase of one model, and the phase running now."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.current = ""

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.current, start = name, time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = time.perf_counter() - start

    def line(self) -> str:
        """`build 0.1 s, analysis 1.2 s, Inductor 31.0 s, validation 11.4 s`."""
        return ", ".join(f"{name} {s:.1f} s" for name, s in self.seconds.items())


def run_one(entry: ZooModel, inductor: bool, check: bool, limit: float | None = None,
            phases: Phases | None = None) -> dict[str, str]:
    """One model's row; past `limit` seconds the running phase's column says so."""
    row = {"model": entry.name, "library": entry.library}
    lib = _library(entry.library)
    if lib is None:
        return {**row, "frontend": f"skipped: {entry.library} not importable"}
    phases = phases or Phases()
    start = time.perf_counter()
    torch.manual_seed(0)
    try:
        with time_guard(limit), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _phases(entry, lib, inductor, check, row, phases)
    except OverTime:
        row[PHASE_COLUMNS.get(phases.current, "frontend")] = (
            f"not finished (over {_seconds(limit)} s)")
        torch._dynamo.reset()  # a compile cut short leaves nothing for the next model
    row["wall s"] = _seconds(time.perf_counter() - start)
    return row


def _seconds(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f}" if x >= 10 else f"{x:.2g}"


def _phases(entry: ZooModel, lib: Any, inductor: bool, check: bool, row: dict[str, str],
            phases: Phases) -> None:
    """Fill `row` phase by phase; a phase's error is its cells, not a crash."""
    try:
        with phases.phase("build"):
            model = entry.build(lib)
        with phases.phase("analysis"):
            # Analyzed for the device Inductor compiles it for below (conv biases differ).
            a = analyze(model, *entry.inputs, device=_DEVICE)
    except Exception as e:  # noqa: BLE001 - one model's failure is a row, not a crash
        row["frontend"] = f"error: {type(e).__name__}: {str(e)[:120]}"
        return
    row.update({"frontend": a.graph.frontend, "nodes": str(a.n_nodes),
                "clusters": str(len(a.clusters)),
                "analysis s": f"{phases.seconds['analysis']:.1f}"})
    if inductor:
        with phases.phase("Inductor"):
            row.update(_inductor_columns(a))
    if check:
        with phases.phase("validation"):
            kernels, report = _validation(a)
            row.update(_validation_columns(report))
        with phases.phase("source edits"):
            row["applied"] = _applied_column(a, kernels, report)


def _inductor_agreement(a: Any) -> Any:
    """torch.compile the model (on the GPU when there is one) and match its kernels."""
    import copy

    from fusion_core.inductor.capture import capture
    from fusion_core.inductor.match import match
    from fusion_core.validate.inputs import random_inputs

    model = copy.deepcopy(a.module).to(_DEVICE)
    return match(a, capture(model, random_inputs(a.inputs, model, _DEVICE, seed=0)))


def _inductor_columns(a: Any) -> dict[str, str]:
    try:
        ag = _inductor_agreement(a)
    except Exception as e:  # noqa: BLE001
        return {"Inductor kernels": f"error: {type(e).__name__}"}
    for k in ag.kernels:  # the table counts reasons; the log keeps each miss whole
        if k.status == "missed":
            print(f"  missed {k.kernel[:60]} ({', '.join(k.ops)}): {k.reason}", file=sys.stderr)
    return {"Inductor kernels": str(len(ag.kernels)), "exact": str(ag.count("exact")),
            "partial": str(ag.count("partial")), "missed (reasons)": _reasons(ag)}


def _validation(a: Any) -> tuple[Any, Any]:
    """The kernels, generated once as the CLI does, and their untimed validation report."""
    from fusion_core.validate.kernels import build_kernels
    from fusion_core.validate.run import validate

    kernels = build_kernels(a)
    # The table shows no timings: gates 1 and 2 only.
    return kernels, validate(a, kernels=kernels, timing=False)


def _validation_columns(report: Any) -> dict[str, str]:
    verified = sum(r.usable for r in report.results)
    for r in report.results:  # the log keeps each failure's reason
        if r.failed is not None:
            print(f"  cluster {r.cluster}: {r.failed.gate}: {r.failed.detail}", file=sys.stderr)
    if report.model.passed is False:
        print(f"  model numerics: {report.model.detail}", file=sys.stderr)
    model = ("pass" if report.model.passed else "-" if report.model.passed is None
             else f"FAIL ({report.model.detail[:60]})")
    return {"kernels verified": f"{verified}/{len(report.results)}", "model numerics": model}


def _applied_column(a: Any, kernels: Any, report: Any) -> str:
    """`N of M (K if yours)`: of the M verified clusters, the N `--apply` would edit, and the
    K it would edit if the model's file were the user's (module docstring)."""
    import inspect
    from unittest import mock

    from fusion_core.sourcemap import map_clusters
    from fusion_core.sourcemap.apply_plan import plan_apply

    def plan() -> Any:
        return plan_apply(a, map_clusters(a), model_file, kernels.kernels, verdicts)

    try:
        # The verdicts as the CLI hands them to --apply (cli_run.Run.apply).
        verdicts = {r.cluster: (r.usable, r.status) for r in report.results}
        model_file = inspect.getsourcefile(type(a.module)) or ""
        as_is = plan()
        # A zoo model's file is a library's, which --apply never edits: the same plan with
        # only that check lifted says what a user who owns such a file would get.
        with mock.patch("fusion_core.sourcemap.span.is_library_file", return_value=False):
            owned = plan()
    except Exception as e:  # noqa: BLE001 - the phase's failure is its cell, not a crash
        return f"error: {type(e).__name__}: {str(e)[:120]}"
    verified = {i for i, (usable, _) in verdicts.items() if usable}
    skipped = collections.Counter(s.reason for s in owned.skipped if s.cluster in verified)
    for reason, n in skipped.most_common():  # the log says why verified ones are left out
        shown = reason[:int(os.environ.get("ZOO_REASON_CHARS", "160"))]
        print(f"  not applied if yours ({n} verified): {shown}", file=sys.stderr)
    applied, if_yours = (len(verified & set(p.clusters)) for p in (as_is, owned))
    return f"{applied} of {len(verified)}" + (
        f" ({if_yours} if yours)" if if_yours != applied else "")


def table(rows: list[dict[str, str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = [row.get(c, "-").replace("|", "/") for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def header() -> str:
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (interpreter)"
    versions = [f"torch {torch.__version__}"]
    for name in ("triton", "torchvision", "timm", "transformers"):
        lib = _library(name) if name != "triton" else _import("triton")
        if lib is not None:
            versions.append(f"{name} {getattr(lib, '__version__', '?')}")
    return (f"Model zoo run by `python benchmarks/model_zoo.py` on "
            f"{datetime.date.today().isoformat()}, {device}; {', '.join(versions)}.\n\n")


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the table here (Markdown)")
    parser.add_argument("--only", nargs="*", help="model names (or libraries) to run")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile")
    parser.add_argument("--no-validate", action="store_true", help="skip kernel validation")
    parser.add_argument("--model-timeout", type=float, default=MODEL_TIMEOUT_S, metavar="S",
                        help="wall seconds per model (0: none); past it the model's row says "
                             "so and the next model runs")
    parser.add_argument("--budget", type=float, default=0, metavar="S",
                        help="models not started within S seconds get a 'not run' row "
                             "(0: no budget); each model's limit is cut to what is left")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    args = parser.parse_args(argv)
    chosen = [m for m in ZOO if not args.only or m.name in args.only or m.library in args.only]
    if args.list:
        print("\n".join(f"{m.library}: {m.name}" for m in chosen))
        return 0
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    rows, start = [], time.perf_counter()
    for entry in chosen:
        limit, left = args.model_timeout or None, None
        if args.budget:
            left = args.budget - (time.perf_counter() - start)
            limit = min(limit or left, left)
        phases = Phases()
        if left is not None and left <= 0:
            rows.append({"model": entry.name, "library": entry.library,
                         "frontend": f"not run (the {_seconds(args.budget)} s budget was "
                                     "spent)"})
        else:
            rows.append(run_one(entry, not args.no_inductor, not args.no_validate, limit,
                                phases))
        cut = [v for v in rows[-1].values() if v.startswith("not finished")]
        print(f"{entry.library}/{entry.name}: {(cut or [rows[-1].get('frontend')])[0]}; "
              f"{phases.line() or 'no phase run'}; wall {rows[-1].get('wall s', '0')} s",
              file=sys.stderr, flush=True)
        if args.out:  # after every model: an interrupted run keeps the rows it finished
            from fusion_core.fileio import write_atomic

            write_atomic(args.out, header() + table(rows))
    print(header() + table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
