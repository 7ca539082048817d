"""Cache hints on a reduction's output stores, on a GPU: the shapes panel's rows as generated,
against the same kernel whose `tl.store`s carry a streaming hint (Liger-Kernel's softmax
stores with `cache_modifier=".cs"`), one short run.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python benchmarks/store_hint_probe.py [--cases 24,25,6]

For each case: the kernel without store hints ("plain"; the generator itself hints a looped
row's last-pass stores with ``evict_first`` since this probe's first run) and with each hint
in ``HINTS`` on every output store (written by wrapping the emitter's ``store`` for this
probe only), each launched with the
configuration the generated one's first call chose, timed as the panel times (CUDA-graph
replays over input copies past the L2), and checked equal to the generated one's output.
Prints the device µs, the same-size copy's, and each hint's time over the plain one's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)
import torch  # noqa: E402

from fusion_core.codegen import emit, generate, load_kernel, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402
from gpu_clusters import as_tuple, copy_us, graph_us, rotating  # noqa: E402
from panel_cases import CASES  # noqa: E402
from shapes_panel import build, case_numbers, fused_cluster  # noqa: E402

HINTS = {"cs": ', cache_modifier=".cs"', "evict_first": ', eviction_policy="evict_first"'}
DEFAULT_CASES = "24,25,1,6,29,41,22"


OWN_HINT = ', eviction_policy="evict_first"'  # what a looped row's last pass writes itself


def _hinted(hint: str):
    """The emitter's `store` with `hint` (or none: "") on each `tl.store(...)` it writes, in
    place of the generator's own (a looped row's last pass writes ``OWN_HINT``)."""
    plain = emit.store

    def store(*args, **kwargs):
        line = plain(*args, **kwargs).replace(OWN_HINT, "")
        return line[:-1] + hint + ")"  # the call's closing parenthesis ends the line

    return store


def kernel_file(analysis, cluster, looped: bool, folder: Path,
                hint: str | None) -> tuple[Path, str]:
    """The cluster's kernel file written in `folder` (every store hinted with `hint`), and
    the launcher's name."""
    plain = emit.store
    emit.store = _hinted(hint or "")
    try:
        kernel = generate(analysis, cluster, None, looped=looped)
    finally:
        emit.store = plain
    return write_kernels([kernel], folder)[0], kernel.name


def probe(case, l2_bytes: int, work: Path) -> str:
    gen = torch.Generator().manual_seed(0)
    module, model_inputs = build(case, False, "cuda", gen)
    analysis = analyze(module, *model_inputs)
    cluster, why = fused_cluster(analysis)
    if cluster is None:
        return f"| {case.label} | {case.dtype} | not fused: {why} |"
    values = capture_values(analysis, *model_inputs)
    inputs = cluster_inputs(analysis, cluster, values, torch.Generator("cuda").manual_seed(1))
    sets = rotating(inputs, l2_bytes)
    path, name = kernel_file(analysis, cluster, case.looped, work / "plain", None)
    plain = getattr(load_kernel(path), name)
    want = as_tuple(plain(*inputs))  # tunes: the configuration every variant then takes
    chosen = dict(plain.__globals__["CHOSEN"])
    cells = [f"{graph_us(plain, sets):.1f}"]
    base = float(cells[0])
    for label, hint in HINTS.items():
        path, name = kernel_file(analysis, cluster, case.looped, work / label, hint)
        module_ = load_kernel(path)
        module_.CHOSEN.update(chosen)
        launch = getattr(module_, name)
        got = as_tuple(launch(*inputs))
        same = all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
        us = graph_us(launch, sets)
        cells.append(f"{us:.1f} ({us / base:.3f}){'' if same else ' DIFFERS'}")
    copy = copy_us(cluster.traffic.fused_bytes, l2_bytes)
    config = list(chosen.values())
    return (f"| {case.label} | {str(case.dtype).removeprefix('torch.')} | {copy:.1f} | "
            + " | ".join(cells) + f" | {config} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("store_hint_probe.py times kernels on a CUDA GPU")
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    print("| case | dtype | copy µs | plain µs | " + " | ".join(
        f"{h} µs (over plain)" for h in HINTS) + " | config |")
    print("|---" * (5 + len(HINTS)) + "|")
    with tempfile.TemporaryDirectory(prefix="store-hints-") as work:
        for i, number in enumerate(case_numbers(args.cases)):
            print(probe(CASES[number], l2_bytes, Path(work) / str(i)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
