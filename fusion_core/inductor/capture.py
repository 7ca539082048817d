"""Capture what Inductor fused: compile a model with torch.compile and record its kernels.

Reads an ``nn.Module`` and example input tensors; writes an ``InductorCapture``: one
``InductorKernel`` per generated kernel (name, and the post-grad FX nodes it computes, each
with its aten op, module path and user source line).

How the kernels are found, best first (all of Inductor's introspection is private API, so
each step is guarded and the next one is the fallback):
1. ``define_kernel`` of the C++ and Triton schedulers is wrapped for the duration of the
   compile: it receives exactly the scheduler nodes that go into one kernel.
2. ``config._post_fusion_custom_pass`` (torch >= 2.8): the fused scheduler nodes; each one
   becomes a kernel (the C++ backend may later put several loops into one function).
3. Kernel names in the generated code (``cpp_fused_<ops>_<n>``, ``triton_poi_fused_...``;
   read by ``op_names.py``): op names only, no nodes or lines.
A kernel also records the ``cat`` nodes whose output its buffers are slices of
(``layouts.py``): Inductor writes a concatenation's producers straight into its output.

Beside the kernels it generates, Inductor calls library kernels (its ``ExternKernel`` nodes:
BLAS ``mm``/``addmm``, convolutions, aten fallbacks, flash or efficient attention). Each
becomes a ``LibraryCall`` (from the same ``_post_fusion_custom_pass``): the post-grad node
it was lowered from and, when a pattern rewrite put that node there, the user's nodes it
replaced (``rewrites.py``): the attention block Inductor hands to
``_scaled_dot_product_flash_attention_for_cpu`` is found that way. A call's other origins
(the ops producing its inputs) are left out: it does not compute them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from ..compile_quiet import quiet
from ..errors import FusionAdvisorError
from ..ir.normalize import module_path, parse_stack_trace
from .layouts import cat_origins, ir_nodes
from .op_names import is_compute, names_from_code, op_name, ops_from_name
from .rewrites import Rewrites, record_rewrites


class InductorError(FusionAdvisorError):
    pass


@dataclass(frozen=True)
class InductorNode:
    name: str
    op: str  # our registry name when known (`softmax`), else the aten name
    module: str  # innermost module path, "" for the top level
    file: str | None
    line: int | None

    @property
    def key(self) -> tuple[str, str, int] | None:
        """(module, file, line): the same user line in block 0 and block 1 differs by module."""
        return None if self.line is None else (self.module, self.file or "", self.line)


@dataclass(frozen=True)
class InductorKernel:
    name: str
    nodes: tuple[InductorNode, ...]
    name_ops: tuple[str, ...] = ()  # op names parsed from the kernel name (fallback mode)
    # The user's `cat` nodes whose output buffer this kernel writes its results into
    # (Inductor's ConcatKernel lends each input a slice: a `NonOwningLayout`).
    into_cat: tuple[InductorNode, ...] = ()

    @property
    def cats(self) -> tuple[InductorNode, ...]:
        """The concatenations this kernel fuses a producer into: those it writes into, and
        a `cat` among its own origins (a concatenation lowered as a pointwise read)."""
        found = {n.name: n for n in (*self.into_cat, *self.nodes) if n.op == "cat"}
        return tuple(found.values())

    @property
    def ops(self) -> tuple[str, ...]:
        ops = {n.op for n in self.nodes} if self.nodes else set(self.name_ops)
        return tuple(sorted(ops))

    @property
    def compute_nodes(self) -> tuple[InductorNode, ...]:
        return tuple(n for n in self.nodes if is_compute(n.op))

    @property
    def is_compute(self) -> bool:
        """A pointwise/reduction kernel (not a pure layout copy or gather)."""
        return any(is_compute(op) for op in self.ops)

    @property
    def n_user_ops(self) -> int:
        """Distinct user-level ops computed (gelu's five aten nodes are one op on one line)."""
        if not self.nodes:
            return len(self.name_ops)
        return len({(n.key, n.op) for n in self.compute_nodes})

    @property
    def lines(self) -> tuple[int, ...]:
        return tuple(sorted({n.line for n in self.compute_nodes if n.line is not None}))


@dataclass(frozen=True)
class LibraryCall:
    """A kernel Inductor calls rather than generates (an ``ExternKernel``)."""

    op: str  # what it calls: `addmm`, `_scaled_dot_product_flash_attention_for_cpu`
    nodes: tuple[InductorNode, ...]  # the post-grad node(s) it was lowered from
    replaced: tuple[InductorNode, ...] = ()  # the user's nodes a pattern rewrite put it for
    pattern: str = ""  # that rewrite's name, when Inductor gives one

    @property
    def computes(self) -> tuple[InductorNode, ...]:
        """Its nodes with a line, the replaced ones included."""
        return tuple(n for n in (*self.nodes, *self.replaced) if n.line is not None)

    @property
    def epilogue(self) -> tuple[InductorNode, ...]:
        """The pointwise ops a pattern folded into this convolution or matmul call (oneDNN's
        `_convolution_pointwise` applying the ReLU that read its result)."""
        from .kernel_graph import ATTENTION_OPS, GEMM_OPS  # it imports this module

        if self.op.lstrip("_") in ATTENTION_OPS or not (
                any(n.op in GEMM_OPS for n in (*self.nodes, *self.replaced))
                or any(word in self.op for word in ("convolution", "linear", "mm"))):
            return ()  # an attention rewrite replaced its matmuls and softmax: no epilogue
        return tuple(n for n in self.replaced if is_compute(n.op) and n.op not in GEMM_OPS)


@dataclass(frozen=True)
class InductorCapture:
    kernels: tuple[InductorKernel, ...]
    method: str  # "define_kernel", "post_fusion" or "names"
    code: tuple[str, ...]  # generated wrapper sources
    torch_version: str
    calls: tuple[LibraryCall, ...] = ()  # library kernels (needs `_post_fusion_custom_pass`)
    # Inductor's own estimate of the bytes its kernels and calls read and write (the sum of
    # each fused node's buffer sizes, as its `count_bytes` metric); None without the pass.
    bytes_moved: int | None = None

    @property
    def compute_kernels(self) -> tuple[InductorKernel, ...]:
        return tuple(k for k in self.kernels if k.is_compute)


def _node_record(fx_node: Any) -> InductorNode | None:
    if getattr(fx_node, "op", None) != "call_function":
        return None
    meta = getattr(fx_node, "meta", {}) or {}
    aten = meta.get("original_aten") or fx_node.target
    packet = getattr(aten, "_overloadpacket", aten)
    name = getattr(packet, "__name__", None) or str(packet).split(".")[-1]
    loc = parse_stack_trace(meta.get("stack_trace"))
    return InductorNode(name=fx_node.name, op=op_name(name),
                        module=module_path(meta.get("nn_module_stack")),
                        file=loc.file if loc else None, line=loc.line if loc else None)


def _origins(scheduler_nodes: Sequence[Any], rewrites: Rewrites) -> tuple[InductorNode, ...]:
    """The post-grad nodes the kernel computes. A lowering pattern's product (its target a
    Python function, not an aten op) stands for a library call: a kernel listing it only
    prepares that call's inputs (oneDNN's weight and input layouts)."""
    seen: dict[str, InductorNode] = {}
    for ir_node in ir_nodes(scheduler_nodes):
        for origin in sorted(getattr(ir_node, "origins", None) or (), key=lambda o: o.name):
            if rewrites.sources(origin) and not _packet(origin.target):
                continue
            rec = _node_record(origin)
            if rec is not None:
                seen.setdefault(rec.name, rec)
    return tuple(seen.values())


Record = tuple[str, tuple[InductorNode, ...], tuple[InductorNode, ...]]  # name, nodes, cats


def _record(name: str, scheduler_nodes: Sequence[Any], rewrites: Rewrites) -> Record:
    cats: tuple[InductorNode, ...] = ()
    with contextlib.suppress(Exception):  # the layouts are private API: the nodes matter more
        cats = tuple(r for r in map(_node_record, cat_origins(scheduler_nodes))
                     if r is not None and r.op == "cat")
    return name, _origins(scheduler_nodes, rewrites), cats


def _scheduling_classes() -> list[type]:
    found = []
    for mod, cls in (("torch._inductor.codegen.cpp", "CppScheduling"),
                     ("torch._inductor.codegen.triton", "TritonScheduling"),
                     ("torch._inductor.codegen.simd", "SIMDScheduling")):
        with contextlib.suppress(Exception):
            module = __import__(mod, fromlist=[cls])
            found.append(getattr(module, cls))
    return found


@contextlib.contextmanager
def _record_define_kernel(sink: list[Record], rewrites: Rewrites) -> Iterator[None]:
    """Wrap each scheduler's define_kernel(src_code, nodes, ...) to record name and nodes."""
    patched: list[tuple[type, Callable]] = []

    def wrap(original: Callable) -> Callable:
        def define_kernel(self, src_code, nodes, *args, **kwargs):
            name = original(self, src_code, nodes, *args, **kwargs)
            with contextlib.suppress(Exception):
                sink.append(_record(str(name), list(nodes), rewrites))
            return name
        define_kernel._fusion_advisor = True  # type: ignore[attr-defined]
        return define_kernel

    try:
        for cls in _scheduling_classes():
            original = cls.__dict__.get("define_kernel")
            if original is None or getattr(original, "_fusion_advisor", False):
                continue
            cls.define_kernel = wrap(original)
            patched.append((cls, original))
        yield
    finally:
        for cls, original in patched:
            cls.define_kernel = original


def _packet(target: Any) -> str:
    """`addmm` for aten.addmm.out or aten.addmm.default; "" for a Python function."""
    packet = getattr(target, "_overloadpacket", None)
    return getattr(packet, "__name__", "") if packet is not None else ""


def _call_op(ir_node: Any) -> str:
    """`addmm` for aten.addmm.out, `mkldnn._convolution_pointwise` outside aten."""
    overload = getattr(ir_node, "op_overload", None)
    if _packet(overload):
        ns = getattr(overload._overloadpacket, "_qualified_op_name", "aten::").split("::")[0]
        return _packet(overload) if ns == "aten" else f"{ns}.{_packet(overload)}"
    name = str(getattr(ir_node, "python_kernel_name", None) or type(ir_node).__name__)
    return name.removeprefix("extern_kernels.").removeprefix("torch.ops.")


def _library_call(sn: Any, rewrites: Rewrites) -> LibraryCall | None:
    """The library call of an extern scheduler node (None for a MultiOutput, which only
    picks one result of the call before it)."""
    ir_node = getattr(sn, "node", None)
    if ir_node is None or type(ir_node).__name__ == "MultiOutput":
        return None
    op = _call_op(ir_node)
    # Its origins also name the ops whose results it reads (the LayerNorm before an addmm):
    # only the node it was lowered from is its own, by op, or a rewrite's product whose
    # target is a lowering function rather than an aten op (oneDNN's fused convolutions).
    own = [o for o in sorted(getattr(ir_node, "origins", None) or (), key=lambda o: o.name)
           if _packet(o.target) == op.rsplit(".", 1)[-1]
           or (rewrites.sources(o) and not _packet(o.target))]
    replaced = [src for o in own for src in rewrites.sources(o)]
    pattern = next((rewrites.pattern[o] for o in own if o in rewrites.pattern), "")
    return LibraryCall(op, tuple(r for r in map(_node_record, own) if r is not None),
                       tuple(dict.fromkeys(r for r in map(_node_record, replaced) if r)),
                       pattern)


def _post_fusion_patch(sink: list[Record], calls: list[LibraryCall], rewrites: Rewrites,
                       moved: list[int]):
    import torch._inductor.config as cfg

    if not hasattr(cfg, "_post_fusion_custom_pass"):
        return contextlib.nullcontext()

    def record(nodes):
        with contextlib.suppress(Exception):
            moved.append(sum(sn.get_read_write_buffers_sizes() for sn in nodes))
        with contextlib.suppress(Exception):
            for sn in nodes:
                if "Extern" in type(sn).__name__:
                    with contextlib.suppress(Exception):  # the kernels matter more
                        call = _library_call(sn, rewrites)
                        if call is not None:
                            calls.append(call)
                    continue
                if "Nop" in type(sn).__name__:
                    continue
                sink.append(_record(str(sn.get_name()), [sn], rewrites))
        return nodes

    # The compile runs in a fresh cache anyway; with the FX graph cache on, Inductor tries to
    # pickle this local function into a cache key and logs a traceback for every graph.
    return cfg.patch(_post_fusion_custom_pass=record, fx_graph_cache=False)


def _compile(model: nn.Module, inputs: Sequence[torch.Tensor]) -> tuple[str, ...]:
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with torch.no_grad(), quiet():  # Dynamo's chatter, not a finding of ours
        _, code = run_and_get_code(torch.compile(model), *inputs)
    return tuple(code)


def capture(model: nn.Module, inputs: Sequence[torch.Tensor],
            fresh_cache: bool = True) -> InductorCapture:
    """Compile `model` (default mode, no grad) and record its kernels. With `fresh_cache`
    nothing compiled before is reused; without it the compiled-kernel caches on disk are
    (a warm re-run skips the C++/Triton builds). The FX graph cache is off either way: on a
    hit Inductor generates no code, so there would be no kernels to record."""
    try:
        from torch._inductor.utils import fresh_inductor_cache
    except ImportError as e:  # pragma: no cover - very old torch
        raise InductorError(f"this torch ({torch.__version__}) has no Inductor: "
                            "upgrade torch to compare with torch.compile") from e
    by_define: list[Record] = []
    by_pass: list[Record] = []
    calls: list[LibraryCall] = []
    rewrites = Rewrites()
    moved: list[int] = []
    model = model.eval()
    cache = fresh_inductor_cache() if fresh_cache else contextlib.nullcontext()
    try:
        with cache, _record_define_kernel(by_define, rewrites), \
                record_rewrites(rewrites), _post_fusion_patch(by_pass, calls, rewrites, moved):
            code = _compile(model, inputs)
    except Exception as e:  # noqa: BLE001 - any compiler failure becomes one line
        msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InductorError(f"torch.compile failed on {type(model).__name__}: "
                            f"{type(e).__name__}: {msg} (run without --vs-inductor)") from e
    finally:
        torch._dynamo.reset()
    names = names_from_code(code)
    kernels, method = _pick(by_define, by_pass, names)
    return InductorCapture(kernels=kernels, method=method, code=code,
                           torch_version=torch.__version__, calls=tuple(calls),
                           bytes_moved=sum(moved) if moved else None)


def _pick(by_define: list[Record], by_pass: list[Record], names: list[str]
          ) -> tuple[tuple[InductorKernel, ...], str]:
    generated = set(names)
    # Keep only kernels that made it into the code (benchmark-only compiles do not).
    defined = [r for r in _dedupe(by_define) if not generated or r[0] in generated]
    if defined and any(nodes for _, nodes, _ in defined):
        # Call order is code order: the first kernel computing a value is its producer.
        return tuple(InductorKernel(n, nodes, ops_from_name(n), cats)
                     for n, nodes, cats in defined), "define_kernel"
    if by_pass and any(nodes for _, nodes, _ in by_pass):
        return tuple(InductorKernel(n, nodes, (), cats) for n, nodes, cats in by_pass), \
            "post_fusion"
    return tuple(InductorKernel(n, (), ops_from_name(n)) for n in names), "names"


def _dedupe(records: list[Record]) -> Iterator[Record]:
    seen = set()
    for name, nodes, cats in records:
        key = (name, tuple(n.name for n in nodes))
        if key not in seen:
            seen.add(key)
            yield name, nodes, cats
