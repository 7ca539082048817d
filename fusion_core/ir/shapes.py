"""Shape propagation on fake tensors: no real compute, no activation memory.

Reads a ``GraphModule`` and ``InputSpec``s; writes ``node.meta["val"]`` (a
FakeTensor, or a tuple/int for non-tensor values) on every node, from which
the normalized graph takes shape, dtype and stride. A 16384x1024 analysis
allocates nothing at that size. A node that fails raises, by what failed:
``ShapePropagationError`` for a construct no input could make fake tensors run
(``.item()``, ``nonzero``: the model's, which torch.export may still capture),
``CaptureError`` for a bug in forward, ``InputSpecError`` otherwise (the op
rejected the example input).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from ..errors import CaptureError, Fix, FusionAdvisorError, InputSpecError, ShapePropagationError
from ..names import module_written
from ..units import counted, was
from .input_layout import (
    checked_order,
    dense_strides,
    memory_order_of,
    order_words,
    shape_order,
)
from .normalize import parse_stack_trace
from .targets import lookup

# torch's TensorIterator kernels (reductions among them) take at most 64 dims, and a
# tensor's size in bytes is a signed 64-bit integer.
MAX_DIMS = 64
MAX_BYTES = 2**63 - 1

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "bool": torch.bool,
}


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    # The dims from outermost to innermost in memory, where the example input is dense in
    # another order than the contiguous one (channels-last: (0, 2, 3, 1)); None: contiguous.
    # Fake inputs take its strides, so the analysis and the kernels see the real layout.
    memory_order: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        try:  # a list becomes a tuple (hashable), the contiguous order None (equal specs)
            order = checked_order(self.shape, self.memory_order)
        except ValueError as e:
            raise InputSpecError(str(e)) from None
        object.__setattr__(self, "memory_order", order)

    @classmethod
    def of(cls, t: torch.Tensor) -> InputSpec:
        """The spec of an example tensor: its shape, dtype and memory order."""
        return cls(tuple(t.shape), t.dtype, memory_order_of(t))

    def resized(self, shape: tuple[int, ...]) -> InputSpec:
        """This spec at another shape of the same rank, its dtype and memory order kept."""
        return replace(self, shape=tuple(shape))

    @property
    def stride(self) -> tuple[int, ...]:
        """The strides of a dense tensor of this shape in this memory order."""
        return dense_strides(self.shape, self.memory_order)

    @classmethod
    def parse(cls, text: str, dtype: str | torch.dtype = "float32") -> InputSpec:
        """Parse `16384,1024` (comma-separated positive ints), optionally followed by a
        memory order: `8,64,56,56:channels_last` (`input_layout.shape_order`)."""
        dims, colon, order_text = (text or "").partition(":")
        if not re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", dims):
            raise InputSpecError(f"malformed input shape {text!r}", Fix.SHAPE_TEXT)
        shape = tuple(int(d) for d in dims.split(","))
        if any(d == 0 for d in shape):
            raise InputSpecError(f"input shape {text!r} has a zero dimension: "
                                 "every dimension must be at least 1")
        if len(shape) > MAX_DIMS:
            raise InputSpecError(f"input shape has {len(shape)} dimensions; torch's kernels "
                                 f"take at most {MAX_DIMS}: give a shape with fewer dimensions")
        try:
            order = shape_order(order_text, shape, text) if colon else None
        except ValueError as e:
            raise InputSpecError(str(e)) from None
        spec = cls(shape, parse_dtype(dtype), order)
        nbytes = math.prod(shape) * spec.dtype.itemsize
        if nbytes > MAX_BYTES:
            raise InputSpecError(
                f"input shape {dims.strip()!r} of {str(spec.dtype).removeprefix('torch.')} "
                f"is {nbytes:.3g} bytes, more than torch can address (2**63 - 1 bytes): "
                "give a smaller shape")
        return spec

    def __str__(self) -> str:
        return ("×".join(map(str, self.shape)) + f" {str(self.dtype).removeprefix('torch.')}"
                + order_words(self.memory_order))


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise InputSpecError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def fake_inputs(mode: FakeTensorMode, specs: Sequence[InputSpec],
                device: torch.device | None = None) -> list[torch.Tensor]:
    with mode:
        # in the example's layout: a channels-last input propagates channels-last values
        return [torch.empty_strided(s.shape, s.stride, dtype=s.dtype, device=device)
                for s in specs]


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model computes: the first device other than the CPU its parameters (else
    buffers) are on, else the CPU. Its example inputs go there too, or a model moved to CUDA
    would meet CPU inputs in its first op. A CUDA model may hold CPU tensors still (a plain
    tensor attribute, which `.cuda()` leaves, is a buffer of its FX graph module)."""
    held = (*model.parameters(), *model.buffers())
    return next((t.device for t in held if t.device.type != "cpu"), torch.device("cpu"))


_SCALARS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


_EMBEDDINGS = (torch.nn.Embedding, torch.nn.EmbeddingBag)
_ATEN_EMBEDDING = torch.ops.aten.embedding.default
_EMBEDDING_FNS = (torch.nn.functional.embedding, _ATEN_EMBEDDING)


class _Prop(FakeTensorProp):
    # FakeTensorProp stores a detached copy (snapshot) of every result in case a later
    # in-place op changes its metadata; that copy is a fifth of the pass. Graphs without
    # in-place methods store the result itself.
    snapshot = True

    def __init__(self, gm: fx.GraphModule, mode: FakeTensorMode) -> None:
        super().__init__(gm, mode)
        # A pointwise op or reduction's result depends only on its inputs' metadata:
        # nodes repeating one (a long chain of same-shape ops) share one fake result
        # instead of paying ~0.15 ms to build another. Only without in-place methods.
        self._memo: dict[tuple, FakeTensor] = {}

    def run_node(self, n: fx.Node) -> Any:
        try:
            self._check_indices(n)
            self._check_product_dtypes(n)
            if self.snapshot:
                return super().run_node(n)
            key = self._memo_key(n)
            result = self._memo.get(key) if key is not None else None
            if result is None:
                result = fx.Interpreter.run_node(self, n)
                if key is not None and isinstance(result, FakeTensor):
                    self._memo[key] = result
            val = fx.node.map_aggregate(result, self._val)
            if val is not None:
                n.meta["val"] = val
            return result
        except Exception as e:  # noqa: BLE001 - any op can reject the example input
            raise _rejection(n, e, type(self.module).__name__) from e

    def _check_indices(self, n: fx.Node) -> None:
        """An embedding's indices must be integers; some torch versions' fake kernels
        accept float ids, and the model then fails only when it runs for real."""
        if n.op == "call_module":
            is_embedding = isinstance(self.module.get_submodule(str(n.target)), _EMBEDDINGS)
            ids = n.args[0] if n.args else None
        else:
            is_embedding = n.op == "call_function" and n.target in _EMBEDDING_FNS
            ids = n.args[1 if n.target is _ATEN_EMBEDDING else 0] if len(n.args) > 1 else None
        val = self.env.get(ids) if is_embedding and isinstance(ids, fx.Node) else None
        if isinstance(val, torch.Tensor) and (val.dtype.is_floating_point
                                              or val.dtype == torch.bool):
            raise TypeError(f"embedding indices must be integers (token ids), got {val.dtype}")

    def _check_product_dtypes(self, n: fx.Node) -> None:
        """A matrix product's (or a Linear's or convolution's) operands share one dtype on
        every device, which fake kernels do not check: a float16 input against float32
        weights would be analysed, then fail in every validation run."""
        if n.op == "call_module":
            layer = self.module.get_submodule(str(n.target))
            weight = getattr(layer, "weight", None)
            if not isinstance(layer, _PRODUCT_LAYERS) or not isinstance(weight, torch.Tensor):
                return
            x = self.env.get(n.args[0]) if n.args and isinstance(n.args[0], fx.Node) else None
            if isinstance(x, torch.Tensor) and x.dtype != weight.dtype:
                raise TypeError(f"its weights are {_dtype(weight.dtype)} and its input "
                                f"{_dtype(x.dtype)}; cast one to the other's dtype")
            return
        if (why := product_dtypes(n, self.env.get)) is not None:
            raise TypeError(why)

    def _memo_key(self, n: fx.Node) -> tuple | None:
        if n.op not in ("call_function", "call_method"):
            return None
        found = lookup(("method", n.target) if n.op == "call_method" else n.target)
        if not isinstance(found, tuple) or not found[0].kind.is_compute:
            return None
        try:
            return (n.op, n.target, self._describe(n.args), self._describe(n.kwargs))
        except _NotMemoizable:
            return None

    def _describe(self, obj: Any) -> Any:
        """A hashable description of an argument: tensors by metadata, scalars by value."""
        if isinstance(obj, fx.Node):
            obj = self.env[obj]
        if isinstance(obj, FakeTensor):
            return ("T", tuple(obj.shape), obj.stride(), obj.storage_offset(), obj.dtype,
                    obj.device, obj.requires_grad)
        if isinstance(obj, (tuple, list)):
            return (type(obj).__name__, *(self._describe(x) for x in obj))
        if isinstance(obj, dict):
            return ("dict", *((k, self._describe(v)) for k, v in obj.items()))
        if obj is None or isinstance(obj, (bool, int, float, str, torch.dtype)):
            return (type(obj).__name__, obj)
        raise _NotMemoizable

    def _val(self, obj: Any) -> Any:
        if isinstance(obj, FakeTensor):
            return obj
        if isinstance(obj, torch.Tensor):  # a real parameter or buffer
            return self._mode.from_tensor(obj, static_shapes=True)
        return obj if isinstance(obj, _SCALARS) else None


# Matrix products (function, method and aten names) and the layers that compute one.
_PRODUCTS = frozenset({"matmul", "mm", "bmm", "linear", "addmm", "baddbmm", "einsum"})
_PRODUCT_LAYERS = (torch.nn.Linear, torch.nn.modules.conv._ConvNd)


def _dtype(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def product_dtypes(n: fx.Node, value: Callable[[fx.Node], Any]) -> str | None:
    """Why the matrix product `n` cannot run (its operands' dtypes differ), or None;
    `value` gives an argument node's (fake) tensor."""
    name = str(n.target) if n.op == "call_method" else getattr(
        getattr(n.target, "_overloadpacket", n.target), "__name__", "")
    if n.op not in ("call_function", "call_method") or name not in _PRODUCTS:
        return None
    dtypes = {v.dtype for a in n.args if isinstance(a, fx.Node)
              and isinstance(v := value(a), torch.Tensor)}
    if len(dtypes) < 2:
        return None
    return ("a matrix product's operands must share one dtype, got "
            f"{' and '.join(sorted(_dtype(d) for d in dtypes))}")


def check_product_dtypes(gm: fx.GraphModule, model: str) -> None:
    """`product_dtypes` over a captured graph whose nodes hold their values (torch.export's)."""
    for n in gm.graph.nodes:
        if (why := product_dtypes(n, lambda a: a.meta.get("val"))) is not None:
            raise _rejection(n, TypeError(why), model)


class _NotMemoizable(Exception):
    pass


# What no example input can make a fake tensor compute, by the exception the fake-tensor
# dispatch raises: the model's construct, not the input, failed.
_CONSTRUCTS = tuple((cls, why) for cls, why in (
    (getattr(fake_tensor, "DataDependentOutputException", None), "reads a tensor's value"),
    (getattr(fake_tensor, "DynamicOutputShapeException", None),
     "makes a shape out of a tensor's values"),
    (getattr(fake_tensor, "UnsupportedOperatorException", None),
     "is an op without a fake-tensor implementation"),
) if cls is not None)


# Methods that hand a tensor's values to Python (debug code's `t.cpu().numpy()`): a fake
# tensor has none to give, whatever the example input.
_VALUE_METHODS = frozenset({"numpy", "tolist", "item"})


def _construct(n: fx.Node, exc: BaseException) -> str:
    """What the model did that fake tensors cannot follow ("" for anything else)."""
    if n.op == "call_method" and n.target in _VALUE_METHODS:
        return "reads a tensor's value"
    return next((why for cls, why in _CONSTRUCTS if isinstance(exc, cls)), "")


def _said(n: fx.Node) -> str:
    """The call as the user wrote it, not the node's name (`add_3`): the graph is not yet
    normalized here (``ir/spelling.said`` names normalized nodes)."""
    if n.op == "call_module":
        return f"layer `{module_written(str(n.target))}`"
    if n.op == "call_method":
        return f"`.{n.target}()`"
    t = getattr(n.target, "_overloadpacket", n.target)  # an exported `add.Tensor`: `add`
    return f"`{getattr(t, '__name__', t)}`"


def _rejection(n: fx.Node, exc: BaseException, model: str) -> FusionAdvisorError:
    loc = parse_stack_trace(n.meta.get("stack_trace"))
    where = f" at {loc}" if loc else ""
    layer = _said(n)
    msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if construct := _construct(n, exc):
        line = f"{loc} (`{loc.code}`)" if loc and loc.code else str(loc or "")
        reason = (f"{layer} {construct}, which FX's shape propagation on fake tensors cannot "
                  f"compute ({type(exc).__name__}: {msg})")
        return ShapePropagationError(f"cannot capture {model} with FX{where and ' at ' + line}: "
                                     f"{reason}", line, reason, Fix.EXPORT)
    if isinstance(exc, (AttributeError, NameError)):  # a bug in forward, not the input
        return CaptureError(f"{layer}{where} failed while tracing shapes: "
                            f"{type(exc).__name__}: {msg} (fix that line)")
    return InputSpecError(f"the example input does not fit the model: {layer}{where} "
                          f"rejected it ({msg})", Fix.INPUTS)


def _arity(required: Sequence[fx.Node], placeholders: Sequence[fx.Node]) -> str:
    """`1 input`, or `1 to 2 inputs` when some have defaults."""
    if len(required) == len(placeholders):
        return counted(len(required), "input")
    return f"{len(required)} to {counted(len(placeholders), 'input')}"


def propagate_shapes(gm: fx.GraphModule, specs: Sequence[InputSpec]) -> fx.GraphModule:
    """Fill node.meta["val"] on every node by running `gm` on fake inputs."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    required = [n for n in placeholders if not n.args]  # args hold a default value
    if not (len(required) <= len(specs) <= len(placeholders)):
        names = ", ".join(n.name for n in placeholders)
        raise InputSpecError(
            f"{type(gm).__name__}.forward takes {_arity(required, placeholders)} ({names}) "
            f"but {len(specs)} {was(len(specs))} given", Fix.INPUT_COUNT)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    prop = _Prop(gm, mode)
    prop.snapshot = any(n.op == "call_method" and str(n.target).endswith("_")
                        for n in gm.graph.nodes)
    prop.extra_traceback = False  # else FX appends the graph and a traceback to our one line
    # Fake-tensor dispatch logs a traceback for an op that rejects its input; we report it.
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level, log.level = log.level, logging.CRITICAL
    try:
        prop.propagate_dont_convert_inputs(*fake_inputs(mode, specs, model_device(gm)))
    finally:
        log.setLevel(level)
    return gm
