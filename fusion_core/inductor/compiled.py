"""What ``torch.compile`` does with a model, as one record a test can keep in its baseline.

Reads an ``nn.Module``, its example inputs and optional extra input shapes; writes a
``CompiledRecord``: Dynamo's graph breaks (reason and the user's source line) and graph count
(``torch._dynamo.explain``), Inductor's kernels with the ops each computes (``capture.py``)
and its estimate of the bytes they move, the recompilations the extra shapes cause with
Dynamo's guard-failure reasons, and the backend and versions it was taken with. Given our
``Analysis`` of the same model, it also says why each kernel feeding another is apart from it
(``separation.py``): the gate names that when a kernel splits.
``to_dict``/``from_dict`` give the plain form a YAML baseline stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from ..compile_quiet import quiet
from ..names import module_written
from .capture import InductorError, InductorNode, capture
from .separation import Separation, separations

KERNEL_KINDS = ("generated", "template", "extern")  # extern: a library call (GEMM, attention)


@dataclass(frozen=True)
class GraphBreak:
    reason: str  # Dynamo's reason, first line ("Unsupported Tensor.item() call ...")
    file: str | None  # the user's innermost frame at the break
    line: int | None
    source: str = ""  # that line's text

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "unknown line"


@dataclass(frozen=True)
class OpSite:
    op: str
    module: str  # module path, "" for the top level
    file: str | None
    line: int | None

    @property
    def where(self) -> str:
        at = f"{self.file}:{self.line}" if self.file else "unknown line"
        return f"{module_written(self.module)} {at}" if self.module else at


@dataclass(frozen=True)
class CompiledKernel:
    name: str
    kind: str  # one of KERNEL_KINDS
    ops: tuple[str, ...]  # sorted op names it computes
    sites: tuple[OpSite, ...]  # the user's ops it computes, where known


@dataclass(frozen=True)
class Recompile:
    reason: str  # Dynamo's guard failure ("tensor 'x' size mismatch at index 0. expected 4, …")
    function: str  # the compiled function whose guard failed
    file: str | None
    line: int | None  # its `def` line

    @property
    def where(self) -> str:
        at = f"{self.file}:{self.line}" if self.file else "unknown line"
        return f"{self.function} at {at}"


@dataclass(frozen=True)
class CompiledRecord:
    backend: str  # "cpu-inductor" or "cuda-inductor": baselines key records by it
    torch_version: str
    triton_version: str  # "" when triton is not installed
    graph_count: int
    graph_breaks: tuple[GraphBreak, ...]
    kernels: tuple[CompiledKernel, ...]
    recompiles: int  # extra compiles the extra shapes caused (0 without extra shapes)
    extra_shapes: tuple[tuple[tuple[int, ...], ...], ...] = ()
    recompile_reasons: tuple[Recompile, ...] = ()
    bytes_moved: int | None = None  # Inductor's estimate; None when it gave none
    separations: tuple[Separation, ...] = ()  # only when our analysis was given
    # Our clusters beside Inductor's kernels (``match.to_dict``), when our analysis was
    # given: for reports, never stored in a baseline (so not compared either).
    agreement: dict[str, Any] | None = field(default=None, compare=False)
    # The same agreement typed (``match.Agreement``), for the HTML page
    matched: Any = field(default=None, compare=False, repr=False)


def _sites(nodes: Sequence[InductorNode]) -> tuple[OpSite, ...]:
    found = dict.fromkeys(OpSite(n.op, n.module, n.file, n.line) for n in nodes)
    return tuple(found)


def _triton_version() -> str:
    try:
        import triton
    except ImportError:
        return ""
    return str(getattr(triton, "__version__", ""))


def _graph_breaks(
    model: nn.Module, inputs: Sequence[torch.Tensor]
) -> tuple[int, tuple[GraphBreak, ...]]:
    torch._dynamo.reset()
    try:
        with torch.no_grad(), quiet():  # the breaks are recorded: Dynamo's lines not needed
            explained = torch._dynamo.explain(model)(*inputs)
    finally:
        torch._dynamo.reset()
    breaks = []
    for reason in explained.break_reasons:
        stack = list(getattr(reason, "user_stack", None) or ())
        frame = stack[-1] if stack else None  # innermost: the line that broke the graph
        text = (str(reason.reason).strip().splitlines() or [""])[0]
        breaks.append(
            GraphBreak(
                text,
                frame.filename if frame else None,
                frame.lineno if frame else None,
                (frame.line or "").strip() if frame else "",
            )
        )
    return explained.graph_count, tuple(breaks)


def _like(inputs: Sequence[torch.Tensor], shapes: Sequence[tuple[int, ...]]) -> list[torch.Tensor]:
    if len(shapes) != len(inputs):
        raise InductorError(
            f"an extra shape entry gives {len(shapes)} shapes for {len(inputs)} "
            "inputs: give one shape per input"
        )
    return [
        torch.randn(tuple(s), dtype=x.dtype, device=x.device)
        if x.is_floating_point()
        else torch.zeros(tuple(s), dtype=x.dtype, device=x.device)
        for x, s in zip(inputs, shapes, strict=True)
    ]


def _guard_failures(failures: dict[Any, list[Any]]) -> tuple[Recompile, ...]:
    """Dynamo's guard-failure log as records: the "0/0: " compile id and any stack dropped."""
    out = []
    for code, reasons in failures.items():
        for text in reasons:
            first = (str(text).split("\nUser stack trace:")[0].strip().splitlines() or [""])[0]
            reason = first.split(": ", 1)[1] if ": " in first else first
            out.append(Recompile(reason, getattr(code, "co_name", "?"),
                                 getattr(code, "co_filename", None),
                                 getattr(code, "co_firstlineno", None)))
    return tuple(dict.fromkeys(out))


def _recompiles(
    model: nn.Module, inputs: Sequence[torch.Tensor], extra: Sequence[Sequence[torch.Tensor]]
) -> tuple[int, tuple[Recompile, ...]]:
    """Graphs Dynamo compiles beyond the first call's, and the guard failures that caused
    them. Guards are Dynamo's, not the backend's, so the cheap "eager" backend counts what
    Inductor would recompile."""
    if not extra:
        return 0, ()
    from torch._dynamo.utils import counters, guard_failures

    torch._dynamo.reset()
    counters.clear()
    guard_failures.clear()
    try:
        compiled = torch.compile(model, backend="eager")
        with torch.no_grad(), quiet():
            compiled(*inputs)
            first = counters["stats"]["unique_graphs"]
            for args in extra:
                compiled(*args)
        return counters["stats"]["unique_graphs"] - first, _guard_failures(guard_failures)
    finally:
        torch._dynamo.reset()


def _as_tensor(x: Any, model: nn.Module) -> torch.Tensor:
    """A tensor for an example input: a tensor, an InputSpec, a shape tuple or "4,8" (random
    values; integer ids below the smallest embedding table, as validation makes them)."""
    if isinstance(x, torch.Tensor):
        return x
    from ..ir.shapes import InputSpec
    from ..validate.inputs import random_inputs

    if isinstance(x, str):
        x = InputSpec.parse(x)
    elif isinstance(x, (tuple, list)) and all(isinstance(d, int) for d in x):
        x = InputSpec(tuple(x), torch.float32)
    if isinstance(x, InputSpec):
        return random_inputs([x], model, "cpu", seed=0)[0]
    raise InductorError(
        f"example input {x!r} is no tensor, shape or InputSpec: give a tensor or a shape tuple"
    )


def _moved(model: nn.Module, inputs: tuple[torch.Tensor, ...], device: torch.device
           ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model and inputs on `device`; the model copied first, so the caller's stays put."""
    import copy

    on = {p.device.type for p in (*model.parameters(), *model.buffers())}
    if on and on != {device.type}:
        try:
            model = copy.deepcopy(model)
        except Exception as e:  # noqa: BLE001 - any copy failure is one line
            raise InductorError(f"cannot copy {type(model).__name__} to compile it on "
                                f"{device.type}: {type(e).__name__}: {e}") from e
        model = model.to(device)
    return model, tuple(x.to(device) for x in inputs)


def compiled_record(
    model: nn.Module,
    *inputs: Any,
    extra_shapes: Sequence[Sequence[tuple[int, ...]]] = (),
    analysis: Any = None,
    fresh_cache: bool = False,
    device: str | None = None,
) -> CompiledRecord:
    """Compile `model` on `inputs` (default mode, no grad) and record what came out; each
    entry of `extra_shapes` gives one shape per input to call it again. Inputs are tensors,
    or shapes / InputSpecs (random tensors of that shape are made). `analysis`: our
    ``Analysis`` of the same model, to say why kernels are apart. Inductor's compiled-kernel
    caches are reused unless `fresh_cache` (the record is the same either way). `device`:
    compile there ("cuda": Inductor's Triton backend), on a copy of the model and inputs
    moved to it; None compiles where the inputs are."""
    inputs = tuple(_as_tensor(x, model) for x in inputs)
    if device is not None:
        model, inputs = _moved(model, inputs, torch.device(device))
    extra = [_like(inputs, shapes) for shapes in extra_shapes]  # bad shapes fail before compiling
    model = model.eval()
    graph_count, breaks = _graph_breaks(model, inputs)
    captured = capture(model, inputs, fresh_cache=fresh_cache)
    kernels = [
        CompiledKernel(
            k.name, "template" if "_tem_" in k.name else "generated", k.ops, _sites(k.nodes)
        )
        for k in captured.kernels
    ]
    kernels += [
        CompiledKernel(
            c.op, "extern", tuple(sorted({n.op for n in c.computes} or {c.op})), _sites(c.computes)
        )
        for c in captured.calls
    ]
    device = next((x.device.type for x in inputs if isinstance(x, torch.Tensor)), "cpu")
    recompiles, reasons = _recompiles(model, inputs, extra)
    apart, agreement, matched = (), None, None
    if analysis is not None:
        from .match import match
        from .match import to_dict as agreement_dict

        apart = separations(analysis, kernels)
        matched = match(analysis, captured)
        agreement = agreement_dict(matched)
    return CompiledRecord(
        backend=f"{device}-inductor",
        torch_version=str(torch.__version__),  # a str subclass YAML cannot write
        triton_version=_triton_version(),
        graph_count=graph_count,
        graph_breaks=breaks,
        kernels=tuple(kernels),
        recompiles=recompiles,
        extra_shapes=tuple(tuple(tuple(int(d) for d in s) for s in e) for e in extra_shapes),
        recompile_reasons=reasons,
        bytes_moved=captured.bytes_moved,
        separations=apart,
        agreement=agreement,
        matched=matched,
    )


def to_dict(record: CompiledRecord) -> dict[str, Any]:
    """Plain data for a YAML baseline (the agreement left out: it is for reports)."""
    return {
        "torch": record.torch_version,
        "triton": record.triton_version,
        "graphs": record.graph_count,
        "graph_breaks": [
            {"reason": b.reason, "file": b.file, "line": b.line, "source": b.source}
            for b in record.graph_breaks
        ],
        "kernels": [
            {
                "name": k.name,
                "kind": k.kind,
                "ops": list(k.ops),
                "sites": [[s.op, s.module, s.file, s.line] for s in k.sites],
            }
            for k in record.kernels
        ],
        "recompiles": record.recompiles,
        "extra_shapes": [[list(s) for s in e] for e in record.extra_shapes],
        "recompile_reasons": [
            {"reason": r.reason, "function": r.function, "file": r.file, "line": r.line}
            for r in record.recompile_reasons
        ],
        "bytes_moved": record.bytes_moved,
        "separations": [[s.before, s.after, s.reason] for s in record.separations],
    }


def from_dict(backend: str, data: dict[str, Any]) -> CompiledRecord:
    """The record `to_dict` wrote (the backend is the key it was stored under)."""
    return CompiledRecord(
        backend=backend,
        torch_version=str(data.get("torch", "")),
        triton_version=str(data.get("triton", "")),
        graph_count=int(data.get("graphs", 1)),
        graph_breaks=tuple(
            GraphBreak(
                str(b.get("reason", "")), b.get("file"), b.get("line"), str(b.get("source", ""))
            )
            for b in data.get("graph_breaks", ())
        ),
        kernels=tuple(
            CompiledKernel(
                str(k["name"]),
                str(k.get("kind", "generated")),
                tuple(k.get("ops", ())),
                tuple(OpSite(*s) for s in k.get("sites", ())),
            )
            for k in data.get("kernels", ())
        ),
        recompiles=int(data.get("recompiles", 0)),
        extra_shapes=tuple(tuple(tuple(s) for s in e) for e in data.get("extra_shapes", ())),
        recompile_reasons=tuple(
            Recompile(str(r.get("reason", "")), str(r.get("function", "")), r.get("file"),
                      r.get("line"))
            for r in data.get("recompile_reasons", ())
        ),
        bytes_moved=data.get("bytes_moved"),
        separations=tuple(Separation(*map(str, s)) for s in data.get("separations", ())),
    )


# Methods so the plugin reaches the plain-data form through the public class alone.
CompiledRecord.to_dict = to_dict  # type: ignore[attr-defined]
CompiledRecord.from_dict = staticmethod(from_dict)  # type: ignore[attr-defined]
