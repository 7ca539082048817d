"""Every way a user (or ``torch.export``) spells an op, mapped to its spec in the registry.

Reads a call target -- a ``torch.*`` or ``torch.nn.functional.*`` function, an ``operator.*``,
a Tensor method (``("method", name)``) or an aten overload -- and the call's arguments;
returns the op's ``OpSpec`` with the signature that call form binds by (``lookup``: "view"
for a shape or aliasing op, None for one the registry does not know) and the arguments by
the spec's canonical names (``bind``). Both capture frontends classify through this table.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from .registry import SPECS, OpSpec, parse_signature

__all__ = ["TARGETS", "bind", "lookup"]

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
              "logical_and", "logical_or", "round", "remainder", "floor_divide"):
    _register(_name, ("method", _name), signature=None)
    if hasattr(torch, _name):
        _register(_name, getattr(torch, _name))
_register("add", operator.add)
_register("sub", operator.sub)
_register("mul", operator.mul)
_register("div", operator.truediv, torch.true_divide, ("method", "true_divide"))
_register("floor_divide", operator.floordiv)
_register("remainder", operator.mod)
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
    "floor_divide": ("floor_divide", "floor_divide.Scalar"),
    "remainder": ("remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor"),
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
    return spec, parse_signature(sig)


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
