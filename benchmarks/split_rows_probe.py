"""Split rows on a GPU: the shapes panel's layer_norm·2 at 256 x 65536 fp32, unsplit against
split over 2, 4 and 8 programs a row, one short run (under a minute on an H200).

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python benchmarks/split_rows_probe.py [--before] [--budget 45]

For each configuration (block, rows, warps, programs per row): the bucket's own
configurations (the heuristic's pick, then the candidates the launcher times), and the split
ones at 2 programs a row too, it prints the device time per call (CUDA-graph replays over
input copies past the L2, ``validate/devicetime.py``), the max abs error against eager, and
per compiled kernel (looped, or partials and finish) what Triton reports once the kernel is
loaded: registers a thread, spill (local memory) bytes, shared memory bytes, and the
`st.shared` instructions of its PTX. `--before` also times the split configurations with
the finish kernel as it was before its statistics became scalars (the scalar lines taken
out of the generated file): there Triton 3.6 broadcast layer_norm's mean and rstd to
[1, BLOCK_SIZE] and converted that through shared memory (2048 `st.shared.v4` a thread at a
block of 4096), which is what made 4-8 programs a row 5-37x slower than one in the panel.
Configurations left when `--budget` seconds are spent are listed as skipped.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)
import torch  # noqa: E402

from fusion_core.codegen import generate, load_kernel, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402
from fusion_core.validate.devicetime import device_time, rotating  # noqa: E402
from gpu_clusters import close  # noqa: E402
from panel_cases import CASES  # noqa: E402
from shapes_panel import build, fused_cluster  # noqa: E402

CASE = "layer_norm*2 256x65536"
# The finish kernel's scalar lines (split_rows._scalars): taken out for --before.
_SCALAR_LINES = re.compile(r"^ *(tl\.static_assert\(ROWS_PER_PROGRAM == 1.*|\w+ = tl\.sum\(\w+\)"
                           r"  # \[1, 1\] -> scalar)\n", re.M)


class _Recorder:
    """A generated module's jit function that keeps what each launch compiled, by the
    configuration being timed (`state["config"]`) and the kernel's suffix."""

    def __init__(self, jit, suffix: str, state: dict) -> None:
        self.jit, self.suffix, self.state = jit, suffix, state

    def __getattr__(self, name):  # arg_names and the rest, for the direct launch
        return getattr(self.jit, name)

    def __getitem__(self, grid):
        launch = self.jit[grid]

        def run(*args, **kwargs):
            compiled = launch(*args, **kwargs)
            self.state["compiled"].setdefault(self.state["config"], {})[self.suffix] = compiled
            return compiled
        return run


def _load(path: Path, name: str, state: dict, before: bool):
    """The kernel file loaded with its jit functions recorded and `_choose` forced to
    `state["config"]`; `before`: the finish kernel without its scalar lines."""
    if before:
        text, n = _SCALAR_LINES.subn("", path.read_text())
        assert n, "no scalar lines in the finish kernel: is this the generator before the fix?"
        path = path.with_name(path.stem + "_before.py")
        path.write_text(text)
    module = load_kernel(path)
    for suffix in ("kernel", "partials", "finish"):
        jit_name = f"{name}_{suffix}"
        if hasattr(module, jit_name):
            setattr(module, jit_name, _Recorder(getattr(module, jit_name), suffix, state))

    def choose(key, configs, run, device):
        state["bucket_configs"] = configs
        module.CHOSEN[key] = state["config"]
        return state["config"]

    module._choose = choose
    return module, getattr(module, name)


def _kernel_info(compiled) -> str:
    ptx = compiled.asm.get("ptx", "")
    regs, spills = getattr(compiled, "n_regs", "?"), getattr(compiled, "n_spills", "?")
    return (f"{regs} regs, {spills} B spilled, {compiled.metadata.shared} B shared, "
            f"{ptx.count('st.shared')} st.shared")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", action="store_true",
                   help="also time the split configurations' finish kernel as it was")
    p.add_argument("--budget", type=float, default=45.0, help="seconds; the rest is skipped")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    start = time.perf_counter()
    (case,) = [c for c in CASES if c.label == CASE and c.dtype == torch.float32]
    module, model_inputs = build(case, False, "cuda", torch.Generator().manual_seed(0))
    analysis = analyze(module, *model_inputs)
    cluster, why = fused_cluster(analysis)
    assert cluster is not None, why
    values = capture_values(analysis, *model_inputs)
    inputs = cluster_inputs(analysis, cluster, values, torch.Generator("cuda").manual_seed(1))
    (ref,) = eager_cluster(analysis, cluster)(*inputs)
    kernel = generate(analysis, cluster)
    work = Path(tempfile.mkdtemp(prefix="split_probe_"))
    (path,) = write_kernels([kernel], work)
    state: dict = {"compiled": {}, "config": None}
    forms = [("after", *_load(path, kernel.name, state, False))]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    sets = rotating(inputs, l2)

    # The bucket's configurations (a first call with any config records them), then each
    # split one at 2 programs a row. Most telling first, should the budget run out: the
    # heuristic's pick, the splits over 4 or more programs, over 2, the other looped ones.
    state["config"] = (8192, 1, 16, 1)
    forms[0][2](*inputs)
    # the two-kernel forms only (a fifth number 1, one launch, is not this probe's question)
    configs = [c for c in state["bucket_configs"] if len(c) == 4]
    configs += [(b, r, w, 2) for b, r, w, s in configs if s > 1 and (b, r, w, 2) not in configs]
    heuristic = configs[0]
    configs.sort(key=lambda c: (c != heuristic, {1: 3, 2: 2}.get(c[3], 1), c[3], -c[0]))
    if args.before:
        forms.append(("before", *_load(path, kernel.name, state, True)))
    print(f"{CASE} fp32 on {torch.cuda.get_device_name()}, {len(sets)} input copies; "
          f"bucket configurations first timed by the launcher: {state['bucket_configs']}")
    print("config (block, rows, warps, programs a row) | form | device us | max err | kernels")
    for config in configs:
        for form, fmodule, launch in forms:
            if config[3] == 1 and form == "before":
                continue  # the looped kernel is the same in both
            label = f"{config} | {form}"
            if time.perf_counter() - start > args.budget:
                print(f"{label} | skipped (budget of {args.budget:.0f} s spent)")
                continue
            state["config"] = config
            fmodule.CHOSEN.clear()
            fmodule.DIRECT_LAUNCH.clear()
            try:
                ok, err = close(launch(*inputs), ref, torch.float32)
                t = device_time(launch, sets, samples=5)
            except Exception as e:  # noqa: BLE001 - e.g. out of resources: that config's row
                print(f"{label} | failed: {type(e).__name__}: {str(e)[:120]}")
                continue
            kernels = state["compiled"].get(config, {})
            info = "; ".join(f"{s}: {_kernel_info(c)}" for s, c in kernels.items())
            print(f"{label} | {statistics.median(t.samples_us):8.1f} | {err:.1e}"
                  f"{'' if ok else ' MISMATCH'} | {info}", flush=True)
            state["compiled"].pop(config, None)
    print(f"done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
