"""Regenerate the "Agreement with Inductor (CPU)" table in benchmarks/RESULTS.md.

    python benchmarks/agreement_panel.py [--out benchmarks/RESULTS.md] [--only NAME ...]

For every model of the panel that exists in examples/ (the list below, then any other
example whose docstring gives `--input-shape ...`), plus transformers' GPT-2, LLaMA and BERT
from small configs where transformers is installed, analyze it, compile it with torch.compile
on CPU, match Inductor's pointwise/reduction kernels with our clusters, and validate every
cluster's kernel under the Triton interpreter (cluster and model numerics). Writes only the
`## Agreement with Inductor (CPU)` section (creating the file if needed).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated (no CUDA here)

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fusion_core.agreement import agreement  # noqa: E402
from fusion_core.ir.shapes import InputSpec  # noqa: E402
from fusion_core.pipeline import analyze_file  # noqa: E402

HEADING = "## Agreement with Inductor (CPU)"


@dataclass(frozen=True)
class Entry:
    file: str  # relative to examples/
    shapes: tuple[str, ...]
    dtype: str = "float32"
    model_class: str | None = None


# The panel, in table order; files that do not exist yet are skipped.
PANEL = (
    Entry("example_net.py", ("64,1024",)),
    Entry("microgpt.py", ("2,128",), "int64"),
    Entry("llama_block.py", ("2,64,128",)),
    Entry("resnet_block.py", ("2,16,16,16",)),
    Entry("mixer_block.py", ("2,64,128",)),
)
TOKENS = ("2,16",)
HF_PREFIX = "transformers:"


def _hf_models() -> dict[str, object]:
    """transformers' GPT-2, LLaMA and BERT from small configs (random weights, no downloads)."""
    try:
        import transformers as T
    except ImportError:
        return {}
    small = dict(vocab_size=128, max_position_embeddings=64)
    return {
        "gpt2": lambda: T.GPT2Model(T.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, use_cache=False,
            bos_token_id=0, eos_token_id=0)),
        "llama": lambda: T.LlamaModel(T.LlamaConfig(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, use_cache=False, **small)),
        "bert": lambda: T.BertModel(T.BertConfig(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            **small)),
    }


_SHAPE = re.compile(r"--input-shape\s+([\d,]+)")
_DTYPE = re.compile(r"--dtype\s+(\w+)")


def from_docstring(path: Path) -> Entry | None:
    """An example's own arguments in its docstring: the first `...` span that gives
    `--input-shape` (every input's, for a forward of several: TwoNorms' x and residual) and
    its `--dtype`."""
    text = path.read_text(encoding="utf-8")
    doc = re.match(r'\s*(?:"""|\'\'\')(.*?)(?:"""|\'\'\')', text, re.S)
    spans = [s for s in re.findall(r"`+([^`]+)`+", doc.group(1)) if _SHAPE.search(s)] if doc else []
    if not spans:
        return None
    dtype = _DTYPE.search(spans[0])
    return Entry(path.name, tuple(_SHAPE.findall(spans[0])), dtype.group(1) if dtype else
                 "float32")


def panel(only: list[str]) -> list[Entry]:
    examples = ROOT / "examples"
    entries = {e.file: from_docstring(examples / e.file) or e for e in PANEL
               if (examples / e.file).is_file()}
    for path in sorted(examples.glob("*.py")):
        if path.name not in entries and not path.name.startswith("_"):
            found = from_docstring(path)
            if found is not None:
                entries[path.name] = found
    for name in _hf_models():  # optional rows: only where transformers is installed
        entries[HF_PREFIX + name] = Entry(HF_PREFIX + name, TOKENS, "int64")
    return [e for e in entries.values()
            if not only or Path(e.file).stem in only or e.file.removeprefix(HF_PREFIX) in only]


def _analyze(entry: Entry):
    specs = [InputSpec.parse(s, entry.dtype) for s in entry.shapes]
    if entry.file.startswith(HF_PREFIX):
        import warnings

        from fusion_core.pipeline import analyze

        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return analyze(_hf_models()[entry.file.removeprefix(HF_PREFIX)](), *specs)
    return analyze_file(ROOT / "examples" / entry.file, specs, entry.model_class)


def validation_cells(analysis) -> tuple[str, str]:
    try:
        from fusion_core.validate import validate

        report = validate(analysis)
    except Exception as e:  # noqa: BLE001 - the table says what failed instead
        return f"error: {type(e).__name__}", "-"
    verified = sum(1 for r in report.results if r.usable)
    model = {True: "pass", False: "FAIL", None: "-"}[report.model.passed]
    return f"{verified}/{len(report.results)}", model


def row(entry: Entry) -> tuple[list[str], list[str]]:
    start = time.perf_counter()
    analysis = _analyze(entry)
    a = agreement(analysis)
    verified, model_ok = validation_cells(analysis)
    seconds = time.perf_counter() - start
    not_fused = ", ".join(f"#{i}" for i in a.not_fused) or "-"
    shape = " ".join(f"{s}" for s in entry.shapes) + f" {entry.dtype}"
    cells = [f"{a.model} (`{entry.file}`)", shape, analysis.graph.frontend,
             str(len(analysis.clusters)), str(len(a.kernels)), str(a.count("exact")),
             str(a.count("partial")), str(a.count("missed")), f"{a.matched_fraction:.0%}",
             not_fused, f"{a.single_op_kernels} / {a.layout_kernels}", verified, model_ok,
             f"{seconds:.0f}"]
    notes = [f"- {a.model}: missed `{k.kernel}`: {', '.join(k.ops)} on lines "
             f"{', '.join(map(str, k.lines)) or '-'}" for k in a.kernels if k.status == "missed"]
    notes += [f"- {a.model}: our cluster {v.cluster}: {v}" for v in a.clusters
              if v.verdict != "same group"]
    return cells, notes


def section(rows: list[list[str]], notes: list[str], failures: list[str]) -> str:
    header = ["model", "input", "capture", "our clusters", "Inductor kernels", "exact",
              "partial", "missed", "matched", "ours not fused by Inductor",
              "not counted (single-op / layout)", "kernels verified (interpreter)",
              "model numerics", "seconds"]
    lines = [HEADING, "",
             f"Regenerated by `python benchmarks/agreement_panel.py` on "
             f"{datetime.date.today().isoformat()} (torch {torch.__version__}, CPU). "
             "Inductor kernels are the kernels `torch.compile` (default mode, no grad) "
             "generates that fuse two or more pointwise/reduction ops of the user's code; "
             "kernels computing a single op (a lone GELU between two matmuls) and layout-only "
             "kernels (copies, gathers) fuse nothing and are not counted. "
             "`matched` = (exact + partial) / Inductor kernels.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if notes or failures:
        lines += ["", "Differences:", ""] + notes + failures
    return "\n".join(lines) + "\n"


def write_section(path: Path, text: str) -> None:
    from fusion_core.fileio import write_atomic

    old = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmark results\n"
    start = old.find(HEADING)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        nxt = old.find("\n## ", start + len(HEADING))
        new = old[:start] + text + ("\n" + old[nxt + 1:] if nxt >= 0 else "")
    write_atomic(path, new)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    p.add_argument("--only", nargs="*", default=[], help="example file stems to run")
    args = p.parse_args()
    rows, notes, failures = [], [], []
    for entry in panel(args.only):
        print(f"{entry.file} ...", flush=True)
        try:
            cells, extra = row(entry)
        except Exception as e:  # noqa: BLE001 - one broken model must not lose the others
            failures.append(f"- `{entry.file}` failed: {type(e).__name__}: "
                            f"{(str(e).splitlines() or [''])[0]}")
            continue
        rows.append(cells)
        notes += extra
        print("  " + " | ".join(cells), flush=True)
    write_section(Path(args.out), section(rows, notes, failures))
    print(f"wrote {HEADING[3:]} to {args.out}")


if __name__ == "__main__":
    main()
