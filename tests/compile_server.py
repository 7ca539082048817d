"""Compiles generated kernels for an sm_<arch> GPU without one, for the tests, in one process
a test worker keeps (`codegen_harness.compile_server()`): Triton must be imported there
without TRITON_INTERPRET (the interpreter patches `triton.language`), and starting a Python
that imports torch and fusion_core costs 2-3 s, more than most compiles.

Reads one JSON request a line on stdin and answers it with one line on stdout: `{"ok": [...]}`,
one item a job, or `{"error": traceback}`; then waits for the next request. Only answers go
to stdout: whatever else writes to file descriptor 1 (Triton, LLVM, a kernel module) goes to
stderr, where the test process reads the lines of a failed request.

- `["front", arch, mode, jobs]`, jobs of (file, jit function, signature, constexprs):
  mode "verify" runs Triton's front end and answers whether the IR verifies, "ttir" answers
  the IR after Triton's own simplifications, "full" compiles to cubin and answers whether
  there is one.
- `["ir", jobs]`, jobs of (file, jit function, signature, constexprs, indices of arguments
  divisible by 16, warps): compiled to the end for sm_90; its TTGIR and shared memory bytes.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def _front(arch: int, mode: str, jobs: list) -> list:
    import triton
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget, Language
    from triton.compiler.compiler import make_backend

    from fusion_core.codegen import load_kernel

    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    options = backend.parse_options({})
    stages: dict = {}
    backend.add_stages(stages, options, Language.TRITON)
    answers = []
    for path, name, sig, consts in jobs:
        fn = getattr(load_kernel(path), name)
        src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts)
        if mode == "full":
            answers.append(bool(triton.compile(src, target=target).asm.get("cubin")))
            continue
        # Front end (Python AST -> Triton IR): where type and scoping errors show.
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        module = src.make_ir(target, options, backend.get_codegen_implementation(options),
                             backend.get_module_map(), context)
        answers.append(module.verify() if mode == "verify" else str(stages["ttir"](module, {})))
    return answers


def _ir(jobs: list) -> list:
    import triton
    from triton.backends.compiler import GPUTarget

    from fusion_core.codegen import load_kernel

    answers = []
    for path, name, sig, consts, aligned, warps in jobs:
        src = triton.compiler.ASTSource(
            fn=getattr(load_kernel(path), name), signature=sig, constexprs=consts,
            attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
        done = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps})
        answers.append({"ttgir": done.asm["ttgir"], "shared": done.metadata.shared})
    return answers


HANDLERS = {"front": _front, "ir": _ir}


def main() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.exit("compile_server.py needs TRITON_INTERPRET=0")
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else written to stdout, Python's or C's, lands in stderr
    for line in sys.stdin:
        kind, *args = json.loads(line)
        try:
            answer = {"ok": HANDLERS[kind](*args)}
        except Exception:  # the test that asked reads it; the next request still runs
            answer = {"error": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fusion_core, uninstalled
    main()
