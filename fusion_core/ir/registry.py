"""The op registry: one table that drives classification, lowering and cost.

Each ``OpSpec`` says, for one op, its class, its canonical signature (how to
bind any call form to named arguments), which arguments are operands, how it
lowers to a Triton expression, and whether eager moves data for it. The
``TARGETS`` table maps every way a user (or ``torch.export``) can spell the op
-- ``torch.*``, ``torch.nn.functional.*``, ``operator.*``, Tensor methods and
aten overloads -- to a spec, so both capture frontends classify the same way.
"""

from __future__ import annotations

import inspect
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .graph import OpKind
from .lowerings import (
    TL_TYPES,
    Lowering,
    arange_expr,
    batch_norm_expr,
    call,
    cast,
    cat_expr,
    clamp_expr,
    gelu_expr,
    infix,
    nan_max,
    nan_min,
    pow_expr,
    round_expr,
    softplus_expr,
    tanh_expr,
    with_alpha,
)
from .reductions import RULES, ReductionRule

__all__ = ["SPECS", "TARGETS", "TL_TYPES", "OpSpec", "bind", "lookup", "tanh_expr", "training_spec"]

UNARY, BINARY, REDUCTION = OpKind.POINTWISE_UNARY, OpKind.POINTWISE_BINARY, OpKind.REDUCTION


def _hardsigmoid(x: str) -> str:
    return nan_min(nan_max(f"{x} / 6.0 + 0.5", "0.0"), "1.0")
VIEW, OPAQUE, GENERATOR = OpKind.VIEW, OpKind.OPAQUE, OpKind.GENERATOR
CONCAT = OpKind.CONCAT

# Pointwise lowerings (and TL_TYPES, re-exported for codegen) live in lowerings.py.


@dataclass(frozen=True)
class OpSpec:
    name: str
    kind: OpKind
    signature: str  # canonical Python parameter list, first parameter is the input
    operands: tuple[str, ...] = ("input",)  # params that may be tensors
    lower: Lowering | ReductionRule | None = None  # pointwise expression, or reduction rule
    moves_data: bool = True  # False for ops eager implements as an alias (dropout in eval)
    # What a call with `training=True` is: "" (opaque: random, or it updates state), or the
    # name of the spec that computes it when none of the operands that spec lacks is given
    # (batch_norm on batch statistics, without running statistics to update).
    training: str | None = None

    @property
    def bind_signature(self) -> inspect.Signature:
        return _signature(self.signature)


def _signature(params: str) -> inspect.Signature:
    """A Signature from a parameter-list string (defaults may name `torch.` dtypes)."""
    if params not in _SIG_CACHE:
        scope: dict[str, Any] = {"inf": math.inf, "torch": torch}
        exec(f"def f({params}): pass", scope)  # noqa: S102 - our own literal strings
        _SIG_CACHE[params] = inspect.signature(scope["f"])
    return _SIG_CACHE[params]


_SIG_CACHE: dict[str, inspect.Signature] = {}


def _reduction(name: str, signature: str, operands: tuple[str, ...] = ("input",)) -> OpSpec:
    return OpSpec(name, REDUCTION, signature, operands, RULES[name])


_SPECS = [
    # --- pointwise binary (two or more operands; scalars allowed) ---
    OpSpec("add", BINARY, "input, other, *, alpha=1", ("input", "other"), with_alpha("+")),
    OpSpec("sub", BINARY, "input, other, *, alpha=1", ("input", "other"), with_alpha("-")),
    OpSpec("rsub", BINARY, "input, other, alpha=1", ("input", "other"),
           lambda a, p: with_alpha("-")((a[1], a[0]), p)),
    OpSpec("mul", BINARY, "input, other", ("input", "other"), infix("*")),
    OpSpec("div", BINARY, "input, other, *, rounding_mode=None", ("input", "other"),
           lambda a, p: None if p["rounding_mode"] else f"({a[0]} / {a[1]})"),
    OpSpec("maximum", BINARY, "input, other", ("input", "other"), lambda a, p: nan_max(*a)),
    OpSpec("minimum", BINARY, "input, other", ("input", "other"), lambda a, p: nan_min(*a)),
    OpSpec("where", BINARY, "condition, input, other", ("condition", "input", "other"),
           call("tl.where")),
    OpSpec("masked_fill", BINARY, "input, mask, value", ("input", "mask", "value"),
           lambda a, p: f"tl.where({a[1]}, {a[2]}, {a[0]})"),
    OpSpec("eq", BINARY, "input, other", ("input", "other"), infix("==")),
    # On bool masks (attention masks combined with `&`) bitwise and logical agree.
    OpSpec("bitwise_and", BINARY, "input, other", ("input", "other"), infix("&")),
    OpSpec("bitwise_or", BINARY, "input, other", ("input", "other"), infix("|")),
    OpSpec("bitwise_xor", BINARY, "input, other", ("input", "other"), infix("^")),
    OpSpec("logical_and", BINARY, "input, other", ("input", "other"),
           lambda a, p: f"(({a[0]} != 0) & ({a[1]} != 0))"),
    OpSpec("logical_or", BINARY, "input, other", ("input", "other"),
           lambda a, p: f"(({a[0]} != 0) | ({a[1]} != 0))"),
    OpSpec("ne", BINARY, "input, other", ("input", "other"), infix("!=")),
    OpSpec("lt", BINARY, "input, other", ("input", "other"), infix("<")),
    OpSpec("le", BINARY, "input, other", ("input", "other"), infix("<=")),
    OpSpec("gt", BINARY, "input, other", ("input", "other"), infix(">")),
    OpSpec("ge", BINARY, "input, other", ("input", "other"), infix(">=")),
    # --- pointwise unary ---
    OpSpec("neg", UNARY, "input", lower=lambda a, p: f"(-{a[0]})"),
    OpSpec("abs", UNARY, "input", lower=call("tl.abs")),
    OpSpec("exp", UNARY, "input", lower=call("tl.exp")),
    OpSpec("log", UNARY, "input", lower=call("tl.log")),
    OpSpec("sqrt", UNARY, "input", lower=call("tl.sqrt")),
    OpSpec("rsqrt", UNARY, "input", lower=call("tl.math.rsqrt")),
    OpSpec("reciprocal", UNARY, "input", lower=lambda a, p: f"(1.0 / {a[0]})"),
    OpSpec("square", UNARY, "input", lower=lambda a, p: f"({a[0]} * {a[0]})"),
    OpSpec("sin", UNARY, "input", lower=call("tl.sin")),
    OpSpec("cos", UNARY, "input", lower=call("tl.cos")),
    OpSpec("erf", UNARY, "input", lower=call("tl.erf")),
    # The exponent is a param: a tensor (or scalar-base) pow is left opaque.
    OpSpec("pow", UNARY, "input, exponent", ("input",), pow_expr),
    OpSpec("sigmoid", UNARY, "input", lower=call("tl.sigmoid")),
    OpSpec("tanh", UNARY, "input", lower=lambda a, p: tanh_expr(a[0])),
    OpSpec("relu", UNARY, "input, inplace=False", lower=lambda a, p: nan_max(a[0], "0.0")),
    OpSpec("gelu", UNARY, "input, approximate='none'", lower=gelu_expr),
    OpSpec("silu", UNARY, "input, inplace=False",
           lower=lambda a, p: f"({a[0]} * tl.sigmoid({a[0]}))"),
    OpSpec("leaky_relu", UNARY, "input, negative_slope=0.01, inplace=False",
           lower=lambda a, p: f"tl.where({a[0]} > 0, {a[0]}, {a[0]} * {p['negative_slope']!r})"),
    OpSpec("elu", UNARY, "input, alpha=1.0, scale=1.0, input_scale=1.0, inplace=False",
           lower=lambda a, p: None if (p["scale"], p["input_scale"]) != (1.0, 1.0) else
           f"tl.where({a[0]} > 0, {a[0]}, {p['alpha']!r} * (tl.exp({a[0]}) - 1.0))"),
    OpSpec("softplus", UNARY, "input, beta=1.0, threshold=20.0", lower=softplus_expr),
    OpSpec("round", UNARY, "input, *, decimals=0", lower=round_expr),
    OpSpec("clamp", UNARY, "input, min=None, max=None", ("input", "min", "max"), clamp_expr),
    OpSpec("hardsigmoid", UNARY, "input, inplace=False",
           lower=lambda a, p: _hardsigmoid(a[0])),
    OpSpec("hardswish", UNARY, "input, inplace=False",
           lower=lambda a, p: f"({a[0]} * {_hardsigmoid(a[0])})"),
    OpSpec("logical_not", UNARY, "input", lower=lambda a, p: f"({a[0]} == 0)"),
    # `~x`: on a bool mask the same as logical_not, on integers two's complement.
    OpSpec("bitwise_not", UNARY, "input", lower=lambda a, p: f"(~{a[0]})"),
    # `dtype` is a torch.dtype; codegen computes in float32 and rounds through it.
    OpSpec("to", UNARY, "input, dtype=None", lower=lambda a, p: cast(a[0], p["dtype"])),
    OpSpec("clone", UNARY, "input, *, memory_format=None", lower=lambda a, p: a[0]),
    OpSpec("dropout", UNARY, "input, p=0.5, training=True, inplace=False", training="",
           lower=lambda a, p: a[0], moves_data=False),
    # --- generators: no operands; the lowering's one operand is the element's own index
    # (codegen computes it like an offset into a contiguous tensor of the value's shape) ---
    OpSpec("arange", GENERATOR, "start, end=None, step=1, *, dtype=None, layout=None, "
           "device=None, pin_memory=None, requires_grad=False", (), arange_expr),
    # --- concatenation: the operands are a list (normalize gives each its own Ref); codegen
    # reads each one through a piece of the result's index map (codegen/indexing.py) ---
    OpSpec("cat", CONCAT, "tensors, dim=0", ("tensors",), cat_expr),
    # --- reductions: their rules (combine, identity, finalize, accumulation dtype) are in
    # ir/reductions.py; codegen's reduction skeleton lowers them ---
    _reduction("softmax", "input, dim=None, _stacklevel=3, dtype=None"),
    _reduction("log_softmax", "input, dim=None, _stacklevel=3, dtype=None"),
    _reduction("layer_norm", "input, normalized_shape, weight=None, bias=None, eps=1e-05",
               ("input", "weight", "bias")),
    _reduction("rms_norm", "input, normalized_shape, weight=None, eps=None", ("input", "weight")),
    _reduction("sum", "input, dim=None, keepdim=False, *, dtype=None"),
    _reduction("mean", "input, dim=None, keepdim=False, *, dtype=None"),
    _reduction("amax", "input, dim=(), keepdim=False"),
    _reduction("amin", "input, dim=(), keepdim=False"),
    _reduction("cumsum", "input, dim, *, dtype=None"),  # a scan: keeps the row like softmax
    # `unbiased` (old spelling) or `correction` (new): ir/reductions.py's `correction` reads both
    _reduction("var", "input, dim=None, unbiased=None, keepdim=False, *, correction=None"),
    _reduction("std", "input, dim=None, unbiased=None, keepdim=False, *, correction=None"),
    # weight/bias are per channel: ir/channels.py reshapes them to (C, 1, ..., 1) first
    _reduction("group_norm", "input, num_groups, weight=None, bias=None, eps=1e-05",
               ("input", "weight", "bias")),
    _reduction("adaptive_avg_pool2d", "input, output_size"),  # to 1x1: a mean over (H, W)
    # --- pointwise with per-channel operands (eval mode); the channel broadcast along
    # dim 1 is made explicit by ir/channels.py before any check reads shapes ---
    OpSpec("batch_norm", BINARY, "input, running_mean, running_var, weight=None, bias=None, "
           "training=False, momentum=0.1, eps=1e-05",
           ("input", "running_mean", "running_var", "weight", "bias"), batch_norm_expr,
           training="batch_norm_train"),
    # ir/channels.py writes a training-mode batch_norm without running statistics as this,
    # with weight and bias as (C, 1, ..., 1)
    _reduction("batch_norm_train", "input, weight=None, bias=None, eps=1e-05",
               ("input", "weight", "bias")),
]
SPECS: dict[str, OpSpec] = {s.name: s for s in _SPECS}

# Shape/aliasing ops: known, never computed in a kernel (the aliasing check drops them).
VIEW_METHODS = (
    "view", "reshape", "transpose", "permute", "flatten", "unflatten", "unsqueeze", "squeeze",
    "expand", "expand_as", "contiguous", "split", "chunk", "narrow", "t", "view_as", "unbind",
    "select", "movedim", "swapaxes", "as_strided", "detach", "reshape_as",
)
VIEW_FUNCTIONS = (
    torch.reshape, torch.transpose, torch.permute, torch.flatten, torch.unsqueeze,
    torch.squeeze, torch.split, torch.chunk, torch.narrow, torch.t, torch.movedim,
    operator.getitem,
)

# Every spelling of every op, mapped to (spec name, signature override or None).
# Tensor methods are keyed ("method", name); their `self` binds to the first parameter.
TARGETS: dict[Any, tuple[str, str | None]] = {}


def _register(name: str, *targets: Any, signature: str | None = None) -> None:
    for t in targets:
        TARGETS[t] = (name, signature)


for _name in ("add", "sub", "mul", "div", "neg", "abs", "exp", "log", "sqrt", "rsqrt",
              "reciprocal", "square", "sin", "cos", "erf", "pow", "sigmoid", "tanh", "relu",
              "maximum", "minimum", "where", "masked_fill", "eq", "ne", "lt", "le", "gt", "ge",
              "clamp", "logical_not", "clone", "softmax", "log_softmax", "sum", "mean", "amax",
              "amin", "rsub", "cumsum", "var", "std", "bitwise_and", "bitwise_or", "bitwise_xor",
              "logical_and", "logical_or", "round"):
    _register(_name, ("method", _name), signature=None)
    if hasattr(torch, _name):
        _register(_name, getattr(torch, _name))
_register("add", operator.add)
_register("sub", operator.sub)
_register("mul", operator.mul)
_register("div", operator.truediv, torch.true_divide, ("method", "true_divide"))
_register("neg", operator.neg)
_register("pow", operator.pow)
_register("logical_not", torch.logical_not, ("method", "logical_not"))
_register("bitwise_not", operator.invert, torch.bitwise_not, ("method", "bitwise_not"))
_register("eq", operator.eq)
_register("bitwise_and", operator.and_)
_register("bitwise_or", operator.or_)
_register("bitwise_xor", operator.xor)
_register("ne", operator.ne)
_register("lt", operator.lt)
_register("le", operator.le)
_register("gt", operator.gt)
_register("ge", operator.ge)
_register("clamp", torch.clip, ("method", "clip"))
_register("clamp", torch.clamp_min, ("method", "clamp_min"), signature="input, min")
_register("clamp", torch.clamp_max, ("method", "clamp_max"), signature="input, max")
_register("clamp", F.hardtanh, signature="input, min_val=-1.0, max_val=1.0, inplace=False")
_register("clamp", F.relu6, signature="input, inplace=False, min=0.0, max=6.0")
for _name in ("relu", "gelu", "silu", "leaky_relu", "elu", "hardsigmoid", "hardswish",
              "softplus", "sigmoid", "tanh", "softmax", "log_softmax", "layer_norm", "rms_norm",
              "dropout",
              "group_norm", "adaptive_avg_pool2d"):
    if hasattr(F, _name):
        _register(_name, getattr(F, _name))
_register("softmax", torch.softmax, ("method", "softmax"), torch.special.softmax,
          signature="input, dim, dtype=None")
_register("log_softmax", torch.log_softmax, ("method", "log_softmax"),
          signature="input, dim, dtype=None")
_register("dropout", torch.dropout, signature="input, p, training")
_register("to", ("method", "to"), ("method", "type"))
_register("arange", torch.arange)
_register("cat", torch.cat, torch.concat)
# `x.type_as(y)`: a cast to y's dtype; normalize reads the dtype from the result.
_register("to", ("method", "type_as"), signature="input, other")
for _meth, _dtype in (("float", torch.float32), ("half", torch.float16),
                      ("bfloat16", torch.bfloat16), ("double", torch.float64),
                      ("int", torch.int32), ("long", torch.int64), ("bool", torch.bool)):
    _register("to", ("method", _meth), signature=f"input, dtype={_dtype}")

for _m in VIEW_METHODS:
    TARGETS[("method", _m)] = ("view", None)
for _f in VIEW_FUNCTIONS:
    TARGETS[_f] = ("view", None)


_register("batch_norm", F.batch_norm)

# --- aten overloads, as torch.export writes them. Signatures come from each overload's
# schema, with `self` bound to our first operand and `train` renamed to `training`. ---
ATEN_OPS: dict[str, tuple[str, ...]] = {
    "add": ("add.Tensor", "add.Scalar"), "sub": ("sub.Tensor", "sub.Scalar"),
    "rsub": ("rsub.Tensor", "rsub.Scalar"), "mul": ("mul.Tensor", "mul.Scalar"),
    "div": ("div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode"),
    "maximum": ("maximum",), "minimum": ("minimum",),
    "where": ("where.self", "where.ScalarOther", "where.ScalarSelf", "where.Scalar"),
    "masked_fill": ("masked_fill.Scalar", "masked_fill.Tensor"),
    **{c: (f"{c}.Tensor", f"{c}.Scalar") for c in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{u: (u,) for u in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "square",
                         "sin", "cos", "erf", "sigmoid", "tanh", "relu", "gelu", "silu",
                         "leaky_relu", "elu", "hardsigmoid", "hardswish", "logical_not",
                         "softplus")},
    "round": ("round", "round.decimals"),
    "pow": ("pow.Tensor_Scalar", "pow.Tensor_Tensor"),
    "clamp": ("clamp", "clamp.Tensor", "clamp_min", "clamp_max", "hardtanh"),
    "to": ("_to_copy", "to.dtype", "to.dtype_layout", "to.device"),
    "clone": ("clone",), "dropout": ("dropout", "feature_dropout"),
    "softmax": ("_softmax", "softmax.int"), "log_softmax": ("_log_softmax", "log_softmax.int"),
    "layer_norm": ("layer_norm",), "rms_norm": ("rms_norm",), "batch_norm": ("batch_norm",),
    "sum": ("sum.dim_IntList",), "mean": ("mean.dim",), "amax": ("amax",), "amin": ("amin",),
    "cumsum": ("cumsum.default",), "var": ("var.correction", "var.dim"),
    "std": ("std.correction", "std.dim"), "group_norm": ("group_norm",),
    "adaptive_avg_pool2d": ("adaptive_avg_pool2d", "_adaptive_avg_pool2d"),
    **{b: (f"{b}.Tensor", f"{b}.Scalar", f"__{b[8:]}__.Tensor", f"__{b[8:]}__.Scalar")
       for b in ("bitwise_and", "bitwise_or", "bitwise_xor")},
    "logical_and": ("logical_and",), "logical_or": ("logical_or",),
    "arange": ("arange.default", "arange.start", "arange.start_step"),
    "cat": ("cat.default",),
}
# Every overload of these packets is a view (or a tuple of views, read through getitem).
ATEN_VIEWS = (
    "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "expand_as", "permute",
    "transpose", "t", "unsqueeze", "squeeze", "slice", "select", "alias", "contiguous", "split",
    "split_with_sizes", "chunk", "unbind", "narrow", "flatten", "unflatten", "view_as",
    "movedim", "as_strided", "detach", "lift_fresh", "lift_fresh_copy", "reshape_as",
)
_ATEN_RENAME = {"self": "input", "train": "training"}


def _aten_signature(op: torch._ops.OpOverload) -> str:
    parts: list[str] = []
    for a in op._schema.arguments:
        if a.kwarg_only and "*" not in parts:
            parts.append("*")
        name = _ATEN_RENAME.get(a.name, a.name)
        parts.append(f"{name}={a.default_value!r}" if a.has_default_value() else name)
    return ", ".join(parts)


def _aten(qualified: str) -> torch._ops.OpOverload | None:
    packet, _, overload = qualified.partition(".")
    return getattr(getattr(torch.ops.aten, packet, None), overload or "default", None)


for _name, _overloads in ATEN_OPS.items():
    for _q in _overloads:
        _op = _aten(_q)
        if _op is not None:  # older torch may lack an overload
            _register(_name, _op, signature=_aten_signature(_op))
# Spellings whose aten schema lacks our parameters: the same overrides as F.relu6 and `~`.
for _q, _name, _sig in (("relu6", "clamp", "input, min=0.0, max=6.0"),
                        ("bitwise_not", "bitwise_not", "input"),
                        ("type_as", "to", "input, other")):
    if _aten(_q) is not None:
        _register(_name, _aten(_q), signature=_sig)
for _packet in ATEN_VIEWS:
    _p = getattr(torch.ops.aten, _packet, None)
    for _ov in _p.overloads() if _p is not None else ():
        TARGETS[getattr(_p, _ov)] = ("view", None)


def lookup(target: Any) -> tuple[OpSpec, inspect.Signature] | str | None:
    """Resolve a call target: (spec, signature), "view", or None when unknown."""
    hit = TARGETS.get(target)
    if hit is None:
        return None
    name, sig = hit
    if name == "view":
        return "view"
    spec = SPECS[name]
    if sig is None:
        return spec, spec.bind_signature
    return spec, _signature(sig)


def training_spec(spec: OpSpec, values: Mapping[str, Any]) -> OpSpec | None:
    """The spec a `training=True` call of `spec` is computed by, or None (opaque): the
    operands that spec lacks (batch_norm's running statistics) must not be given."""
    target = SPECS.get(spec.training or "")
    if target is None or any(values.get(k) is not None for k in spec.operands
                             if k not in target.operands):
        return None
    return target


def bind(spec: OpSpec, sig: inspect.Signature, args: tuple, kwargs: Mapping[str, Any]
         ) -> dict[str, Any]:
    """Bind a call to named params, renamed to the spec's canonical names."""
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    values = dict(bound.arguments)
    # Overrides rename into the canonical parameter names where they differ.
    for alias, canon in (("min_val", "min"), ("max_val", "max")):
        if alias in values:
            values[canon] = values.pop(alias)
    canonical = spec.bind_signature.parameters
    for key, param in canonical.items():
        if key not in values and param.default is not inspect.Parameter.empty:
            values[key] = param.default
    return values


