"""Shared harness for the codegen tests: analyze a tiny model, emit, load, run, compare.

Every kernel runs on fresh random inputs (never zeros) into outputs that the
harness poisons first (NaN for floats), so an element the kernel fails to write
shows as a mismatch; NaN never passes the comparison.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from fusion_core.codegen import Kernel, generate, load_kernel, write_kernels
from fusion_core.codegen.reference import (
    capture_values,
    cluster_inputs,
    eager_cluster,
    expanded_base,
)
from fusion_core.ir.subgraph import eager_subgraph
from fusion_core.pipeline import Analysis, analyze
from fusion_core.validate.float64 import graph_in_float64

# Kernels run on the GPU when there is one, else on CPU tensors under the interpreter
# (tests/conftest.py sets TRITON_INTERPRET); the eager reference always runs on CPU.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = {torch.float32: (2e-5, 1e-5), torch.float16: (2e-2, 1e-2),
             torch.bfloat16: (6e-2, 3e-2), torch.float64: (1e-6, 1e-6)}


class _Lambda(nn.Module):
    """A module whose forward is a function of (module, *inputs); params become attributes."""

    def __init__(self, fn, **params: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        for name, value in params.items():
            if value.is_floating_point():
                self.register_parameter(name, nn.Parameter(value, requires_grad=False))
            else:
                self.register_buffer(name, value)


# Fixed arities trace with FX (fast); *args forwards need torch.export.
class _Lambda1(_Lambda):
    def forward(self, a):
        return self.fn(self, a)


class _Lambda2(_Lambda):
    def forward(self, a, b):
        return self.fn(self, a, b)


class _Lambda3(_Lambda):
    def forward(self, a, b, c):
        return self.fn(self, a, b, c)


class ConvBnRelu(nn.Module):
    """Conv2d(3 -> 6, 3x3) → BatchNorm2d (eval statistics other than the identity's) → ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(6)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def Lambda(fn, arity: int | None = None, **params: torch.Tensor) -> nn.Module:  # noqa: N802
    if arity is None:
        arity = fn.__code__.co_argcount - 1
    return {1: _Lambda1, 2: _Lambda2, 3: _Lambda3}[arity](fn, **params)


@dataclass
class Checked:
    analysis: Analysis
    kernels: list[Kernel]
    max_err: float


def poison(module, outputs: tuple[torch.Tensor, ...]) -> None:
    for t in outputs:
        t.fill_(float("nan") if t.is_floating_point() else -7 if t.dtype != torch.bool else 1)


def compare(got: torch.Tensor, want: torch.Tensor, label: str,
            exact: torch.Tensor | None = None) -> float:
    """The largest difference, checked against `TOLERANCE`. `exact` (the same ops in float64),
    when given, settles a difference past it: the kernel passes if it is no further from the
    exact value than eager is (a norm over values whose mean dwarfs their spread cancels
    digits in any fp32 order of summation)."""
    assert got.shape == want.shape, f"{label}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype} != {want.dtype}"
    if not got.is_floating_point():
        assert torch.equal(got, want), f"{label}: {(got != want).sum()} elements differ"
        return 0.0
    g, w = got.double(), want.double()
    assert not torch.isnan(g[~torch.isnan(w)]).any(), f"{label}: NaN where eager has none"
    assert torch.equal(torch.isnan(g), torch.isnan(w)), f"{label}: NaN pattern differs"
    rtol, atol = TOLERANCE[want.dtype]
    inf = torch.isinf(w)
    assert torch.equal(g[inf], w[inf]), f"{label}: inf mismatch"
    finite = torch.isfinite(w)
    err = (g[finite] - w[finite]).abs()
    bound = atol + rtol * w[finite].abs()
    worst = float(err.max()) if err.numel() else 0.0
    if exact is not None and not bool((err <= bound).all()):
        x = exact.double()[finite]
        ours, eager = float((g[finite] - x).abs().max()), float((w[finite] - x).abs().max())
        assert ours <= 2 * eager + atol, (f"{label}: max abs err {worst:.3g} beyond tolerance; "
                                          f"{ours:.3g} from float64 where eager is {eager:.3g}")
        return worst
    assert bool((err <= bound).all()), f"{label}: max abs err {worst:.3g} beyond tolerance"
    return worst


def float64_cluster(analysis: Analysis, cluster, inputs: tuple[torch.Tensor, ...]
                    ) -> tuple[torch.Tensor, ...]:
    """The cluster's ops in float64 on the same inputs (floating ones widened)."""
    module = graph_in_float64(eager_subgraph(analysis.graph_module, cluster).module)
    wide = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
            for t in inputs]
    with torch.no_grad():
        out = module(*wide)
    return out if isinstance(out, tuple) else (out,)


def run_kernel(kernel: Kernel, tmp_path: Path, inputs: tuple[torch.Tensor, ...],
               check_poison: bool = True) -> tuple[torch.Tensor, ...]:
    (path,) = write_kernels([kernel], tmp_path)
    module = load_kernel(path)
    launch = getattr(module, kernel.name)
    if check_poison:
        poison_empty(module)
    # A kernel without inputs (every value generated, `arange`) takes the device instead.
    out = launch(*([to_device(t) for t in inputs] or [torch.device(DEVICE)]))
    return tuple(t.cpu() for t in (out if isinstance(out, tuple) else (out,)))


def poison_empty(module) -> None:
    """Poison what a loaded kernel module's torch.empty and torch.empty_strided hand out
    (outputs, workspaces): an element the kernels never write then reads as NaN."""

    def poisoned(real):
        def allocate(*args, **kwargs):
            t = real(*args, **kwargs)
            poison(module, (t,))
            return t

        return allocate

    torch_ = module.torch
    module.torch = _TorchWithEmpty(torch_, poisoned(torch_.empty), poisoned(torch_.empty_strided))


def doc_code_after(doc: str, marker: str) -> str:
    """The first ```python block of `doc` (a path from the repository root) after `marker`;
    the marker's spaces match any run of whitespace, so rewrapping the prose keeps it found."""
    import re

    text = (Path(__file__).resolve().parents[1] / doc).read_text()
    found = re.search(r"\s+".join(map(re.escape, marker.split())), text)
    assert found, f"{doc} no longer says {marker!r}"
    after = text[found.end():]
    return after[after.index("```python\n") + len("```python\n"):after.index("```\n\n")]


def load_tool(name: str):
    """`tools/<name>.py` imported as a module."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def to_device(t: torch.Tensor) -> torch.Tensor:
    """`t` on DEVICE with the same strides (a sliced buffer stays strided, an expanded one
    expanded: its stride-0 dims are copied once and expanded again). A Python number (a
    kernel scalar, ``ir/run_scalars.py``) passes as it is."""
    if not isinstance(t, torch.Tensor) or t.device.type == DEVICE:
        return t
    src = expanded_base(t)
    out = torch.empty_strided(src.shape, t.stride(), dtype=t.dtype, device=DEVICE)
    return out.copy_(src).expand(t.shape)


def on_device(launch):
    """`launch` called with its tensors on DEVICE (the interpreter runs CPU tensors, a GPU's
    kernels need its memory) and its results back on the CPU, to compare with eager there."""
    def run(*args):
        out = launch(*(to_device(a) for a in args))
        return tuple(o.cpu() for o in out) if isinstance(out, tuple) else out.cpu()
    return run


class _TorchWithEmpty:
    """`torch` as seen by one loaded kernel module, with poisoning allocators."""

    def __init__(self, torch_module, empty, empty_strided) -> None:
        self._torch, self.empty, self.empty_strided = torch_module, empty, empty_strided

    def __getattr__(self, name):
        return getattr(self._torch, name)


def check_model(model: nn.Module, inputs: tuple[torch.Tensor, ...], tmp_path: Path,
                n_clusters: int | None = None, seed: int = 0, require: bool = True,
                capture: str = "auto", **gen_kwargs) -> Checked:
    """Every cluster of `model` against its eager subgraph; returns the worst error.
    `require=False` lets a model have no cluster (a random program may fuse nothing)."""
    analysis = analyze(model, *inputs, capture=capture)
    if n_clusters is not None:
        assert len(analysis.clusters) == n_clusters, [c.chain for c in analysis.clusters]
    assert analysis.clusters or not require, "no cluster found"
    values = capture_values(analysis, *inputs)
    gen = torch.Generator().manual_seed(seed)
    kernels, worst = [], 0.0
    for cluster in analysis.clusters:
        kernel = generate(analysis, cluster, **gen_kwargs)
        kernels.append(kernel)
        args = cluster_inputs(analysis, cluster, values, gen)
        want = eager_cluster(analysis, cluster)(*args)
        got = run_kernel(kernel, tmp_path / f"c{cluster.index}", args)
        assert len(got) == len(want) == len(cluster.outputs)
        exact = float64_cluster(analysis, cluster, args)
        for name, g, w, x in zip(cluster.outputs, got, want, exact, strict=True):
            label = f"cluster {cluster.index} ({cluster.chain}) {name}"
            worst = max(worst, compare(g, w, label, exact=x))
    return Checked(analysis, kernels, worst)


_TL_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
             torch.float64: "fp64", torch.int64: "i64", torch.int32: "i32", torch.int16: "i16",
             torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1"}


def catch_launch(kernel: Kernel, tmp_path: Path, inputs: tuple[torch.Tensor, ...],
                 suffix: str = "kernel") -> dict:
    """Run the launcher on CPU tensors without running the kernel (the jit function named
    `<kernel>_<suffix>`): the launch's file, jit argument names, grid, positional args and
    keyword args."""
    (path,) = write_kernels([kernel], tmp_path)
    module = load_kernel(path)
    jit = getattr(module, f"{kernel.name}_{suffix}")
    names = list(getattr(jit, "arg_names", None) or jit.fn.__code__.co_varnames[
        :jit.fn.__code__.co_argcount])
    caught: dict = {"path": str(path), "names": names}

    class Caught(Exception):
        pass

    class Catch:  # every jit function of the file: none runs (CPU tensors on a GPU machine)
        def __init__(self, wanted: bool):
            self.wanted = wanted

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                if self.wanted:
                    caught.update(grid=grid, args=args, kwargs=kwargs)
                    raise Caught
            return launch

    for kind in ("kernel", "partials", "finish", "joined"):
        if hasattr(module, f"{kernel.name}_{kind}"):
            setattr(module, f"{kernel.name}_{kind}", Catch(kind == suffix))
    if suffix == "joined":  # the heuristic splits in two kernels: its pick, in one launch
        picked = module.HEURISTIC
        module.HEURISTIC = lambda bucket: (*picked(bucket)[:4], 1)
        module.WAIT_POLLS = 1 << 20  # the GPU's: the wait's loop compiled as it runs there
    with contextlib.suppress(Caught):
        getattr(module, kernel.name)(*inputs)
    return caught


def launch_signature(kernel: Kernel, tmp_path: Path, inputs: tuple[torch.Tensor, ...],
                     suffix: str = "kernel") -> tuple[str, dict, dict]:
    """Run the launcher on CPU tensors, catch its kernel launch: (file, signature, constexprs)."""
    caught = catch_launch(kernel, tmp_path, inputs, suffix)
    return (caught["path"], *_signature(caught))


def _signature(caught: dict) -> tuple[dict, dict]:
    """A caught launch's Triton signature and constexprs."""
    names = caught["names"]
    sig, consts = {}, {}
    for name, value in zip(names, caught["args"], strict=False):
        if isinstance(value, torch.Tensor):
            sig[name] = "*" + _TL_NAMES[value.dtype]
        elif isinstance(value, float):  # as Triton's launcher types a Python float
            sig[name] = "fp32"
        else:
            sig[name] = "i64" if abs(value) >= 2**31 else "i32"
    for name, value in caught["kwargs"].items():
        if name in names:
            sig[name], consts[name] = "constexpr", value
    return sig, consts


class CompileServer:
    """tests/compile_server.py, started once for this process and kept: each request is a
    line to it and a line back (a failed compile is an answer, not the server's end)."""

    TIMEOUT = 600  # seconds a request may take, as the per-call processes before it had

    def __init__(self) -> None:
        import os
        import subprocess
        import sys
        import tempfile

        # "0", not unset: fusion_core sets the interpreter on import when it finds no CUDA.
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        self.stderr = tempfile.TemporaryFile(mode="w+")
        script = Path(__file__).resolve().parent / "compile_server.py"
        self.proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env=env, cwd=script.parent.parent)

    def _stderr_since(self, offset: int) -> str:
        self.stderr.seek(offset)
        return self.stderr.read()[-3000:]

    def ask(self, *request) -> list:
        """The server's answer to `request`: AssertionError with the traceback and what the
        compile wrote to stderr when the request failed; RuntimeError when the server is gone
        or took past TIMEOUT (it is then stopped, and the next `compile_server()` starts one)."""
        import json
        import os
        import select

        offset = os.fstat(self.stderr.fileno()).st_size
        line = ""
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], self.TIMEOUT)
            line = self.proc.stdout.readline() if ready else ""
        except BrokenPipeError:
            pass  # gone: said below
        if not line:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("the compile server exited or took past "
                               f"{self.TIMEOUT} s: {self._stderr_since(0)}")
        answer = json.loads(line)
        assert "error" not in answer, (answer["error"][-3000:] + "stderr:\n"
                                       + self._stderr_since(offset))
        return answer["ok"]

    def close(self) -> None:
        import contextlib
        import subprocess

        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_SERVER: list[CompileServer] = []


def compile_server() -> CompileServer:
    """This process's CompileServer, started on first use (and again if it died)."""
    import atexit

    if _SERVER and _SERVER[0].proc.poll() is None:
        return _SERVER[0]
    if not _SERVER:
        atexit.register(lambda: _SERVER and _SERVER[0].close())
    _SERVER[:] = [CompileServer()]
    return _SERVER[0]


def _compiled(payload: list[tuple], arch: int, mode: str) -> list:
    """tests/compile_server.py's front-end answer for each (file, jit function, signature,
    constexprs), from the process that compiles without TRITON_INTERPRET."""
    return compile_server().ask("front", arch, mode, payload)


def compile_for_gpu(jobs: list[tuple], arch: int = 90) -> dict[str, bool]:
    """Compile kernels for an sm_`arch` GPU without one: Triton's front end to verified IR
    (the whole pipeline to cubin with FUSION_FULL_COMPILE=1). A job is (kernel, directory,
    inputs), or with a fourth item the jit function's suffix ("partials": a split row's).

    The interpreter accepts code the compiler rejects (types, loop-carried values).
    """
    import os

    payload = []
    for kernel, tmp, inputs, *jit in jobs:
        path, sig, consts = launch_signature(kernel, tmp, inputs, *jit)
        payload.append((path, f"{kernel.name}_{(jit or ['kernel'])[0]}", sig, consts))
    mode = "full" if os.environ.get("FUSION_FULL_COMPILE") == "1" else "verify"
    return {job[0]: ok for job, ok in zip(payload, _compiled(payload, arch, mode), strict=True)}


def ttir_for_gpu(kernel: Kernel, tmp_path: Path, inputs: tuple[torch.Tensor, ...],
                 consts: dict[str, int] | None = None, types: dict[str, str] | None = None
                 ) -> tuple[str, list[str]]:
    """The kernel's Triton IR for an sm_90 GPU after Triton's own simplifications (the
    ``ttir`` stage: constants folded, masks known true dropped), without one, and the jit
    function's parameter names; `consts` overrides the launch's constexprs, `types` the
    signature's types (`{"scalar0": "fp64"}`: as torch.compile's launch types a float)."""
    caught = catch_launch(kernel, tmp_path, inputs)
    sig, found = _signature(caught)
    payload = [(caught["path"], f"{kernel.name}_kernel", {**sig, **(types or {})},
                {**found, **(consts or {})})]
    (ttir,) = _compiled(payload, 90, "ttir")
    return ttir, list(caught["names"])


def ttgir_load_layouts(shape: str, case: str) -> dict:
    """tests/ttgir_layouts.py in its own process (Triton imported without the interpreter):
    each load's layout when the kernel of CASES[case] at `shape` is compiled for sm_90;
    skips where this Triton cannot compile for sm_90."""
    (found,) = ttgir_load_layouts_of([(shape, case)])
    return found


def ttgir_load_layouts_of(requests: list[tuple[str, str]]) -> list[dict]:
    """`ttgir_load_layouts` of each (shape, case), all in one process."""
    import json
    import os
    import subprocess
    import sys

    import pytest

    script = Path(__file__).resolve().parent / "ttgir_layouts.py"
    done = subprocess.run([sys.executable, str(script), *(v for r in requests for v in r)],
                          capture_output=True, text=True, timeout=300 * len(requests),
                          cwd=script.parent.parent,
                          env={**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"})
    if done.returncode == 3:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-2000:]
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(found) == len(requests), done.stdout[-2000:]
    return found


def compiled_ir(jobs: list[tuple]) -> list[dict]:
    """Each job (kernel, directory, inputs, jit suffix, constexprs to override, warps)
    compiled for sm_90 without a GPU, in a subprocess without the interpreter: its TTGIR and
    shared memory bytes. Pointers and integers divisible by 16 are marked so, as Triton's
    launcher specializes them. Skips where this Triton cannot compile for sm_90."""
    import pytest

    payload = []
    for kernel, tmp, inputs, suffix, overrides, warps in jobs:
        caught = catch_launch(kernel, tmp, inputs, suffix)
        sig, consts = _signature(caught)
        aligned = [i for i, value in enumerate(caught["args"])
                   if isinstance(value, torch.Tensor) or value % 16 == 0]
        payload.append((caught["path"], f"{kernel.name}_{suffix}", sig,
                        {**consts, **overrides}, aligned, warps))
    try:
        return compile_server().ask("ir", payload)
    except AssertionError as failed:
        if "ImportError" in str(failed) or "No module named" in str(failed):
            pytest.skip(f"cannot compile for sm_90: {str(failed).strip().splitlines()[-1]}")
        raise
