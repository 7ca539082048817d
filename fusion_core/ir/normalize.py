"""Normalize a shape-propagated FX graph into a ``FusionGraph``.

Reads each FX node's target, args and ``meta["val"]``/``meta["stack_trace"]``;
writes one ``Node`` with the registry op, its class, tensor operands as
``Ref``s, the other arguments as params, its ``TensorMeta``, ``SourceLoc`` and
the module path it ran in (from ``meta["nn_module_stack"]``).
Works for both frontends: FX targets (torch/F/operator/methods) and aten
overloads resolve through the same registry.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from .data_dependent import READ_AT, UNSIZED, read_at, scalar_reads, unsized
from .device_moves import RUN_DEVICE, device_move
from .functionalize import out_of_place_overload
from .graph import (
    METADATA_ATTRS,
    READ_BY,
    SHAPE_ATTRS,
    SHAPE_METHODS,
    FusionGraph,
    Node,
    OpKind,
    Ref,
    SourceLoc,
    TensorMeta,
)
from .inline_blocks import block_source
from .inplace_writes import written_by
from .max_values import SPELLED
from .registry import training_spec
from .run_scalars import RUN_SCALAR, Apply, scalar_of
from .sizes import LITERAL, SIZED_VIEWS, SIZES, Dim, literal_sizes, read_sizes, refine
from .spelling import aten_call, namespaced
from .split_views import piece_of_split
from .targets import bind, lookup
from .trace import is_user_frame
from .upsample import OPAQUE_WHY, is_upsample, upsample_steps
from .view_params import (
    bounds_of_its_own_sizes,
    flatten,
    flatten_keep_slices,
    run_time_args,
    view_params,
)
from .views import INDEX_STEPS

_FRAME = re.compile(r'\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<func>\S+)')


def parse_stack_trace(text: str | None) -> SourceLoc | None:
    """The innermost user frame (not torch, not fusion_core) of an FX stack trace, with
    the outer user frames as its chain of callers."""
    if not text:
        return None
    lines = text.splitlines()
    found = None
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m and is_user_frame(m.group("file")):
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(
                lines[i + 1]) else ""
            found = SourceLoc(m.group("file"), int(m.group("line")), m.group("func"), code,
                              caller=found)
    return found


def module_path(nn_module_stack: Any) -> str:
    """`blocks.0.attn` from the innermost entry of an nn_module_stack (FX or dynamo form)."""
    if not nn_module_stack:
        return ""
    value = list(nn_module_stack.values())[-1]
    path = value[0] if isinstance(value, tuple) else str(value)
    # The model is `L['self']`, or `L['args'][0]` when a decorator wraps its forward.
    path = re.sub(r"^L\['(?:self|args|kwargs)'\](?:\[\d+\])?\.?|^L__self___?", "", str(path))
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']+)'\]", r".\1", path)
    # Dynamo sometimes spells the path through the module's dicts: L['self'].__dict__['_modules'].
    path = re.sub(r"(^|\.)(__dict__|_modules|_parameters|_buffers)(?=\.|$)", "", path)
    return path.strip(".")


# `x.reshape_as(y)` and its kin read `y` for its shape alone: no data edge, so a kernel
# holding the view need not take `y` (LeViT's norm layers end in `reshape_as`).
SHAPE_ONLY_OTHER = frozenset({"reshape_as", "view_as", "expand_as"})


# `h.shape`, `h.ndim`, `h.size(-1)`, `h.dim()`, `h.numel()` (export's `sym_size` where a dim
# is dynamic) read their tensor's shape alone: marked, analysis need not keep `h` for them.
_SHAPE_FUNCTIONS = frozenset({torch.ops.aten.sym_size.int, torch.ops.aten.sym_numel.default,
                              torch.numel})


def _shape_read(n: fx.Node) -> tuple[tuple[str, Any], ...]:
    """`(("shape_of", name),)` when `n` reads the shape of tensor `name` and nothing else;
    `(("dtype_of", name),)` for `name.dtype` (Hugging Face's `input_dtype = x.dtype`),
    `(("device_of", name),)` for `name.device` (`arange(n, device=h.device)`)."""
    first = n.args[0] if n.args else None
    if not isinstance(first, fx.Node) or not isinstance(first.meta.get("val"), torch.Tensor):
        return ()
    if n.op == "call_function" and n.target is getattr and len(n.args) == 2 \
            and n.args[1] in METADATA_ATTRS:
        # and who takes it: `to(h.dtype)` keeps no edge to the read (its dtype is a param)
        return ((f"{n.args[1]}_of", first.name), (READ_BY, tuple(u.name for u in n.users)))
    if n.op == "call_function" and n.target is getattr:
        shape = len(n.args) == 2 and n.args[1] in SHAPE_ATTRS
    elif n.op == "call_method":
        shape = n.target in SHAPE_METHODS
    else:
        shape = n.op == "call_function" and n.target in _SHAPE_FUNCTIONS
    rest = (n.args[1:], n.kwargs)
    return (("shape_of", first.name),) if shape and first not in flatten(rest) else ()


def _meta(n: fx.Node, val: Any) -> TensorMeta | None:
    if not isinstance(val, torch.Tensor):
        return None
    meta = TensorMeta.of(val)
    return replace(meta, device=n.meta[RUN_DEVICE]) if RUN_DEVICE in n.meta else meta


def _is_tensor_tuple(val: Any) -> bool:
    return isinstance(val, (tuple, list)) and bool(val) and all(
        isinstance(v, torch.Tensor) for v in val)


# Exported graphs call these; their overloads keep torch's spelling (`cumprod.default`),
# the one messages about exported graphs have always shown.
_TORCH_LIBRARIES = ("aten", "prims")


def _library_op(t: Any) -> str | None:
    """`mylib::scale` for a call to a library op outside torch's own (`torch.library.custom_op`),
    with `.overload` unless it is the default one; None for anything else. Its `__name__`,
    `scale.default`, names neither the library nor the op as the user registered it."""
    if isinstance(t, torch._ops.OpOverload):
        qualified, overload = t._schema.name, t._overloadname
    elif isinstance(t, torch._ops.OpOverloadPacket):
        qualified, overload = t._qualified_op_name, "default"
    else:
        return None
    if qualified.split("::", 1)[0] in _TORCH_LIBRARIES:
        return None
    return qualified if overload == "default" else f"{qualified}.{overload}"


def _target_name(n: fx.Node, source: SourceLoc | None) -> str:
    if n.op == "call_module":
        return f"self.{n.target}"
    if n.op == "call_method":
        return f".{n.target}()"
    if (spelled := n.meta.get(SPELLED)) is not None:  # `.max()` the capture made `amax`
        return aten_call(spelled, source.code if source else "")
    t = n.target
    if (library := _library_op(t)) is not None:
        return library
    if isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        # An exported aten op: its `__name__` (`cat.default`) is torch's overload, not
        # the call the user wrote on that line (`torch.cat`).
        packet = getattr(t, "_overloadpacket", t).__name__
        return aten_call(packet, source.code if source else "")
    mod = getattr(t, "__module__", "") or ""
    name = getattr(t, "__name__", str(t))
    prefix = {"torch.nn.functional": "F.", "torch._C._nn": "F.", "_operator": "operator.",
              "torch": "torch."}.get(mod, "")
    if mod.startswith("torch._C._") and namespaced(name) != name:
        return f"torch.{namespaced(name)}"  # `torch._C._special`'s `special_expit`
    return f"{prefix}{name}"


def _literal(v: Any) -> Any:
    """Params are stored hashable: lists become tuples, torch.Size a tuple."""
    if isinstance(v, (list, tuple, torch.Size)):
        return tuple(_literal(x) for x in v)
    return v


def _convert(n: fx.Node, module_types: dict[str, str], reads: dict[Any, fx.Node]) -> Node:
    val = n.meta.get("val")
    meta = _meta(n, val)
    source = parse_stack_trace(n.meta.get("stack_trace")) or block_source(n, parse_stack_trace)
    common = dict(name=n.name, meta=meta, source=source, target=_target_name(n, source),
                  copy_of=n.meta.get("fusion_copy_of", ""),
                  module=module_path(n.meta.get("nn_module_stack")))
    if n.op == "placeholder":
        return Node(op="input", kind=OpKind.INPUT, **common)
    if n.op == "get_attr":
        return Node(op="constant", kind=OpKind.CONSTANT, **common)
    if n.op == "output":
        refs = tuple(Ref(a.name) for a in flatten(n.args) if isinstance(a, fx.Node))
        return Node(op="output", kind=OpKind.OUTPUT, inputs=refs, **common)
    refs = tuple(Ref(a.name) for a in flatten((n.args, n.kwargs)) if isinstance(a, fx.Node))
    if unsized(val) or any(unsized(a.meta.get("val")) for a in flatten((n.args, n.kwargs))
                           if isinstance(a, fx.Node)):
        # Sized by a tensor's value (`x[:n]`, n from `.item()`), or reading such a value.
        where = read_at(n, reads, parse_stack_trace) if unsized(val) else None
        return Node(op=UNSIZED, kind=OpKind.OPAQUE, inputs=refs,
                    params=((READ_AT, where),) if where else (), **common)
    if n.op == "call_module":
        return Node(op=module_types.get(str(n.target), "opaque"), kind=OpKind.OPAQUE,
                    inputs=refs, **common)
    if "fusion_module" in n.meta:  # what remains of a module call a pass rewrote
        path, type_name = n.meta["fusion_module"]
        return Node(op=type_name, kind=OpKind.OPAQUE, inputs=refs,
                    **{**common, "target": f"self.{path}"})
    if meta is None and not _is_tensor_tuple(val):
        # Python values computed at trace time (x.shape, sizes): never computed in a kernel;
        # a number of sizes alone keeps its expression, for a kernel to take it as a scalar.
        scalar = scalar_of(n) if isinstance(val, (int, float)) else None
        params = _shape_read(n) + (((RUN_SCALAR, scalar),) if isinstance(scalar, Apply | Dim)
                                   else ())
        return Node(op="meta", kind=OpKind.OPAQUE, inputs=refs, params=params, **common)
    if is_upsample(n):  # a nearest upsample by integer factors is a view (``ir/upsample.py``)
        steps, why = upsample_steps(n)
        if steps is None:
            return Node(op="opaque", kind=OpKind.OPAQUE, inputs=refs,
                        params=((OPAQUE_WHY, why),), **common)
        op = "interpolate" if n.target is F.interpolate else n.target._overloadpacket.__name__
        return Node(op=op, kind=OpKind.VIEW, inputs=refs[:1], params=((INDEX_STEPS, steps),),
                    **common)
    key = ("method", n.target) if n.op == "call_method" else n.target
    inplace = False
    found = lookup(key)
    if found is None and n.op == "call_method" and str(n.target).endswith("_"):
        found, inplace = lookup(("method", str(n.target)[:-1])), True
    if found is None and (functional := out_of_place_overload(n.target)) is not None:
        found, inplace = lookup(functional), True  # `aten.relu_` that stayed in place
    if (move := device_move(n, found, common["target"], source)) is not None:  # `.to("cpu")`
        return Node(op="opaque", kind=OpKind.OPAQUE, inputs=refs,
                    params=((OPAQUE_WHY, move.why),), **{**common, "target": move.call})
    if found is None:
        return _unknown_call(n, refs, common)
    if found == "view":
        op = str(getattr(key, "__name__", n.target) if n.op != "call_method" else n.target)
        if isinstance(key, torch._ops.OpOverload):  # an aten view a pass put in (an alias)
            op = key._overloadpacket.__name__
        if op.split(".")[0] in SHAPE_ONLY_OTHER:
            refs = refs[:1]  # the other tensor lends its shape, already in the result's meta
        if (piece := piece_of_split(n)) is not None:
            # `x1, x2 = x.chunk(2, -1)`: a Narrow of the split's source (``ir/split_views.py``)
            return Node(op=op, kind=OpKind.VIEW, inputs=(Ref(piece[1].name),),
                        params=((INDEX_STEPS, piece[0]),), **common)
        params = view_params(n, op)
        if params and run_time_args(n):
            if bounds_of_its_own_sizes(n, dict(params)[INDEX_STEPS]):
                refs = refs[:1]  # `x[..., x.shape[-1] // 2:]`: no data edge (the docstring's)
            elif any(isinstance(a, slice) and any(isinstance(b, fx.Node) for b in flatten(a))
                     for a in flatten_keep_slices(n.args)):
                params = ()  # a slice bound of other sizes (`self.cos[:T]`): no steps
        sizes = read_sizes(n) if op in SIZED_VIEWS and params else None
        if sizes is not None:
            # Sizes read from shapes are no data edges (export records them as constants):
            # lowering checks they restate the steps (`codegen/run_sizes.py`).
            steps = refine(dict(params)[INDEX_STEPS], sizes, tuple(n.args[0].meta["val"].shape))
            params, refs = ((INDEX_STEPS, steps), (SIZES, sizes)), refs[:1]
        elif op in SIZED_VIEWS and params and (fixed := literal_sizes(n)) is not None:
            params += ((LITERAL, fixed),)  # launchers check the steps give these sizes
        return Node(op=op, kind=OpKind.VIEW, inputs=refs, params=params, **common)
    spec, sig = found
    try:
        values = bind(spec, sig, n.args, n.kwargs)
    except TypeError:
        return _unknown_call(n, refs, common)
    if spec.name == "to":
        values.pop("other", None)  # `type_as`: the other tensor only names the dtype
        values["dtype"] = next((a for a in flatten((n.args, n.kwargs))
                                if isinstance(a, torch.dtype)), meta.dtype if meta else None)
    training = values.get("training") is True and spec.training is not None
    if training and (computed := training_spec(spec, values)) is not None:
        spec, training = computed, False  # batch statistics: a reduction of its own
        values = {k: v for k, v in values.items() if k in spec.bind_signature.parameters}
    inputs = tuple(x for k in spec.operands for x in _operand(values.get(k)))
    params = tuple((k, _literal(v)) for k, v in values.items() if k not in spec.operands
                   # where a generator runs changes no value (`arange(n, device=x.device)`)
                   and not (spec.kind is OpKind.GENERATOR and k == "device"))
    if (late := next((k for k, v in params if isinstance(v, fx.Node)), None)) is not None:
        # A non-operand argument computed at run time (`2.0 ** x`): opaque, all edges kept.
        return _unknown_call(n, refs, common, f"its `{late}` is computed at run time, and "
                             "fusion-advisor lowers it with a constant only")
    kind = spec.kind
    if inplace or values.get("inplace") is True:
        kind = OpKind.INPLACE
    elif training:
        kind = OpKind.OPAQUE  # random, or it would update running statistics
        params += ((OPAQUE_WHY, "with training=True it is random or updates running "
                                "statistics, which fusion-advisor leaves to eager"),)
    return Node(op=spec.name + ("_" if kind is OpKind.INPLACE else ""), kind=kind,
                inputs=inputs, params=params, **common)


def _unknown_call(n: fx.Node, refs: tuple[Ref, ...], common: dict[str, Any], why: str = ""
                  ) -> Node:
    """A call kept whole: an in-place op where it writes its first operand (`a[:, 0] = 1.0`
    exports as `fill_`), so the legality checks see the write; else opaque (`why`: for a
    barrier, where the registry knows the op but not this call)."""
    if (written := written_by(n)) is not None:
        return Node(op=written, kind=OpKind.INPLACE, inputs=refs, **common)
    return Node(op="opaque", kind=OpKind.OPAQUE, inputs=refs,
                params=((OPAQUE_WHY, why),) if why else (), **common)


def _operand(v: Any) -> tuple[Any, ...]:
    """An operand's inputs: a tensor's Ref, a tensor list's (`torch.cat`) one Ref each in
    order, else the literal."""
    if isinstance(v, fx.Node):
        return (Ref(v.name),)
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, fx.Node) for x in v):
        return tuple(Ref(x.name) for x in v)
    return (_literal(v),)


def to_fusion_graph(gm: fx.GraphModule, name: str, frontend: str = "fx") -> FusionGraph:
    """Convert every node of a shape-propagated GraphModule, in graph order."""
    module_types = {qual: type(mod).__name__ for qual, mod in gm.named_modules()}
    reads = scalar_reads(gm)
    nodes = tuple(_convert(n, module_types, reads) for n in gm.graph.nodes)
    return FusionGraph(name=name, nodes=nodes, frontend=frontend)
