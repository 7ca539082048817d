"""The op registry: every op the analyzer promises resolves from each spelling with its class.

Each case traces a one-op function through the real pipeline, so the test covers the
registry table and the FX normalization that consults it.
"""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from analysis_helpers import Fn, result_node, run

from fusion_core.ir.graph import OpKind
from fusion_core.ir.registry import SPECS
from fusion_core.ir.targets import TARGETS, lookup
from fusion_core.pipeline import analyze

U, B, R = OpKind.POINTWISE_UNARY, OpKind.POINTWISE_BINARY, OpKind.REDUCTION
VIEW, INPLACE, OPAQUE = OpKind.VIEW, OpKind.INPLACE, OpKind.OPAQUE

# (case id, function of x (4, 8) float32, expected op, expected kind)
POINTWISE = [
    ("torch.add", lambda x: torch.add(x, 1.0), "add", B),
    ("operator.add", lambda x: x + x, "add", B),
    ("radd", lambda x: 1.0 + x, "add", B),
    ("method.add", lambda x: x.add(2.0), "add", B),
    ("torch.sub", lambda x: torch.sub(x, x), "sub", B),
    ("operator.sub", lambda x: x - 1.0, "sub", B),
    ("rsub scalar", lambda x: 2.0 - x, "sub", B),
    ("method.sub", lambda x: x.sub(1.0), "sub", B),
    ("torch.mul", lambda x: torch.mul(x, 3.0), "mul", B),
    ("operator.mul", lambda x: x * 2.0, "mul", B),
    ("rmul", lambda x: 2.0 * x, "mul", B),
    ("method.mul", lambda x: x.mul(x), "mul", B),
    ("torch.div", lambda x: torch.div(x, 2.0), "div", B),
    ("operator.truediv", lambda x: x / 2.0, "div", B),
    ("rtruediv scalar", lambda x: 1.0 / x, "div", B),
    ("method.div", lambda x: x.div(2.0), "div", B),
    ("torch.true_divide", lambda x: torch.true_divide(x, 2.0), "div", B),
    ("torch.neg", lambda x: torch.neg(x), "neg", U),
    ("operator.neg", lambda x: -x, "neg", U),
    ("method.neg", lambda x: x.neg(), "neg", U),
    ("torch.abs", lambda x: torch.abs(x), "abs", U),
    ("method.abs", lambda x: x.abs(), "abs", U),
    ("torch.exp", lambda x: torch.exp(x), "exp", U),
    ("method.exp", lambda x: x.exp(), "exp", U),
    ("torch.log", lambda x: torch.log(x), "log", U),
    ("method.log", lambda x: x.log(), "log", U),
    ("torch.sqrt", lambda x: torch.sqrt(x), "sqrt", U),
    ("method.sqrt", lambda x: x.sqrt(), "sqrt", U),
    ("torch.rsqrt", lambda x: torch.rsqrt(x), "rsqrt", U),
    ("method.rsqrt", lambda x: x.rsqrt(), "rsqrt", U),
    ("torch.reciprocal", lambda x: torch.reciprocal(x), "reciprocal", U),
    ("method.reciprocal", lambda x: x.reciprocal(), "reciprocal", U),
    ("operator.pow", lambda x: x ** 2, "pow", U),
    ("torch.pow", lambda x: torch.pow(x, 0.5), "pow", U),
    ("method.pow", lambda x: x.pow(3.0), "pow", U),
    ("torch.sigmoid", lambda x: torch.sigmoid(x), "sigmoid", U),
    ("F.sigmoid", lambda x: F.sigmoid(x), "sigmoid", U),
    ("method.sigmoid", lambda x: x.sigmoid(), "sigmoid", U),
    ("torch.tanh", lambda x: torch.tanh(x), "tanh", U),
    ("F.tanh", lambda x: F.tanh(x), "tanh", U),
    ("method.tanh", lambda x: x.tanh(), "tanh", U),
    ("torch.relu", lambda x: torch.relu(x), "relu", U),
    ("F.relu", lambda x: F.relu(x), "relu", U),
    ("method.relu", lambda x: x.relu(), "relu", U),
    ("F.gelu exact", lambda x: F.gelu(x), "gelu", U),
    ("F.gelu tanh", lambda x: F.gelu(x, approximate="tanh"), "gelu", U),
    ("F.silu", lambda x: F.silu(x), "silu", U),
    ("F.leaky_relu", lambda x: F.leaky_relu(x, 0.2), "leaky_relu", U),
    ("F.elu", lambda x: F.elu(x), "elu", U),
    ("F.hardtanh", lambda x: F.hardtanh(x, -2.0, 2.0), "clamp", U),
    ("F.relu6", lambda x: F.relu6(x), "clamp", U),
    ("torch.clamp", lambda x: torch.clamp(x, -1.0, 1.0), "clamp", U),
    ("method.clamp", lambda x: x.clamp(min=0.0), "clamp", U),
    ("torch.clip", lambda x: torch.clip(x, max=1.0), "clamp", U),
    ("torch.maximum", lambda x: torch.maximum(x, x * 2.0), "maximum", B),
    ("method.maximum", lambda x: x.maximum(x * 2.0), "maximum", B),
    ("torch.minimum", lambda x: torch.minimum(x, x * 2.0), "minimum", B),
    ("torch.where", lambda x: torch.where(x > 0, x, 0.0), "where", B),
    ("method.where", lambda x: x.where(x > 0, 0.0), "where", B),
    ("method.masked_fill", lambda x: x.masked_fill(x > 0, float("-inf")), "masked_fill", B),
    ("torch.masked_fill", lambda x: torch.masked_fill(x, x > 0, 0.0), "masked_fill", B),
    ("F.dropout eval", lambda x: F.dropout(x, 0.1, training=False), "dropout", U),
    ("method.float", lambda x: (x * 2.0).float(), "to", U),
    ("method.half", lambda x: x.half(), "to", U),
    ("method.to dtype", lambda x: x.to(torch.float16), "to", U),
    ("method.to kwarg", lambda x: x.to(dtype=torch.bfloat16), "to", U),
]

REDUCTIONS = [
    ("F.softmax", lambda x: F.softmax(x, dim=-1), "softmax", R),
    ("torch.softmax", lambda x: torch.softmax(x, -1), "softmax", R),
    ("method.softmax", lambda x: x.softmax(-1), "softmax", R),
    ("F.log_softmax", lambda x: F.log_softmax(x, dim=-1), "log_softmax", R),
    ("torch.log_softmax", lambda x: torch.log_softmax(x, -1), "log_softmax", R),
    ("method.log_softmax", lambda x: x.log_softmax(-1), "log_softmax", R),
    ("F.layer_norm", lambda x: F.layer_norm(x, (8,)), "layer_norm", R),
    ("torch.sum", lambda x: torch.sum(x, dim=-1), "sum", R),
    ("method.sum", lambda x: x.sum(-1, keepdim=True), "sum", R),
    ("torch.mean", lambda x: torch.mean(x, -1), "mean", R),
    ("method.mean", lambda x: x.mean(dim=1), "mean", R),
    ("torch.amax", lambda x: torch.amax(x, -1), "amax", R),
    ("method.amax", lambda x: x.amax(dim=-1), "amax", R),
    ("torch.amin", lambda x: torch.amin(x, -1), "amin", R),
    ("method.amin", lambda x: x.amin(-1), "amin", R),
]

# Known but never computed in a kernel: they feed the aliasing check, never "opaque".
VIEWS_AND_INPLACE = [
    ("method.view", lambda x: x.view(32), VIEW),
    ("method.reshape", lambda x: x.reshape(8, 4), VIEW),
    ("torch.reshape", lambda x: torch.reshape(x, (2, 16)), VIEW),
    ("method.transpose", lambda x: x.transpose(0, 1), VIEW),
    ("torch.transpose", lambda x: torch.transpose(x, 0, 1), VIEW),
    ("method.permute", lambda x: x.permute(1, 0), VIEW),
    ("method.t", lambda x: x.t(), VIEW),
    ("method.unsqueeze", lambda x: x.unsqueeze(0), VIEW),
    ("torch.flatten", lambda x: torch.flatten(x), VIEW),
    ("method.expand", lambda x: x[:, :1].expand(4, 8), VIEW),
    ("method.contiguous", lambda x: x.contiguous(), VIEW),
    ("getitem int", lambda x: x[0], VIEW),
    ("getitem slice", lambda x: x[:, 2:6], VIEW),
    # In place on the model's input: kept in place (a fresh intermediate is rewritten
    # out of place by ir/functionalize.py, see tests/test_inplace.py).
    ("method.add_", lambda x: x.add_(1.0), INPLACE),
    ("method.mul_", lambda x: x.mul_(3.0), INPLACE),
    ("F.relu inplace", lambda x: F.relu(x, inplace=True), INPLACE),
]


@pytest.mark.parametrize("case", POINTWISE + REDUCTIONS, ids=lambda c: c[0])
def test_spelling_resolves_to_op_and_class(case):
    _, fn, op, kind = case
    node = result_node(run(fn).graph)
    assert (node.op, node.kind) == (op, kind)


@pytest.mark.parametrize("case", VIEWS_AND_INPLACE, ids=lambda c: c[0])
def test_views_and_inplace_are_known_not_opaque(case):
    _, fn, kind = case
    node = result_node(run(fn).graph)
    assert node.kind is kind


@pytest.mark.parametrize("module, op, kind", [
    (nn.ReLU(), "relu", U), (nn.GELU(), "gelu", U), (nn.GELU(approximate="tanh"), "gelu", U),
    (nn.SiLU(), "silu", U), (nn.Sigmoid(), "sigmoid", U), (nn.Tanh(), "tanh", U),
    (nn.LeakyReLU(0.1), "leaky_relu", U), (nn.ELU(), "elu", U), (nn.Hardtanh(), "clamp", U),
    (nn.ReLU6(), "clamp", U), (nn.Dropout(0.2), "dropout", U), (nn.LayerNorm(8), "layer_norm", R),
    (nn.Softmax(dim=-1), "softmax", R), (nn.LogSoftmax(dim=-1), "log_softmax", R),
    (nn.ReLU(inplace=True), "relu", U),  # it overwrites a fresh value: rewritten out of place
], ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else str(v))
def test_traced_through_modules_become_registry_ops(module, op, kind):
    a = analyze(nn.Sequential(nn.Linear(8, 8), module), (4, 8))
    node = result_node(a.graph)
    assert (node.op, node.kind) == (op, kind)
    assert not node.target.startswith("self.")  # inlined into its function, not a module call


def test_identity_module_is_traced_away():
    a = analyze(nn.Sequential(nn.Linear(8, 8), nn.Identity(), nn.ReLU()), (4, 8))
    assert [n.op for n in a.graph.compute_nodes] == ["Linear", "relu"]


def test_library_modules_stay_opaque():
    a = analyze(nn.Sequential(nn.Linear(8, 8), nn.Conv1d(4, 4, 1)), (4, 8))
    assert [(n.op, n.kind) for n in a.graph.compute_nodes] == [
        ("Linear", OPAQUE), ("Conv1d", OPAQUE)]


def test_reversed_scalar_forms_keep_operand_order():
    assert result_node(run(lambda x: 1.0 / x).graph).inputs[0] == 1.0
    assert result_node(run(lambda x: 2.0 - x).graph).inputs[0] == 2.0


def test_cast_records_target_dtype():
    assert result_node(run(lambda x: x.to(torch.float16)).graph).param("dtype") == torch.float16
    assert result_node(run(lambda x: x.half().float()).graph).param("dtype") == torch.float32


def test_dropout_in_eval_is_identity_and_in_training_opaque():
    eval_node = result_node(run(lambda x: F.dropout(x, 0.5, training=False)).graph)
    assert eval_node.kind is U and not SPECS[eval_node.op].moves_data
    train_node = result_node(run(lambda x: F.dropout(x, 0.5, training=True)).graph)
    assert train_node.kind is OPAQUE


def test_dropout_module_in_train_mode_model_is_analyzed_in_eval():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train()
    node = result_node(analyze(model, (4, 8)).graph)
    assert (node.op, node.kind) == ("dropout", U)
    assert not model.training


def test_scalar_base_pow_is_opaque_and_keeps_its_edge():
    g = run(lambda x: 2.0 ** x).graph
    node = result_node(g)
    assert node.kind is OPAQUE
    assert node.refs == ("x",)  # the tensor exponent is still a graph edge


def test_unknown_function_is_opaque():
    node = result_node(run(lambda x: torch.cumprod(x, dim=-1)).graph)
    assert node.kind is OPAQUE


@pytest.mark.parametrize("target, name", [
    (torch.add, "add"), (operator.add, "add"), (("method", "add"), "add"),
    (operator.truediv, "div"), (torch.clamp_min, "clamp"), (F.hardtanh, "clamp"),
    (torch.softmax, "softmax"), (F.layer_norm, "layer_norm"), (("method", "float"), "to"),
])
def test_lookup_table(target, name):
    found = lookup(target)
    assert found is not None and found != "view"
    assert found[0].name == name


def test_every_target_maps_to_a_spec_or_view():
    for target, (name, _) in TARGETS.items():
        assert name == "view" or name in SPECS, target


def test_every_pointwise_and_reduction_spec_has_a_lowering():
    missing = [s.name for s in SPECS.values() if s.kind.is_compute and s.lower is None]
    assert missing == []


def test_module_wrapper_is_transparent():
    # Sanity check of the helper: the wrapped function leaves no module call behind.
    assert [n.op for n in analyze(Fn(torch.exp), (2, 2)).graph.compute_nodes] == ["exp"]
