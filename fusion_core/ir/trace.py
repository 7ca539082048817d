"""Selective FX tracing: trace *through* fusion-relevant modules, keep the rest opaque.

Reads an ``nn.Module``; writes a ``torch.fx.GraphModule`` whose nodes carry
``meta["stack_trace"]`` (for source mapping). Activations, dropout, norms and
softmax modules are inlined into the ``F.*`` calls their ``forward`` makes;
Linear, Conv, Embedding, attention and unknown library modules stay single
``call_module`` nodes (fusion barriers).
"""

from __future__ import annotations

import bisect
import functools
import linecache
import os
import re
import site
import sys
import sysconfig
import traceback
import types
from pathlib import Path

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from ..errors import CaptureError, Fix
from .module_state import kept_as_it_was

TRACE_THROUGH: tuple[type[nn.Module], ...] = tuple(
    getattr(nn, name) for name in (
        "ReLU", "ReLU6", "GELU", "SiLU", "Sigmoid", "Tanh", "LeakyReLU", "ELU", "Hardtanh",
        "Hardsigmoid", "Hardswish", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
        "LayerNorm", "RMSNorm", "GroupNorm", "Softmax", "LogSoftmax", "Identity",
        "AdaptiveAvgPool2d", "Upsample", "UpsamplingNearest2d",
    ) if hasattr(nn, name)
)

# With a trailing separator: `…/site-packages/torch` is a prefix of `…/torchvision/`.
_TORCH_DIR = os.path.join(str(Path(torch.__file__).parent), "")
_OUR_DIR = os.path.join(str(Path(__file__).resolve().parents[1]), "")


def _library_roots() -> tuple[str, ...]:
    """Folders installed packages live in (site-packages, the standard library)."""
    roots = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib")}
    roots |= set(getattr(site, "getsitepackages", list)())
    roots.add(site.getusersitepackages() or "")
    return tuple(sorted(os.path.join(r, "") for r in roots if r))


LIBRARY_ROOTS = _library_roots()


class FusionTracer(fx.Tracer):
    def __init__(self) -> None:
        super().__init__()
        # FX's own recorder (a symbolized full-stack capture per node) costs about half
        # of tracing; create_node records the same text from the live frames instead.
        self.record_stack_traces = False
        # Buffers (e.g. a causal mask) become get_attr nodes, so slicing them by a
        # traced length works and they show up as cluster inputs.
        self.proxy_buffer_attributes = True

    # Autocast as the trace began: a forward that enters `torch.autocast` changes it.
    _autocast: tuple[bool, ...] = ()

    def create_node(self, *args, **kwargs) -> fx.Node:
        node = super().create_node(*args, **kwargs)
        if not node.stack_trace:
            node.stack_trace = forward_stack(sys._getframe(1))
        if self._autocast and autocast_state() != self._autocast:
            raise AutocastDropped(AUTOCAST_DROPPED)
        return node

    def trace(self, root, concrete_args=None) -> fx.Graph:
        self._autocast = autocast_state()
        return super().trace(root, concrete_args)

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if isinstance(m, TRACE_THROUGH) or m is self._replaced_forward:
            return False
        return super().is_leaf_module(m, module_qualified_name)

    _replaced_forward: nn.Module | None = None  # the module call_module is tracing through

    def call_module(self, m: nn.Module, forward, args, kwargs):
        replacement = _batch_norm_forward(m, args, kwargs)
        if replacement is None:
            return super().call_module(m, forward, args, kwargs)
        # Through FX's own call_module, so the node records the BatchNorm's module path as an
        # inlined ReLU records its own (Inductor keys the same node by that path).
        outer, self._replaced_forward = self._replaced_forward, m
        try:
            return super().call_module(m, replacement, args, kwargs)
        finally:
            self._replaced_forward = outer


def autocast_state() -> tuple[bool, ...]:
    return tuple(torch.is_autocast_enabled(d) for d in ("cpu", "cuda"))


AUTOCAST_DROPPED = ("it runs under `torch.autocast`, which FX tracing does not record (the "
                    "graph would compute in other dtypes than the model)")


class AutocastDropped(Exception):
    """FX runs a `with torch.autocast(...)` block at trace time and records none of it: the
    graph would compute in the model's dtypes, not the block's."""


# torch's own BatchNorm forwards: in eval (and on one process, for SyncBatchNorm) each is
# F.batch_norm and nothing else.
_TORCH_BATCH_NORM_FORWARDS = (nn.modules.batchnorm._BatchNorm.forward, nn.SyncBatchNorm.forward)


def _batch_norm_forward(m: nn.Module, args, kwargs):
    """What to trace instead of a BatchNorm's forward, None to trace it as usual.

    BatchNorm's forward checks input.dim() in Python, which FX cannot trace; in eval mode it
    is F.batch_norm on the running statistics, recorded as such. Only torch's own forward: a
    subclass with its own (timm's BatchNormAct2d adds an activation after the norm) is traced
    through, or its extra ops would be lost.
    """
    if not (_plain_batch_norm(m) and len(args) == 1 and not kwargs):
        return None
    if not m.training and m.running_mean is not None:
        return lambda x: F.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias,
                                      False, 0.0, m.eps)
    if m.running_mean is None:  # it always normalizes by the batch's own statistics
        return lambda x: F.batch_norm(x, None, None, m.weight, m.bias, True, 0.0, m.eps)
    return None


def _plain_batch_norm(m: nn.Module) -> bool:
    """A BatchNorm whose forward is one of torch's own."""
    return isinstance(m, nn.modules.batchnorm._BatchNorm) and (
        type(m).forward in _TORCH_BATCH_NORM_FORWARDS)


def forward_stack(frame: types.FrameType | None) -> str | None:
    """The stack from the outermost `forward` inwards, formatted as FX formats it.

    Same frames as FX's `record_stack_traces` (from the first `forward` frame, minus
    torch's own uninteresting files), read from the live frames in microseconds.
    """
    frames: list[types.FrameType] = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()  # outermost first
    first = next((i for i, f in enumerate(frames) if f.f_code.co_name == "forward"), None)
    if first is None:
        return None
    skip = _uninteresting_files()
    lines = []
    for f in frames[first:]:
        file = f.f_code.co_filename
        if file in skip:
            continue
        lineno = _lineno(f)
        lines.append(f'  File "{file}", line {lineno}, in {f.f_code.co_name}\n')
        code = linecache.getline(file, lineno).strip()
        if code:
            lines.append(f"    {code}\n")
    return "".join(lines).strip() or None


def _lineno(frame: types.FrameType) -> int:
    """`frame.f_lineno` by bisection: f_lineno scans the line table from the top of the
    function, which made tracing a 10,000-line forward quadratic."""
    starts, lines = _line_table(frame.f_code)
    i = bisect.bisect_right(starts, frame.f_lasti) - 1
    return lines[i] if i >= 0 and lines[i] is not None else frame.f_lineno


def _line_table(code: types.CodeType) -> tuple[list[int], list[int | None]]:
    """Start offset and line of each bytecode range of `code`, cached by identity
    (hashing a code object hashes all its bytecode: linear in the function's length)."""
    hit = _LINE_TABLES.get(id(code))
    if hit is None or hit[0] is not code:
        if len(_LINE_TABLES) > 1024:
            _LINE_TABLES.clear()
        table = list(code.co_lines())
        hit = (code, [start for start, _, _ in table], [line for _, _, line in table])
        _LINE_TABLES[id(code)] = hit
    return hit[1], hit[2]


_LINE_TABLES: dict[int, tuple[types.CodeType, list[int], list[int | None]]] = {}


@functools.cache
def _uninteresting_files() -> frozenset[str]:
    from torch.fx.experimental.symbolic_shapes import uninteresting_files

    return frozenset(uninteresting_files())


def is_user_frame(filename: str, internal: tuple[str, ...] = (_TORCH_DIR, _OUR_DIR)) -> bool:
    """A frame whose line is worth showing: anything but torch's, ours and generated code.

    Installed libraries that build models (torchvision, transformers) count: their
    lines locate a cluster. `is_library_file` keeps them out of source edits.
    """
    return not (filename.startswith(internal) or filename.startswith("<"))


def is_library_file(filename: str, roots: tuple[str, ...] | None = None) -> bool:
    """True for a file of an installed package (or the standard library): never edited.

    A path with `site-packages` or `dist-packages` as a folder counts too (another
    environment's install); only files of the user's project may be proposed or applied.
    """
    path = os.path.abspath(filename)
    parts = Path(path).parts
    return path.startswith(roots if roots is not None else LIBRARY_ROOTS) or any(
        p in ("site-packages", "dist-packages") for p in parts)


def trace_fx(model: nn.Module) -> fx.GraphModule:
    """Symbolically trace `model` with `FusionTracer`; raise CaptureError naming the line."""
    tracer = FusionTracer()
    # The code quoted in stack traces comes from linecache, which keeps a file's lines
    # from its first read: a model file edited since (a notebook, pytest's in-process
    # runs) would show its old lines. One stat per cached file, then none per node.
    linecache.checkcache()
    # A forward that caches would keep a Proxy in the model; the tracer itself stores the
    # tensors a forward creates (`_tensor_constant0`) on it, so the GraphModule takes them
    # before the model is put back as it was.
    with kept_as_it_was(model):
        try:
            graph = tracer.trace(model)
        except Exception as e:  # noqa: BLE001 - FX raises many types for untraceable code
            where = _where(e)
            if isinstance(e, AutocastDropped):
                raise CaptureError(f"cannot trace {type(model).__name__}.forward{where}: "
                                   f"{AUTOCAST_DROPPED}", Fix.EXPORT) from e
            if not where:  # raised past forward's own frames: by what it returned
                returned = UNRECORDABLE.search(str(e))
                if returned:
                    raise CaptureError(
                        f"cannot trace {type(model).__name__}.forward: it returns a "
                        f"`{returned.group(1).rpartition('.')[2]}`, which FX cannot record: "
                        "return tensors, or tuples, lists and dicts of them") from e
            hint = _hint(e)
            if not where and hint == FIX_THAT_LINE:  # there is no line to point at
                hint = ""
            raise CaptureError(f"cannot trace {type(model).__name__}.forward{where}: "
                               f"{_one_line(e)}" + (f" ({hint})" if hint else ""),
                               Fix.EXPORT) from e
        return fx.GraphModule(tracer.root, graph, type(model).__name__)


# FX's message for a value it cannot put in the graph (torch 2.4 to 2.13).
UNRECORDABLE = re.compile(r"argument of type: <class '([\w.]+)'>")


def _hint(exc: BaseException) -> str:
    """How to change the line; the other way out, torch.export, is the error's `Fix`."""
    if isinstance(exc, fx.proxy.TraceError) or "control flow" in str(exc):
        return ("FX symbolic tracing follows no data-dependent Python control flow: "
                "rewrite it with torch.where")
    return FIX_THAT_LINE


FIX_THAT_LINE = "fix that line"


def user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the user's code in `exc`'s traceback (None: none there)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_frame(f.filename)]
    return frames[-1] if frames else None


def _where(exc: BaseException) -> str:
    f = user_frame(exc)
    return "" if f is None else f" at {f.filename}:{f.lineno} (`{(f.line or '').strip()}`)"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
