"""Match a call of the user's own module or helper that the cluster runs whole.

``callsite.py`` lifts such a call's ops to its line (`h = self.norm(h)` for a user
RMSNorm); here the call expression stands for all of them at once, as `self.ln(x)` stands
for the one `F.layer_norm` a library LayerNorm makes: the callee is checked by name, its
module's parameters become inputs by their attribute (`self.norm.weight`), and the one
tensor the ops read from outside the call must be the one argument the source passes.
"""

from __future__ import annotations

import ast
from typing import Any

import torch
import torch.fx as fx

from ..ir.bias_split import SPLIT_BIAS
from ..ir.spelling import called_as
from ..units import counted
from .callsite import LiftedCall
from .container import container_mismatch
from .from_end import same_layer
from .mismatch import ContainerMismatch, Mismatch
from .pyexpr import is_literal, module_chain, module_path
from .spelled_ops import op_names
from .unbiased import NotSpelled, bias_apart, functional_name, unbiased_call
from .unify import Unifier

_DROPOUTS = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d,
             torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout)

# Stochastic depth, which returns its input as it is in eval mode (EfficientNet's
# `result = self.stochastic_depth(result)` before its residual add); by library and name.
_DROP_PATHS = {("torchvision", "StochasticDepth"), ("timm", "DropPath")}


def _library_class(cls: type) -> tuple[str, str]:
    return cls.__module__.split(".")[0], cls.__name__


def _layer(add: fx.Node) -> str:
    """The module path of the layer whose bias the split-off `add` adds (`stem.0`)."""
    call = add.args[0]
    return (call.meta.get("fusion_module") or (module_path(call) or "",))[0]


class CallUnifier(Unifier):
    """A ``Unifier`` that knows the span's lifted calls (by the node each returns)."""

    def __init__(self, *args: Any, calls: tuple[LiftedCall, ...] = (),
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = {c.result: c for c in calls}
        self.inner = {n: c for c in calls for n in c.nodes if n != c.result}

    def match(self, expr: ast.expr, node: fx.Node, k: int) -> None:
        inner = self.passed_through(expr, node)
        if inner is not None:  # `self.drop(x)` stands for what `x` stands for
            self.match(inner, node, k)
            return
        if self.makes_split_bias(expr, node):
            self.match_split_bias(expr, node, k)
            return
        call = self.calls.get(node.name)
        if isinstance(expr, ast.Name) or (call is None and node.name not in self.inner):
            super().match(expr, node, k)
            return
        if call is None:  # a value the callee computes on the way, not what it returns
            raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} reads "
                           f"{self.said(node)}, which `{self.inner[node.name].function}` computes "
                           "on the way and does not return")
        self.seen.add(node.name)
        self.match_call_site(expr, node, k, call)

    def passed_through(self, expr: ast.expr, node: fx.Node) -> ast.expr | None:
        """The argument of `self.<child>(x)` when that child returns its input as it is (an
        `nn.Identity`, a dropout in eval mode: timm's `drop_block`, `aa`, torchvision's ViT
        dropouts) and made no op of the graph (`node` is not the child's); None for any
        other expression."""
        if not (isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords
                and not isinstance(expr.args[0], ast.Starred) and self.model is not None):
            return None
        chain = module_chain(expr.func)  # `self.drop(x)`, a Sequential's `self.seq[2](x)`
        if not (chain and chain[0] == self.self_name and len(chain) > 1):
            return None
        path = self.child_path(chain[1:])
        made_by = module_path(node) or ""
        if path is None or made_by == path or made_by.startswith(path + "."):
            return None  # the child's own op (an eval dropout FX keeps): matched as a call
        try:
            child = self.model.get_submodule(path)
        except AttributeError:
            return None
        # A dropout of any p, as FX keeps it (training=False) and fuses it: the kernels are
        # inference only, and refuse a backward.
        same = type(child) is torch.nn.Identity or isinstance(child, _DROPOUTS) or (
            _library_class(type(child)) in _DROP_PATHS and not child.training)
        return expr.args[0] if same else None

    def makes_split_bias(self, expr: ast.expr, node: fx.Node) -> bool:
        """`expr` is the call that `node`, a bias add the analysis split off (unbiased.py),
        came from: the layer's (`self.conv1(x)`, `self.stem[0](x)`) or the function's own
        (`F.conv2d(x, w, b)`), not a container's or a helper's that holds it."""
        if not (node.meta.get(SPLIT_BIAS) and node.name in self.cluster
                and isinstance(expr, ast.Call) and id(expr) not in self.hidden):
            return False
        chain = module_chain(expr.func)
        if self.through_variable(expr, node):
            return True
        if len(chain) > 1 and chain[0] == self.self_name:
            child = self.child_path(chain[1:])
            return child is not None and same_layer(self.model, child, _layer(node))
        return bool(chain) and chain[-1] in op_names(node.args[0])

    def through_variable(self, expr: ast.Call, node: fx.Node) -> bool:
        """`expr` calls the layer whose bias `node` adds through a variable (`conv(x)` of `for
        conv in self.convs:`, `self.convs[i](x)`), another layer on each pass: the text reads
        each pass's own weight and bias, as its call does."""
        path = _layer(node)
        loc = self.graph[node.name].source if (
            self.graph is not None and node.name in self.graph) else None
        return bool(path) and loc is not None and called_as(path, loc) == self.src.segment(
            expr.func)

    def match_split_bias(self, expr: ast.Call, node: fx.Node, k: int) -> None:
        """`self.conv1(x)` for the bias add the analysis split off that layer: the layer's
        call spelled without its bias is the kernel's argument, and the kernel reads the bias
        (`self.conv1.bias.reshape(-1, 1, 1)`) as the graph does."""
        call, bias = node.args  # bias-free call, then the bias: bias_split.put_in_place
        path = _layer(node)
        functional, needed = functional_name(self.src.tree, self.local_names)
        # The bias as the kernel reads it: the layer's parameter, reshaped to (C, 1, ..., 1)
        # for a convolution (conv_bias.py); `base` is the parameter itself.
        shape = bias.args[1] if bias.op != "get_attr" and len(bias.args) == 2 else None
        base = bias.args[0] if shape is not None else bias
        bias_text = self.attr_text(bias)
        spelled, why = "", None
        if self.model is None or (module_chain(expr.func)[:1] != [self.self_name]
                                  and not self.through_variable(expr, node)):
            ones = len(shape) - 1 if isinstance(shape, (tuple, list)) else 0
            why = ("an edit spells a call without its bias only for a layer called by name"
                   + bias_apart(expr, ones))  # `F.conv2d(x, w, b)`: the call's own bias
        elif len(expr.args) != 1 or expr.keywords or isinstance(expr.args[0], ast.Starred):
            why = "an edit spells a layer's call without its bias only on one argument"
        elif bias_text is None or not (isinstance(base, fx.Node) and base.op == "get_attr"
                                       and str(base.target) == f"{path}.bias"):
            why = "the kernel's bias is no attribute of the layer the source can name"
        else:
            func = self.src.segment(expr.func)
            try:
                spelled = unbiased_call(self.model.get_submodule(path), func,
                                        self.argument_text(expr.args[0], call.args[0], k),
                                        functional)
            except NotSpelled as e:
                why = str(e)
            # The bias as the call names its layer (`self.stem[-1].bias`, not `[1]`).
            attr = self.attr_text(base) or ""
            if bias_text.startswith(attr):
                bias_text = f"{func}.bias{bias_text[len(attr):]}"
        if why is not None:
            raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} adds the layer's "
                           "bias itself, which the analysis split off into this kernel (as "
                           f"Inductor does on the GPU): {why}")
        if needed is not None:
            self.imports.setdefault(needed)
        self.matched.add(node.name)
        self.seen |= {node.name, call.name, bias.name, base.name}
        self.inlined.add(call.name)  # computed by its argument expression, as written
        self.bind(call, spelled)
        self.bind(bias, bias_text)

    def argument_text(self, expr: ast.expr, node: fx.Node, k: int) -> str:
        """The text of the layer's argument `expr`, which holds `node`: another kernel's
        call where a part of the line is one (joint.py), else the source's own."""
        if id(expr) in self.hidden and self.hidden[id(expr)][0] == node.name:
            return self.hidden[id(expr)][2]
        if node.name in self.cluster or id(expr) in self.hidden:
            raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} is not what the "
                           "graph reads there")
        return self.outside_text(expr, node, k)

    def match_call_site(self, expr: ast.expr, node: fx.Node, k: int, call: LiftedCall) -> None:
        text = self.src.segment(expr)
        if not (isinstance(expr, ast.Call) and self.calls_callee(expr, node, call)):
            raise Mismatch(f"`{text}` at line {expr.lineno} is not the call of "
                           f"`{call.function}` that computes {self.said(node)}")
        if any(isinstance(a, ast.Starred) for a in expr.args) or any(
                kw.arg is None for kw in expr.keywords):
            raise Mismatch(f"`{text}` at line {expr.lineno} passes *args or **kwargs")
        outside = self.read_from_outside(call)
        attrs = {n.name: t for n in outside
                 if self.is_model_attr(n) and (t := self.attr_text(n)) is not None}
        tensors = self.one_value([n for n in outside if n.name not in attrs
                                  and isinstance(n.meta.get("val"), torch.Tensor)])
        # Literal arguments are built into the kernel; an attribute the callee reads is bound
        # by its own text, wherever it is passed from.
        rest = [a for a in (*expr.args, *(kw.value for kw in expr.keywords))
                if not is_literal(a) and self.src.segment(a) not in attrs.values()]
        if len(rest) != len(tensors) or len(tensors) > 1:
            raise Mismatch(f"`{text}` at line {expr.lineno} passes "
                           f"{counted(len(rest), 'value')} and its ops read "
                           f"{counted(len(tensors), 'tensor')} from outside the call; "
                           "only one argument lines up with its tensor for sure")
        for n in outside:
            self.seen.add(n.name)
            if n.name in attrs:
                self.bind(n, attrs[n.name])
        if tensors:
            self.match_value(rest[0], tensors[0], k)
        self.matched |= call.nodes
        self.seen |= call.nodes

    def one_value(self, tensors: list[fx.Node]) -> list[fx.Node]:
        """`tensors`, the copies a slice reads of one value (``analysis/slice_recompute.py``)
        and that value counted once, as the original: the call passes it once
        (`rotate_half(h)`, whose halves each read a copy of `h`)."""
        g = self.graph
        if g is None or len(tensors) < 2 or any(n.name not in g for n in tensors):
            return tensors
        values = {g[n.name].copy_of or n.name for n in tensors}
        if len(values) > 1 or not any(g[n.name].copy_of for n in tensors):
            return tensors
        return [self.fx_nodes[values.pop()]]

    def callee_mismatch(self, expr: ast.Call, node: fx.Node) -> Mismatch:
        """`self.stem(x)` for a layer of that container: says which of its layers run
        outside the cluster, in place of "is not `relu`"."""
        if self.model is not None:
            why = container_mismatch(self.model, self.src.path, self.self_name, self.self_path,
                                     expr, node, self.fx_nodes, self.cluster)
            if why is not None:
                return ContainerMismatch(why)
        return super().callee_mismatch(expr, node)

    def is_model_attr(self, n: fx.Node) -> bool:
        """A parameter or buffer the user's module holds: not a tensor the tracer stored on
        its graph module (`_tensor_constant0`, `lifted_tensor_0`: a module-level tensor a
        helper reads), which no `self.` text reaches."""
        base = n if n.op == "get_attr" else next(
            (a for a in n.all_input_nodes if a.op == "get_attr"), None)
        if base is None or self.model is None:
            return False
        try:
            obj: Any = self.model
            for part in str(base.target).split("."):
                obj = getattr(obj, part)
        except AttributeError:
            return False
        return isinstance(obj, torch.Tensor)

    def calls_callee(self, expr: ast.Call, node: fx.Node, call: LiftedCall) -> bool:
        """`self.norm(...)` names the module the call's ops ran in; `rms_norm(...)` or
        `self._norm(...)` the function itself."""
        chain = module_chain(expr.func)
        if chain and chain[0] == self.self_name and len(chain) > 1:
            want = self.child_path(chain[1:])
            where = module_path(node)
            if where is not None and want is not None and (
                    where == want or where.startswith(want + ".")):
                return True
        return call.name != "forward" and bool(chain) and chain[-1] == call.name

    def read_from_outside(self, call: LiftedCall) -> list[fx.Node]:
        """What the call's ops read that the call does not compute, in graph order."""
        seen: dict[str, fx.Node] = {}
        for n in self.fx_nodes.values():  # graph order
            if n.name in call.nodes:
                for i in n.all_input_nodes:
                    if i.name not in call.nodes:
                        seen.setdefault(i.name, i)
        return list(seen.values())
