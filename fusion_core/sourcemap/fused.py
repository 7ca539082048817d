"""The sibling package `--apply` writes next to the model: its files' text.

Reads the generated kernels (``codegen.Kernel``: one standalone module per
cluster) and the analyzed shapes; writes nothing itself, it returns file
names and text. The package is ``<stem>_fused/``: each kernel file verbatim,
and an ``__init__.py`` that registers every launcher as a torch custom op with
a fake (shape-only) implementation, so the rewritten model still traces with
torch.fx, propagates shapes on fake tensors and compiles with torch.compile.
The names it exports are the ones the rewritten lines call (``cluster0``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

MARKER = "fusion-advisor --apply"
# How the result's shape follows from the inputs' broadcast shape.
SHAPE_RULES = {
    "same": "lambda shape: shape",
    "drop_last": "lambda shape: shape[:-1]",
    "keep_last": "lambda shape: (*shape[:-1], 1)",
}


@dataclass(frozen=True)
class FusedOp:
    call: str  # the exported name the rewritten lines call: `cluster0`
    kernel_name: str  # the launcher (and file stem) in the kernel's source
    kernel_source: str
    n_inputs: int
    input_dtypes: tuple[torch.dtype, ...]  # what the kernel was generated for
    results: tuple[tuple[torch.dtype, str], ...]  # per result: dtype, key of SHAPE_RULES


def package_name(stem: str) -> str:
    """`example_net` → `example_net_fused`; made an identifier (`my-model` → `my_model_fused`)."""
    name = re.sub(r"\W", "_", stem)
    return f"{'_' if name[:1].isdigit() else ''}{name}_fused"


def shape_rule(inputs: Sequence[tuple[int, ...]], output: tuple[int, ...]) -> str | None:
    """Which SHAPE_RULES entry turns the inputs' broadcast shape into `output` (None: none)."""
    try:
        shape = tuple(torch.broadcast_shapes(*inputs))
    except RuntimeError:
        return None
    options = {"same": shape, "drop_last": shape[:-1], "keep_last": (*shape[:-1], 1)}
    return next((k for k, v in options.items() if shape and tuple(v) == tuple(output)), None)


def init_source(model_file: str, ops: Sequence[FusedOp]) -> str:
    digest = hashlib.sha256("".join(o.kernel_source for o in ops).encode()).hexdigest()[:8]
    imports = [f"from . import {o.kernel_name} as _{o.kernel_name}" for o in ops]
    defs = []
    for o in ops:
        params = ", ".join(f"in{i}" for i in range(o.n_inputs))
        schema = ", ".join(f"Tensor in{i}" for i in range(o.n_inputs))
        dtypes = ", ".join(str(d) for d in o.input_dtypes)
        fakes = [f"_fake(({params},), {SHAPE_RULES[rule]}, {dtype})" for dtype, rule in o.results]
        returns = "Tensor" if len(fakes) == 1 else f"({', '.join(['Tensor'] * len(fakes))})"
        fake = fakes[0] if len(fakes) == 1 else f"({', '.join(fakes)})"
        defs.append(
            f"{o.call} = _op(\n"
            f"    {o.call!r}, \"({schema}) -> {returns}\", ({dtypes},),\n"
            f"    lambda {params}: _{o.kernel_name}.{o.kernel_name}({params}),\n"
            f"    lambda {params}: {fake},\n)")
    return "\n".join([
        f'"""Fused Triton kernels for {model_file}, written by `{MARKER}`.',
        "",
        "Each launcher is a torch custom op with a shape-only fake, so the rewritten model",
        "still traces (torch.fx, torch.compile). Without CUDA the kernels run under",
        "Triton's CPU interpreter (slow; for checking only).",
        '"""',
        "",
        "import os",
        "import uuid",
        "",
        "import torch",
        "",
        "if not torch.cuda.is_available():  # must be set before the kernels are decorated",
        '    os.environ.setdefault("TRITON_INTERPRET", "1")',
        "",
        *imports,
        "",
        "# One namespace per import: re-importing this package never redefines an op.",
        f'_NAMESPACE = "fused_{digest}_" + uuid.uuid4().hex[:8]',
        '_LIB = torch.library.Library(_NAMESPACE, "FRAGMENT")',
        "",
        "",
        "def _fake(tensors, rule, dtype):",
        "    shape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))",
        "    return tensors[0].new_empty(rule(shape), dtype=dtype)",
        "",
        "",
        "def _no_backward(ctx, *grads):",
        '    raise RuntimeError("fused kernels are inference only: run under torch.no_grad() "',
        '                       "or restore the original lines (see the .bak file) to train")',
        "",
        "",
        "def _checked(name, dtypes, fn):",
        "    def run(*tensors):",
        "        got = tuple(t.dtype for t in tensors)",
        "        if got != dtypes:",
        '            raise TypeError(f"{name} was generated for inputs of dtype "',
        '                            f"{[str(d) for d in dtypes]}, got {[str(d) for d in got]}: "',
        '                            "re-run fusion-advisor with that --dtype")',
        "        return fn(*tensors)",
        "    return run",
        "",
        "",
        "def _op(name, schema, dtypes, launch, fake):",
        "    _LIB.define(name + schema)",
        '    _LIB.impl(name, _checked(name, dtypes, launch), "CompositeExplicitAutograd")',
        '    qualified = f"{_NAMESPACE}::{name}"',
        "    torch.library.register_fake(qualified, _checked(name, dtypes, fake), lib=_LIB)",
        "    torch.library.register_autograd(qualified, _no_backward, lib=_LIB)",
        "    return getattr(getattr(torch.ops, _NAMESPACE), name)",
        "",
        "",
        *"\n\n".join(defs).splitlines(),
        "",
    ])


def package_files(model_file: str, ops: Sequence[FusedOp]) -> dict[str, str]:
    """File name inside the package → text."""
    files = {f"{o.kernel_name}.py": o.kernel_source for o in ops}
    files["__init__.py"] = init_source(model_file, ops)
    return files


def import_block(stem: str, calls: Sequence[str], newline: str = "\n") -> str:
    """The lines the rewritten model file gains under its imports."""
    names = ", ".join(sorted(calls, key=lambda c: (len(c), c)))
    pkg = package_name(stem)
    return newline.join([
        f"if __package__:  # fused kernels written by {MARKER}",
        f"    from .{pkg} import {names}",
        "else:",
        f"    from {pkg} import {names}",
    ]) + newline
