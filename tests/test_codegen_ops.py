"""Every op in the registry: its lowering matches eager PyTorch under Triton's interpreter.

CASES maps each registry op to small models whose only cluster contains it; a new
op added to the registry fails `test_every_registry_op_has_a_case` until it gets one.
"""

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import Lambda, check_model

from fusion_core.ir.registry import SPECS

R, C = 4, 40  # rows, and a non-power-of-two row width


def f32(*shape):
    return torch.randn(*shape or (R, C))


def ints(*shape):
    return torch.randint(0, 3, shape or (R, C))


def case(fn, *inputs, **params):
    return (fn, inputs, params)


CASES = {
    "add": [case(lambda m, x, y: (x + y) * 2, f32(), f32()),
            case(lambda m, x, y: torch.add(x, y, alpha=2) - 1, f32(), f32()),
            # two bools: torch's add is a logical or (True + True is True), not 1-bit math
            case(lambda m, x, y: ((x > 0) + (y > 0)).float() * 2.0, f32(), f32())],
    "mul": [case(lambda m, x, y: x * y + 1, f32(), f32()),
            case(lambda m, x, y: ((x > 0) * (y > 0)).float() * 2.0, f32(), f32())],
    "sub": [case(lambda m, x, y: torch.sub(x, y, alpha=0.5) * 2, f32(), f32()),
            case(lambda m, x: (x - 1.5) * 3, f32())],
    "rsub": [case(lambda m, x, y: torch.rsub(x, y) * 2, f32(), f32()),
             case(lambda m, x: torch.rsub(x, 2.0) * 3, f32())],
    "div": [case(lambda m, x, y: x / y * 2, f32(), f32()),
            case(lambda m, x: x / 3.0 + 1, f32()),
            case(lambda m, x: 2.0 / x + 1, f32()),
            # rounding modes: Python's signs where Triton's // truncates (test_rounding_ops.py)
            case(lambda m, x, y: torch.div(x * 7, y, rounding_mode="floor") * 2, f32(), f32()),
            case(lambda m, a: torch.div(a - 1, -2, rounding_mode="trunc") + 1, ints())],
    "floor_divide": [case(lambda m, x, y: (x * 7) // y + 1, f32(), f32()),
                     case(lambda m, a: torch.floor_divide(a - 1, -2) * 2, ints())],
    "remainder": [case(lambda m, x, y: (x * 7) % y + 1, f32(), f32()),
                  case(lambda m, a: torch.remainder(a - 1, -2) * 2, ints())],
    "maximum": [case(lambda m, x, y: torch.maximum(x, y) * 2, f32(), f32())],
    "minimum": [case(lambda m, x, y: torch.minimum(x * 2, y), f32(), f32())],
    "where": [case(lambda m, x, y: torch.where(x > y, x, y * 2), f32(), f32())],
    "masked_fill": [case(lambda m, x: (x * 2).masked_fill(m.mask, -1.5), f32(),
                         mask=torch.rand(R, C) > 0.5)],
    "eq": [case(lambda m, a, b: (a + 1) == b, ints(), ints())],
    "ne": [case(lambda m, a, b: (a * 2) != b, ints(), ints())],
    "lt": [case(lambda m, x, y: (x * 2) < y, f32(), f32())],
    "le": [case(lambda m, a, b: (a + 1) <= b, ints(), ints())],
    "gt": [case(lambda m, x: torch.sigmoid(x) > 0.5, f32())],
    "ge": [case(lambda m, a, b: (a - 1) >= b, ints(), ints())],
    "neg": [case(lambda m, x: -x * 2, f32())],
    "abs": [case(lambda m, x: x.abs() + 1, f32())],
    "exp": [case(lambda m, x: torch.exp(x) * 2, f32())],
    "log": [case(lambda m, x: torch.log(x.abs()), f32())],
    "sqrt": [case(lambda m, x: torch.sqrt(x.abs()), f32())],
    "rsqrt": [case(lambda m, x: torch.rsqrt(x.abs()), f32())],
    "reciprocal": [case(lambda m, x: torch.reciprocal(x) + 1, f32())],
    "square": [case(lambda m, x: torch.square(x) - 1, f32())],
    "sin": [case(lambda m, x: torch.sin(x * 3), f32())],
    "cos": [case(lambda m, x: torch.cos(x * 3), f32())],
    "erf": [case(lambda m, x: torch.erf(x) * 2, f32())],
    "pow": [case(lambda m, x: (x * 2) ** 2, f32()),
            case(lambda m, x: x.abs() ** 1.5, f32()),
            case(lambda m, x: torch.pow(x.abs(), -0.5), f32()),
            case(lambda m, x: (x + 1) ** 3 + x.abs() ** 0.5 + x.abs() ** -1, f32())],
    "sigmoid": [case(lambda m, x: torch.sigmoid(x * 2), f32())],
    "tanh": [case(lambda m, x: torch.tanh(x * 2), f32())],
    "relu": [case(lambda m, x: F.relu(x) * 2, f32())],
    "gelu": [case(lambda m, x: F.gelu(x) * 2, f32()),
             case(lambda m, x: F.gelu(x * 2, approximate="tanh"), f32())],
    "silu": [case(lambda m, x: F.silu(x) + 1, f32())],
    "leaky_relu": [case(lambda m, x: F.leaky_relu(x, 0.2) * 2, f32())],
    "elu": [case(lambda m, x: F.elu(x, alpha=0.7) * 2, f32())],
    "clamp": [case(lambda m, x: torch.clamp(x * 2, -1.0, 0.5), f32()),
              case(lambda m, x: (x * 2).clamp(min=0.1), f32()),
              case(lambda m, x: F.hardtanh(x * 2), f32())],
    # x * 12 reaches past the threshold (20) and far below 0, where exp(x) is tiny
    "softplus": [case(lambda m, x: F.softplus(x * 12) + 1, f32()),
                 case(lambda m, x: F.softplus(x * 3, beta=2.0, threshold=4.0) * 2, f32())],
    # integers times 0.5: exact halves, which torch rounds to the even neighbour
    "round": [case(lambda m, a: torch.round(a * 0.5) - 1, torch.randint(-9, 9, (R, C))),
              case(lambda m, x: (x * 3).round() * 0.5, f32()),
              # an integer tensor rounds to itself in its own dtype (Triton's floor is
              # float-only: the kernel failed to compile)
              case(lambda m, a: torch.round(a * 3) + 1, torch.randint(-9, 9, (R, C))),
              case(lambda m, a: (a - 2).round() * 2, torch.randint(-9, 9, (R, C),
                                                                  dtype=torch.int32))],
    "hardsigmoid": [case(lambda m, x: F.hardsigmoid(x * 4), f32())],
    "hardswish": [case(lambda m, x: F.hardswish(x * 4), f32())],
    "logical_not": [case(lambda m, x: torch.logical_not(x > 0.2), f32()),
                    case(lambda m, a: torch.logical_not(a - 1), ints())],
    "bitwise_not": [case(lambda m, x: ~(x > 0.2), f32()),
                    case(lambda m, a: ~(a - 1), ints())],
    "to": [case(lambda m, x: (x * 3).half().float() - x * 3, f32()),
           case(lambda m, x: (x * 3).to(torch.int32) + 1, f32()),
           case(lambda m, x: (x * 2).bfloat16() + 1, f32()),
           # a comparison cast to bfloat16 (the interpreter failed on int1 to bfloat16)
           case(lambda m, x: (x > 0).to(torch.bfloat16) * x.bfloat16(), f32()),
           case(lambda m, a: a.float() * 0.5, ints())],
    "clone": [case(lambda m, x: (x * 2).clone() + 1, f32())],
    # `device=x.device` keeps FX from evaluating the call at trace time
    # the operands' pieces read masked from their own memory (tests/test_codegen_cat.py)
    "cat": [case(lambda m, x, y: torch.cat((x * 2, y.exp()), dim=-1) + 1, f32(), f32(R, 3))],
    "arange": [case(lambda m, x: x * torch.arange(C, device=x.device) + 1, f32()),
               case(lambda m, x: torch.arange(1.0, R + 0.5, 0.5, device=x.device)[::2, None]
                    - x, f32())],
    "dropout": [case(lambda m, x: F.dropout(x * 2, 0.3, training=False) + 1, f32())],
    "softmax": [case(lambda m, x: F.softmax(x * 2, dim=-1), f32())],
    "log_softmax": [case(lambda m, x: F.log_softmax(x * 2, dim=-1), f32())],
    "layer_norm": [case(lambda m, x: F.layer_norm(x * 2, (C,), m.w, m.b), f32(),
                        w=torch.randn(C), b=torch.randn(C)),
                   case(lambda m, x: F.layer_norm(x + 1, (C,)), f32())],
    "rms_norm": [case(lambda m, x: F.rms_norm(x * 2, (C,), m.w), f32(), w=torch.randn(C)),
                 case(lambda m, x: F.rms_norm(x + 1, (C,), eps=1e-6), f32())],
    "batch_norm": [case(lambda m, x: F.batch_norm(x * 2, m.mean, m.var, m.w, m.b, eps=1e-3),
                        f32(2, 3, 5), mean=torch.randn(3), var=torch.rand(3) + 0.5,
                        w=torch.randn(3), b=torch.randn(3)),
                   case(lambda m, x: F.batch_norm(x + 1, m.mean, m.var), f32(),
                        mean=torch.randn(C), var=torch.rand(C) + 0.5)],
    "sum": [case(lambda m, x: (x * 2).sum(-1), f32()),
            case(lambda m, x: (x * 2).sum(dim=-1, keepdim=True) + 1, f32()),
            case(lambda m, a: (a + 1).sum(-1), ints())],
    "mean": [case(lambda m, x: (x * 2).mean(-1, keepdim=True), f32()),
             case(lambda m, x: torch.mean(x.abs(), dim=-1) * 3, f32())],
    "amax": [case(lambda m, x: torch.amax(x * 2, dim=-1), f32()),
             case(lambda m, x: x - torch.amax(x * 2, dim=-1, keepdim=True), f32()),
             case(lambda m, a: torch.amax(a - 5, dim=-1), ints())],
    "amin": [case(lambda m, x: torch.amin(x * 2, dim=-1, keepdim=True) * 3, f32()),
             case(lambda m, a: torch.amin(a + 5, dim=-1), ints())],
    "cumsum": [case(lambda m, x: torch.cumsum(x * 2, dim=-1), f32()),
               case(lambda m, a: (a + 1).cumsum(-1), ints())],
    "var": [case(lambda m, x: (x * 2).var(-1, keepdim=True) + x, f32()),
            case(lambda m, x: torch.var(x + 1, dim=-1, correction=0), f32())],
    "std": [case(lambda m, x: (x * 2).std(-1) * 3, f32()),
            case(lambda m, x: torch.std(x - 1, -1, unbiased=False), f32())],
    "group_norm": [case(lambda m, x: F.group_norm(x * 2, 2, m.w, m.b), f32(2, 4, 3, 5),
                        w=torch.randn(4), b=torch.randn(4)),
                   case(lambda m, x: F.group_norm(x + 1, 4, eps=1e-3), f32(R, C))],
    "batch_norm_train": [case(lambda m, x: F.batch_norm(x * 2, None, None, m.w, m.b, True),
                              f32(2, 4, 3, 5), w=torch.randn(4), b=torch.randn(4)),
                         case(lambda m, x: F.batch_norm(x + 1, None, None, training=True,
                                                        eps=1e-3), f32(R, C))],
    "adaptive_avg_pool2d": [case(lambda m, x: F.adaptive_avg_pool2d(x * 2, 1), f32(2, 3, 4, 5)),
                            case(lambda m, x: F.adaptive_avg_pool2d(x.abs(), (1, 1)) + x,
                                 f32(2, 3, 4, 5))],
    "bitwise_and": [case(lambda m, x, y: (x > 0) & (y < 0.5), f32(), f32()),
                    case(lambda m, a, b: torch.bitwise_and(a + 1, b), ints(), ints())],
    "bitwise_or": [case(lambda m, x, y: (x > 0) | (y < 0.5), f32(), f32())],
    "bitwise_xor": [case(lambda m, x, y: (x > 0) ^ (y < 0.5), f32(), f32()),
                    case(lambda m, a, b: torch.bitwise_xor(a + 1, b), ints(), ints())],
    "logical_and": [case(lambda m, x, a: torch.logical_and(x > 0, a), f32(), ints())],
    "logical_or": [case(lambda m, x, a: torch.logical_or(x > 0, a - 1), f32(), ints())],
}

PARAMS = [pytest.param(op, i, id=f"{op}-{i}") for op, cases in CASES.items()
          for i in range(len(cases))]


def test_every_registry_op_has_a_case():
    assert set(CASES) == set(SPECS), {"untested": set(SPECS) - set(CASES),
                                     "unknown": set(CASES) - set(SPECS)}


@pytest.mark.parametrize("op,i", PARAMS)
def test_op_lowering_matches_eager(op, i, tmp_path):
    torch.manual_seed(i)
    fn, inputs, params = CASES[op][i]
    checked = check_model(Lambda(fn, **params), inputs, tmp_path, n_clusters=1)
    assert op in checked.analysis.clusters[0].ops, checked.analysis.clusters[0].chain
