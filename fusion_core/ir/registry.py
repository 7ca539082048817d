"""The op registry: one table that drives classification, lowering and cost.

Each ``OpSpec`` says, for one op, its class, its canonical signature (how to
bind any call form to named arguments), which arguments are operands, how it
lowers to a Triton expression, and whether eager moves data for it. The
``TARGETS`` table (``targets.py``) maps every way a user (or ``torch.export``) can spell
the op -- ``torch.*``, ``torch.nn.functional.*``, ``operator.*``, Tensor methods and
aten overloads -- to a spec, so both capture frontends classify the same way.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

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
from .rounding import div_expr, floor_divide_expr, remainder_expr

__all__ = ["SPECS", "TL_TYPES", "OpSpec", "parse_signature", "tanh_expr", "training_spec"]

UNARY, BINARY, REDUCTION = OpKind.POINTWISE_UNARY, OpKind.POINTWISE_BINARY, OpKind.REDUCTION
VIEW, OPAQUE, GENERATOR = OpKind.VIEW, OpKind.OPAQUE, OpKind.GENERATOR
CONCAT = OpKind.CONCAT
WRAPS, CHECKS = "wraps", "checks"  # ``OpSpec.int_scalar``

# Pointwise lowerings (and TL_TYPES, re-exported for codegen) live in lowerings.py.


def _hardsigmoid(x: str) -> str:
    return nan_min(nan_max(f"{x} / 6.0 + 0.5", "0.0"), "1.0")


# ``OpSpec.refused``'s reading of a call: each operand a tensor's dtype, or the Python value
# itself (a number, None where absent), and the result's dtype
Refusal = Callable[[tuple[Any, ...], torch.dtype], str | None]


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
    # Parameters an eval-mode call's result does not depend on (batch_norm's `momentum` only
    # steers the train-mode update of its statistics): the kernel holds no value for them.
    unread: tuple[str, ...] = ()
    # Whether a call with these params jumps between values (rounds): a 16-bit operand
    # computed in float32 is read rounded to its dtype first, as eager holds it, or a value
    # a rounding away from a step lands on its other side (``codegen/half_reads.py``).
    steps: Callable[[Mapping[str, Any]], bool] | None = None
    # The operand eager refuses to be an integer 0 ("ZeroDivisionError"): validation draws
    # an integer input read there from 1 up (``validate/inputs.py``).
    divisor: str | None = None
    # How eager converts a Python integer operand to the integer dtype the op computes in
    # (``codegen/int_scalars.py``): WRAPS it to the dtype's width (int8's `x + 259` adds 3,
    # `x < 259` compares with 3), or CHECKS that it fits, raising where it does not
    # (`torch.where(c, x, 259)`, `masked_fill`, `clamp`); None: the op takes none.
    int_scalar: str | None = None
    # (operand, param, sign): eager multiplies the operand by the param times the sign in the
    # op's dtype (add's `other` by `alpha`, sub's by `-alpha`); an integer dtype checks that
    # product's factor as CHECKS does its number.
    scaled: tuple[str, str, int] | None = None
    # Whether eager (on the CPU) converts a Python number operand to the dtype of 16-bit
    # tensor operands before computing (the comparisons' `h > 0.1` compares with bfloat16's
    # 0.10009765625, remainder's `h % 0.7` is by float16's 0.7002); floor_divide and div's
    # rounding modes keep it in float32 (``codegen/half_reads.compared_scalars``).
    half_scalar: bool = False
    # What eager raises for, given the call (``Refusal``), as lowering says it where it leaves
    # the op to eager (`b - 1` of a bool `b`, `b.clamp(max=True)`, `b & 0.5`), or None
    refused: Refusal | None = None

    @property
    def bind_signature(self) -> inspect.Signature:
        return parse_signature(self.signature)


def parse_signature(params: str) -> inspect.Signature:
    """A Signature from a parameter-list string (defaults may name `torch.` dtypes)."""
    if params not in _SIG_CACHE:
        scope: dict[str, Any] = {"inf": math.inf, "torch": torch}
        exec(f"def f({params}): pass", scope)  # noqa: S102 - our own literal strings
        _SIG_CACHE[params] = inspect.signature(scope["f"])
    return _SIG_CACHE[params]


_SIG_CACHE: dict[str, inspect.Signature] = {}


def _always(params: Mapping[str, Any]) -> bool:
    return True


def _bool_subtracted(operands: tuple[Any, ...], result: torch.dtype) -> str | None:
    return ("subtracts a bool tensor: eager raises (\"Subtraction, the `-` operator, with a "
            "bool tensor is not supported\"); invert a mask with `~`, or convert it with "
            "`.int()` first") if any(o is torch.bool for o in operands) else None


def _bool_clamped(operands: tuple[Any, ...], result: torch.dtype) -> str | None:
    # eager clamps bools by one tensor bound only (a maximum or minimum of two bool tensors)
    tensors = [o for o in operands[1:] if isinstance(o, torch.dtype)]
    numbers = [o for o in operands[1:] if o is not None and not isinstance(o, torch.dtype)]
    return ("clamps a bool tensor by a number or by two bounds: eager raises (\"not "
            "implemented for 'Bool'\"); convert it with `.int()` first, or clamp by one bool "
            "tensor") if result is torch.bool and (numbers or len(tensors) == 2) else None


def _float_bitwise(operands: tuple[Any, ...], result: torch.dtype) -> str | None:
    return ("computes in floats: eager raises (\"not implemented for 'Float'\"); use integer "
            "or bool operands") if result.is_floating_point else None


def _wrapping(name: str, lower: Lowering, half_scalar: bool = False,
              refused: Refusal | None = None) -> OpSpec:
    """A two-operand op converting a Python integer to its dtype by wrapping (``int_scalar``)."""
    return OpSpec(name, BINARY, "input, other", ("input", "other"), lower, int_scalar=WRAPS,
                  half_scalar=half_scalar, refused=refused)


def _comparison(name: str, symbol: str) -> OpSpec:
    """A comparison: its Python number is converted to its operands' dtype (integer or
    16-bit float) first."""
    return _wrapping(name, infix(symbol), half_scalar=True)


def _reduction(name: str, signature: str, operands: tuple[str, ...] = ("input",)) -> OpSpec:
    return OpSpec(name, REDUCTION, signature, operands, RULES[name])


_SPECS = [
    # --- pointwise binary (two or more operands; scalars allowed) ---
    OpSpec("add", BINARY, "input, other, *, alpha=1", ("input", "other"), with_alpha("+"),
           int_scalar=WRAPS, scaled=("other", "alpha", 1)),
    OpSpec("sub", BINARY, "input, other, *, alpha=1", ("input", "other"), with_alpha("-"),
           int_scalar=WRAPS, scaled=("other", "alpha", -1), refused=_bool_subtracted),
    OpSpec("rsub", BINARY, "input, other, alpha=1", ("input", "other"),
           lambda a, p: with_alpha("-")((a[1], a[0]), p), int_scalar=WRAPS,
           scaled=("input", "alpha", -1), refused=_bool_subtracted),
    _wrapping("mul", infix("*")),
    # rounding modes, remainder and floor_divide round as torch does (ir/rounding.py)
    OpSpec("div", BINARY, "input, other, *, rounding_mode=None", ("input", "other"), div_expr,
           steps=lambda p: p.get("rounding_mode") is not None, divisor="other",
           int_scalar=WRAPS),
    OpSpec("floor_divide", BINARY, "input, other", ("input", "other"), floor_divide_expr,
           steps=_always, divisor="other", int_scalar=WRAPS),
    OpSpec("remainder", BINARY, "input, other", ("input", "other"), remainder_expr,
           steps=_always, divisor="other", int_scalar=WRAPS, half_scalar=True),
    OpSpec("maximum", BINARY, "input, other", ("input", "other"), lambda a, p: nan_max(*a)),
    OpSpec("minimum", BINARY, "input, other", ("input", "other"), lambda a, p: nan_min(*a)),
    OpSpec("where", BINARY, "condition, input, other", ("condition", "input", "other"),
           call("tl.where"), int_scalar=CHECKS),
    OpSpec("masked_fill", BINARY, "input, mask, value", ("input", "mask", "value"),
           lambda a, p: f"tl.where({a[1]}, {a[2]}, {a[0]})", int_scalar=CHECKS),
    _comparison("eq", "=="),
    # On bool masks (attention masks combined with `&`) bitwise and logical agree.
    _wrapping("bitwise_and", infix("&"), refused=_float_bitwise),
    _wrapping("bitwise_or", infix("|"), refused=_float_bitwise),
    _wrapping("bitwise_xor", infix("^"), refused=_float_bitwise),
    OpSpec("logical_and", BINARY, "input, other", ("input", "other"),
           lambda a, p: f"(({a[0]} != 0) & ({a[1]} != 0))"),
    OpSpec("logical_or", BINARY, "input, other", ("input", "other"),
           lambda a, p: f"(({a[0]} != 0) | ({a[1]} != 0))"),
    _comparison("ne", "!="),
    _comparison("lt", "<"),
    _comparison("le", "<="),
    _comparison("gt", ">"),
    _comparison("ge", ">="),
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
    OpSpec("round", UNARY, "input, *, decimals=0", lower=round_expr, steps=_always),
    OpSpec("clamp", UNARY, "input, min=None, max=None", ("input", "min", "max"), clamp_expr,
           int_scalar=CHECKS, refused=_bool_clamped),
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
           training="batch_norm_train", unread=("momentum",)),
    # ir/channels.py writes a training-mode batch_norm without running statistics as this,
    # with weight and bias as (C, 1, ..., 1)
    _reduction("batch_norm_train", "input, weight=None, bias=None, eps=1e-05",
               ("input", "weight", "bias")),
]
SPECS: dict[str, OpSpec] = {s.name: s for s in _SPECS}


def training_spec(spec: OpSpec, values: Mapping[str, Any]) -> OpSpec | None:
    """The spec a `training=True` call of `spec` is computed by, or None (opaque): the
    operands that spec lacks (batch_norm's running statistics) must not be given."""
    target = SPECS.get(spec.training or "")
    if target is None or any(values.get(k) is not None for k in spec.operands
                             if k not in target.operands):
        return None
    return target
