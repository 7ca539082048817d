"""The sibling package `--apply` writes next to the model: its files' text.

Reads the generated kernels (``codegen.Kernel``: one standalone module per
cluster) and the analyzed shapes; writes nothing itself, it returns file
names and text. The package is ``<stem>_fused/``: each kernel file verbatim,
and an ``__init__.py`` holding the runtime of ``codegen/operators.py`` and one
registration per cluster: each launcher becomes a torch operator (a triton op
torch.compile traces into, or a custom op with a fake implementation), so the
rewritten model still traces with torch.fx, propagates shapes on fake tensors
and compiles with torch.compile, while plain eager calls launch directly.
The names it exports are the ones the rewritten lines call (``cluster0``).
``import_block`` is the text the model file gains; ``wrote_imports`` finds it in a
file's text again (how `--apply` knows an earlier one rewrote the file).
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..codegen import operators
from ..codegen.writer import CodeWriter
from ..source_trees import parse_source
from .pysource import physical_lines

MARKER = "fusion-advisor --apply"
# The first line of the block `import_block` writes; `wrote_imports` looks for it.
BLOCK_HEAD = f"if __package__:  # fused kernels written by {MARKER}"
LINE_WIDTH = 96  # the package's lines, as the kernel files'


@dataclass(frozen=True)
class FusedOp:
    call: str  # the exported name the rewritten lines call: `cluster0`
    kernel_name: str  # the launcher (and file stem) in the kernel's source
    kernel_source: str
    n_inputs: int
    input_dtypes: tuple[torch.dtype, ...]  # what the kernel was generated for
    # one per result; their shapes the launcher works out from the inputs' at each call
    # (plan_apply writes only clusters whose views let it: fixed.fixed_shape)
    results: tuple[torch.dtype, ...]
    # the types ("float", "int") of the Python numbers of sizes it takes after the tensors
    scalars: tuple[str, ...] = ()


def package_name(stem: str) -> str:
    """`example_net` → `example_net_fused`; made an identifier (`my-model` → `my_model_fused`)."""
    name = re.sub(r"\W", "_", stem)
    return f"{'_' if name[:1].isdigit() else ''}{name}_fused"


def init_source(model_file: str, ops: Sequence[FusedOp]) -> str:
    digest = hashlib.sha256("".join(o.kernel_source for o in ops).encode()).hexdigest()[:8]
    out = CodeWriter()
    out.lines([f'"""Fused Triton kernels for {model_file}, written by `{MARKER}`.', "",
               "Each name below launches its kernel directly when called eagerly, and is a torch",
               "operator where something traces (torch.fx, torch.compile: Inductor keeps the",
               "kernel) or records autograd (inference only). Without CUDA the kernels run under",
               "Triton's CPU interpreter (slow; for checking only).", '"""', ""])
    out.lines(f"import {name}" for name in sorted({"os", "uuid", *operators.IMPORTS}))
    out.lines(["", "import torch", "",
               "if not torch.cuda.is_available():  # must be set before the kernels are decorated",
               '    os.environ.setdefault("TRITON_INTERPRET", "1")', ""])
    out.lines(f"from . import {o.kernel_name} as _{o.kernel_name}" for o in ops)
    out.lines(["", "# One namespace per import: re-importing this package never redefines an op.",
               f'NAMESPACE = "fused_{digest}_" + uuid.uuid4().hex[:8]', "", ""])
    out.lines(operators.source().splitlines())
    out.lines(["", ""])
    for o in ops:
        dtypes = ", ".join(str(d) for d in o.input_dtypes) + ("," if o.n_inputs == 1 else "")
        args = ["NAMESPACE", repr(o.call), f"_{o.kernel_name}", repr(o.kernel_name),
                str(len(o.results)), f"({dtypes})"]
        if o.scalars:
            args.append(f"scalars={o.scalars!r}")
        one_line = f"{o.call} = _register({', '.join(args)})"
        if len(one_line) <= LINE_WIDTH:
            out.line(one_line)
            continue
        out.line(f"{o.call} = _register(")
        with out.indented():
            out.wrapped(args, LINE_WIDTH)
        out.line(")")
    return "\n".join(out.result()) + "\n"


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
        BLOCK_HEAD,
        f"    from .{pkg} import {names}",
        "else:",
        f"    from {pkg} import {names}",
    ]) + newline


def wrote_imports(text: str) -> bool:
    """Whether the text holds the block `import_block` writes: `BLOCK_HEAD` as a statement
    (not quoted in a docstring), its body importing from a relative ``<stem>_fused``
    package. Mentions of `MARKER` in the user's comments or strings are not it."""
    try:
        tree = parse_source(text)
    except SyntaxError:  # not what an --apply wrote (it parses what it writes)
        return False
    lines = physical_lines(text)  # as ast numbers them (a form feed ends no line)
    return any(
        isinstance(st, ast.If) and lines[st.lineno - 1].strip() == BLOCK_HEAD
        and isinstance(st.test, ast.Name) and st.test.id == "__package__"
        and isinstance(imp := st.body[0], ast.ImportFrom) and imp.level == 1
        and (imp.module or "").endswith("_fused")
        for st in ast.walk(tree))
