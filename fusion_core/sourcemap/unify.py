"""Match a run of source statements against the FX nodes of one cluster.

Reads the statements' AST and the shape-propagated FX graph; walks each
statement's expression and the FX node it must evaluate to side by side
(``x * 2.0`` against ``operator.mul(x, 2.0)``, ``self.drop(p)`` against the
``F.dropout`` a traced-through module made). Writes a ``Match``: for every
cluster input, the source expression that holds it at the top of the run
(``scores``, ``self.causal_mask[:T, :T]``, ``self.ln.weight``), or raises
``Mismatch`` with the reason in words.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from ..ir.graph import FusionGraph
from ..ir.max_values import SPELLED
from ..ir.sdpa_mask import ADDITIVE_MASK
from ..ir.spelling import said, said_all
from .augmented import augmented_value, is_augmented, rebinding_refused
from .callees import calls_method, computes_node, same_callee
from .eval_settled import chosen_branch
from .evaluated import args_computed
from .from_end import counted_from_end, resolved
from .held_numbers import is_number, module_at, other_is_the_input, root_forward
from .mismatch import Mismatch, Reentered, unused_statement, value_of, whole_value
from .pyexpr import (
    BINOPS,
    COMPAREOPS,
    RUNTIME_INDEX,
    UNARYOPS,
    calls_only_pure,
    constant_index,
    dtype_read,
    fx_nodes,
    is_literal,
    module_attr_text,
    operands_in_graph_order,
    values_call,
)
from .pysource import (
    SourceFile,
    Statement,
    is_plain_access,
    loaded_names,
    metadata_read_only,
    read_before,
    spliced,
    stored_names,
)
from .recomputed import CopyMismatch, copied_expr, same_value
from .skipped import skipped_ifs
from .spelled_ops import op_names, same_operator
from .traced_args import channel_reshape, keyword_values, unread_params


@dataclass(frozen=True)
class Match:
    inputs: tuple[tuple[str, str], ...]  # (FX node name, source expression)
    matched: frozenset[str]  # cluster nodes found in the statements
    # Source expressions (not literals) whose trace-time value the kernel holds as a constant.
    baked: tuple[tuple[str, Any], ...] = ()
    values: tuple[str | None, ...] = ()  # per statement: the FX node its value is
    # Inputs whose source expression computes them (`self.conv(x)`, `q @ k.T`): the rewrite
    # keeps that un-fused computation as the fused call's argument.
    inlined: frozenset[str] = frozenset()
    # Lines the file must import for the expressions (`import torch.nn.functional as F`).
    imports: tuple[str, ...] = ()
    # `training` flags (`self.training`) the inputs were read with as False: an argument
    # `a if not self.training else b` is `a` only where the edit's guard holds.
    assumes: frozenset[str] = frozenset()
    # Conditions of `if`s among the lines that the call skipped (skipped.py): the edit runs
    # the kernel only where each is False.
    skipped: tuple[ast.expr, ...] = ()


class Unifier:
    def __init__(self, src: SourceFile, stmts: list[Statement], cluster: set[str],
                 fx_nodes: dict[str, fx.Node], self_name: str, self_path: str,
                 local_names: frozenset[str] = frozenset(),
                 graph: FusionGraph | None = None,
                 hidden: Mapping[int, tuple[str, ast.expr, str]] | None = None,
                 model: torch.nn.Module | None = None,
                 from_end: frozenset[str] = frozenset(),
                 receiver: str | None = None) -> None:
        self.src, self.stmts, self.cluster = src, stmts, cluster
        # The method's receiver, whose `training` flags eval mode settles (eval_settled.py);
        # None in a plain function, whose `self` may be anything.
        self.receiver = receiver
        self.model = model  # the user's module, whose attributes `self.` text can reach
        # Sequentials (paths under `self`) the span indexes from the end (from_end.py).
        self.from_end = from_end
        # id(part) -> (node, part, text): a part another kernel's call replaces (joint.py),
        # read as that call's result; it reads nothing of the range any more.
        self.hidden = dict(hidden or {})
        self.graph = graph  # names the graph's values the user's way in messages
        self.local_names = local_names  # parameters and names the function assigns
        self.fx_nodes, self.self_name, self.self_path = fx_nodes, self_name, self_path
        self.values: list[str | None] = [None] * len(stmts)
        self.inputs: dict[str, str] = {}
        self.bound: dict[str, dict[str, None]] = {}  # every text an input was read as
        self.matched: set[str] = set()
        self.seen: set[str] = set()  # every node some expression stands for
        self.baked: dict[str, Any] = {}
        self.inlined: set[str] = set()
        self.imports: dict[str, None] = {}
        self.assumes: set[str] = set()
        self.queue: list[int] = []
        self.skipped = skipped_ifs(stmts, receiver, self.instance())

    def instance(self) -> torch.nn.Module | None:
        """The module whose call ran the lines, when known."""
        if self.model is None or self.self_path == "\0":
            return None
        try:
            return self.model.get_submodule(self.self_path)
        except AttributeError:
            return None

    def run(self, output: str, within: ast.expr | None = None,
            returned: tuple[tuple[ast.expr, str], ...] = ()) -> Match:
        """Match the run's value, or `within` (a part of it the rewrite replaces, keeping
        the code around), to `output`; or each (returned element, result) of `returned`."""
        last = len(self.stmts) - 1
        self.values[last] = output
        final = self.stmts[last].node
        if not returned:
            expr = within if within is not None else whole_value(final)
            returned = ((expr, output),)
        for expr, result in returned:
            self.match(expr, self.fx_nodes[result], last)
        while self.queue:  # earlier statements only: a name reads a line above its own
            k = self.queue.pop()
            node = self.stmts[k].node  # `out += identity` above the last line: its sum
            self.match(augmented_value(node) or value_of(node, last=False),
                       self.fx_nodes[self.values[k]], k)
        self.follow_aliases()
        for k, (st, v) in enumerate(zip(self.stmts, self.values, strict=True)):
            if v is None and k not in self.skipped:
                raise Mismatch(unused_statement(self.src, st))
        augmented = [k for k, st in enumerate(self.stmts[:-1]) if augmented_value(st.node)]
        if any(is_augmented(final, expr) for expr, _ in returned):
            augmented.append(last)
        for k in augmented:
            why = rebinding_refused(self.src, self.stmts[:k + 1], self.values,
                                    self.cluster) or self.promoted(k)
            if why is not None:
                raise Mismatch(why)
        return Match(tuple(self.inputs.items()), frozenset(self.matched),
                     tuple(self.baked.items()), tuple(self.values), frozenset(self.inlined),
                     tuple(self.imports), frozenset(self.assumes), tuple(self.skipped.values()))

    def promoted(self, k: int) -> str | None:
        """Why statement `k`, `out += identity`, is not its sum: the trace read it as
        `out + identity` (FX traces `+=` so), which promotes where the other operand's dtype
        is wider, where the in-place add keeps `out`'s dtype."""
        st = self.stmts[k].node
        assert isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name)
        j = self.assigned_before(k, st.target.id)
        if j is None or self.values[j] is None or self.values[k] is None:
            return None
        held, summed = (getattr(self.fx_nodes[v].meta.get("val"), "dtype", None)
                        for v in (self.values[j], self.values[k]))
        if held is None or held == summed:
            return None
        return (f"`{self.src.segment(st)}` (line {st.lineno}) keeps `{st.target.id}` "
                f"{str(held).removeprefix('torch.')} (an in-place op does not change a "
                f"tensor's dtype), where the trace computed {str(summed).removeprefix('torch.')}:"
                " the kernel would return that; convert the other operand first")

    def follow_aliases(self) -> None:
        """`residual = h` between the fused lines holds what `h` held there: the rewrite may
        bind it to that result (or drop it, when nothing reads it later)."""
        for k, st in enumerate(self.stmts):
            node = st.node
            if self.values[k] is not None or not (
                    isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Name)):
                continue
            j = self.assigned_before(k, node.value.id)
            if j is not None and self.values[j] is not None:
                self.values[k] = self.values[j]

    # -- expressions -------------------------------------------------------------------

    def assigned_before(self, k: int, name: str) -> int | None:
        for j in range(k - 1, -1, -1):
            if name in stored_names(self.stmts[j].node):
                return j
        return None

    def bind(self, node: fx.Node, text: str) -> None:
        self.inputs.setdefault(node.name, text)
        self.bound.setdefault(node.name, {})[text] = None  # aliased.py checks the others

    def match(self, expr: ast.expr, node: fx.Node, k: int) -> None:
        self.seen.add(node.name)
        if id(expr) in self.hidden:
            if self.hidden[id(expr)][0] != node.name:
                raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} is not "
                               "what the graph reads there")
            self.bind(node, self.hidden[id(expr)][2])
        elif isinstance(expr, ast.Name):
            self.match_name(expr, node, k)
        elif node.name not in self.cluster:
            self.match_outside(expr, node, k)
        elif node.meta.get(ADDITIVE_MASK) and node.args[0].name in self.cluster:
            # The additive mask the capture made of a boolean one (ir/sdpa_mask.py) is
            # computed where the mask is: the line making the mask calls the kernel making
            # both, and the attention calls reading it get the mask they would make of it.
            picked, mask = node.args[0], node.args[0].args[0]
            if dtypes := _other_conversions(mask, picked):
                every = sorted({str(node.meta["val"].dtype), *dtypes})
                raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} makes a "
                               f"boolean mask attention calls read with queries of "
                               f"different dtypes ({', '.join(every).replace('torch.', '')}): "
                               "one line can hand them only one additive mask")
            if others := [u.name for u in mask.users if u is not picked]:
                known = [n for n in others if self.graph is not None and n in self.graph]
                readers = said_all(self.graph, known) if known else "other code"
                them = "it" if len(others) == 1 else "them"
                raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} makes a "
                               f"boolean mask that is also read by {readers}: the edit would "
                               f"hand {them} the attention calls' additive mask instead")
            self.matched.update((node.name, picked.name))
            self.seen.add(picked.name)
            self.match(expr, mask, k)
        else:
            self.matched.add(node.name)
            self.match_op(expr, node, k)

    def match_name(self, expr: ast.Name, node: fx.Node, k: int) -> None:
        j = self.assigned_before(k, expr.id)
        if j is not None:
            if self.values[j] is None:
                self.values[j] = node.name
                self.queue.append(j)
            elif self.values[j] != node.name and not same_value(self.graph, self.cluster,
                                                                 self.values[j], node.name):
                raise Mismatch(f"`{expr.id}` at line {expr.lineno} does not hold what the "
                               "graph reads there")
            return
        if node.name in self.cluster and self.graph is not None and (
                self.graph[node.name].copy_of):  # the kernel recomputes what `expr` holds
            try:
                value = copied_expr(self.src, self.stmts, self.graph, expr, node.name)
            except CopyMismatch as e:
                raise Mismatch(str(e)) from e
            self.match(value, node, 0)  # its operands, read at the range's top
            return
        if node.name in self.cluster:
            raise Reentered(f"`{expr.id}` at line {expr.lineno} reads a value the cluster "
                            "computes itself (the lines run more than once, e.g. in a loop)")
        self.bind(node, expr.id)

    def match_outside(self, expr: ast.expr, node: fx.Node, k: int) -> None:
        if isinstance(expr, ast.IfExp) and (
                picked := chosen_branch(expr, self.receiver)) is not None:
            # timm's copy of BatchNorm's forward passes `self.running_mean if not
            # self.training or ... else None`: the fused call, run in eval mode only, reads
            # the branch eval mode takes (eval_settled.py)
            branch, flags = picked
            self.assumes.update(flags)
            self.match(branch, node, k)
            return
        text = self.outside_text(expr, node, k)
        if not is_plain_access(expr):  # evaluated once, as the fused call's argument
            self.inlined.add(node.name)
        elif not isinstance(expr, ast.Name) and (tail := channel_reshape(node)) is not None:
            # `bn.running_mean` passed to F.batch_norm: the kernel reads the statistics as the
            # capture laid them out to broadcast over the channels (ir/channels.py)
            text += tail
        self.bind(node, text)

    def outside_text(self, expr: ast.expr, node: fx.Node, k: int) -> str:
        """The text that computes `node` (outside the cluster) as the fused call's
        argument: `expr`, with other kernels' parts replaced by their calls."""
        text = self.src.segment(expr)
        plain = is_plain_access(expr)
        if not plain and not (self.computes(expr, node) and args_computed(
                expr, node, self.self_name, self.child_path, self.computes)):  # evaluated.py
            if isinstance(expr, ast.IfExp):
                raise Mismatch(f"`{text}` (line {expr.lineno}) chooses a kernel input by a "
                               "condition (`… if … else …`) that eval mode does not settle "
                               "(a method's `self.<layer>.training` flags, read before any "
                               "other test, are settled), which an edit does not keep as "
                               "the fused call's argument")
            raise Mismatch(f"line range also holds `{text}` (line {expr.lineno}), which is "
                           "not in the cluster")
        inner = [h for h in self.hidden.values() if any(n is h[1] for n in ast.walk(expr))]
        if inner:  # `self.mlp(<the other kernel's call>)`
            text = spliced(self.src, expr, [(part, call) for _, part, call in inner])
        names = loaded_names(expr, skip=[part for _, part, _ in inner])
        late = sorted(n for n in names if self.assigned_before(k, n) is not None)
        if late:
            raise Mismatch(f"input `{text}` at line {expr.lineno} reads `{late[0]}`, which "
                           "an earlier line of the range reassigns"
                           + read_before(metadata_read_only(expr, late[0])))
        return text

    def child_path(self, parts: list[str]) -> str | None:
        """The module path of `self.<parts>` in this module (`self.block[-1]`: its last
        layer's), None when there is no such layer."""
        return resolved(self.model, [*self.self_path.split("."), *parts])

    def spelled(self, target: Any) -> str:
        """A parameter's path, indexed from the end where the span spells its layer so."""
        return counted_from_end(self.model, self.self_path, str(target), self.from_end)

    def computes(self, expr: ast.expr, node: fx.Node) -> bool:
        """`expr`'s outermost operation is the one that made `node` (callees.py)."""
        return computes_node(expr, node, self.self_name, self.model, self.child_path)

    def match_value(self, expr: ast.expr, value: Any, k: int) -> None:
        dtype = dtype_read(value)
        if dtype is not None and value.name not in self.cluster and is_plain_access(expr) and (
                not any(self.assigned_before(k, n) is not None for n in loaded_names(expr))):
            # `input_dtype` (`= x.dtype` above the range) in `.to(input_dtype)`: the kernel
            # holds the dtype its cast was traced with, as it holds `self.eps`.
            self.seen.add(value.name)
            self.baked.setdefault(self.src.segment(expr), dtype)
        elif isinstance(expr, ast.IfExp) and (
                picked := chosen_branch(expr, self.receiver)) is not None:
            self.assumes.update(picked[1])  # `0.5 if self.training else 0.1`: eval's value
            self.match_value(picked[0], value, k)
        elif isinstance(value, fx.Node):
            self.match(expr, value, k)
        elif isinstance(value, (tuple, list)) and any(fx_nodes(value)):
            if not (isinstance(expr, (ast.Tuple, ast.List)) and len(expr.elts) == len(value)):
                raise Mismatch(f"cannot line up `{self.src.segment(expr)}` at line "
                               f"{expr.lineno} with the graph's arguments")
            for e, v in zip(expr.elts, value, strict=True):
                self.match_value(e, v, k)
        elif not is_literal(expr):
            text = self.src.segment(expr)
            if not calls_only_pure(expr):
                raise Mismatch(f"`{text}` at line {expr.lineno} calls a function the rewritten "
                               "line would no longer call (its value is built into the kernel)")
            if text != repr(value):  # `torch.float32` spells its own value: nothing to note
                self.baked.setdefault(text, value)

    def match_op(self, expr: ast.expr, node: fx.Node, k: int) -> None:
        if isinstance(expr, ast.BinOp) and same_operator(node, BINOPS.get(type(expr.op))):
            root = root_forward(self.src.scope_at(self.stmts[0].start), self.self_path)

            def number(e: ast.expr) -> bool:
                return self.holds_number(e, k) or other_is_the_input(expr, e, node, root)

            self.match_args(operands_in_graph_order(expr, node, number), node.args, k)
        elif isinstance(expr, ast.UnaryOp) and same_operator(node, UNARYOPS.get(type(expr.op))):
            self.match_args([expr.operand], node.args, k)
        elif (isinstance(expr, ast.Compare) and len(expr.ops) == 1
              and same_operator(node, COMPAREOPS.get(type(expr.ops[0])))):
            self.match_args([expr.left, expr.comparators[0]], node.args, k)
        elif isinstance(expr, ast.Call) and node.meta.get(SPELLED):
            # `x.max(1)` alone gives values and indices: the graph's amax is its `.values`
            raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} gives values "
                           f"and indices, where the graph reads {self.said(node)} alone")
        elif isinstance(expr, ast.Call):
            self.match_call(expr, node, k)
        elif node.meta.get(SPELLED) and (call := values_call(expr)) is not None:
            self.match_call(call, node, k)  # the values of a max the capture made `amax`
        elif (isinstance(expr, ast.Subscript) and node.op == "call_function"
              and node.target is operator.getitem):
            self.match_subscript(expr, node, k)
        else:
            raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} does not compute "
                           f"{self.said(node)} there")
        self.bind_leftovers(expr, node)

    def holds_number(self, expr: ast.expr, k: int) -> bool:
        """`expr` (in statement `k`) is a Python number, not a tensor (held_numbers.py); a name a
        line of the range above `k` sets is one where that line's value is."""
        if isinstance(expr, ast.Name) and (j := self.assigned_before(k, expr.id)) is not None:
            st = self.stmts[j].node
            return (isinstance(st, ast.Assign) and len(st.targets) == 1
                    and isinstance(st.targets[0], ast.Name) and self.holds_number(st.value, j))
        return is_number(expr, self.src.scope_at(self.stmts[0].start), self.src.tree,
                         self.self_name, module_at(self.model, self.self_path))

    def match_subscript(self, expr: ast.Subscript, node: fx.Node, k: int) -> None:
        """`h[:, None]` inside the cluster: a view the kernel makes, so its index must be
        spelled with constants alone, the very index the graph holds (`h[:, :n]` would
        bake the `n` of the traced call into the kernel)."""
        index = constant_index(expr.slice)
        if index is RUNTIME_INDEX or index != node.args[1]:
            raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} indexes with a "
                           "value read at run time; the kernel holds the one seen at analysis")
        self.match_value(expr.value, node.args[0], k)

    def match_args(self, exprs: list[ast.expr], values: tuple[Any, ...], k: int,
                   params: list[str] | None = None, unread: frozenset[str] = frozenset()
                   ) -> None:
        """Each expression against its traced value; one passed for a parameter the kernel
        does not read (`params[i]` in `unread`) only has to be dropped safely."""
        for i, (e, v) in enumerate(zip(exprs, values, strict=False)):
            if params is not None and i < len(params) and params[i] in unread and not any(
                    fx_nodes(v)):
                if not calls_only_pure(e):
                    raise Mismatch(f"`{self.src.segment(e)}` at line {e.lineno} calls a "
                                   "function the rewritten line would no longer call")
                continue
            self.match_value(e, v, k)

    def match_call(self, expr: ast.Call, node: fx.Node, k: int) -> None:
        func, args = expr.func, tuple(node.args)
        method = calls_method(func, node, self.self_name, self.local_names)  # callees.py
        if method and node.op in ("call_method", "call_function"):
            if func.attr not in op_names(node) or not args:
                raise self.callee_mismatch(expr, node)
            self.match_value(func.value, args[0], k)
            args = args[1:]
        elif node.op != "call_function" or not same_callee(func, node, self.self_name,
                                                           self.child_path):
            raise self.callee_mismatch(expr, node)
        if any(isinstance(a, ast.Starred) for a in expr.args) or any(
                kw.arg is None for kw in expr.keywords):
            raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} passes *args "
                           "or **kwargs")
        params, unread = unread_params(self.graph, node) if node.op == "call_function" else (
            None, frozenset())
        positional = expr.args[:len(args)]
        self.match_args(list(positional), args, k, params, unread)
        # F.* functions hand positional arguments past the tensor on as keywords: paired by
        # the parameter's name where the traced function says it (the capture's eval-mode
        # `batch_norm` keeps no `training`: by order, `training` met `momentum`), else in order.
        spilled = expr.args[len(args):]
        named = keyword_values(node, len(args), len(spilled))
        self.match_args(list(spilled), named if named is not None
                        else tuple(node.kwargs.values()), k,
                        params[len(args):] if params is not None and named is not None
                        else None, unread)
        for kw in expr.keywords:
            if kw.arg in node.kwargs:
                self.match_args([kw.value], (node.kwargs[kw.arg],), k, [kw.arg], unread)

    def said(self, node: fx.Node) -> str:
        """The graph's value as the user wrote it (`add` (line 61)), not its node name."""
        if self.graph is not None and node.name in self.graph:
            return said(self.graph, node.name)
        return f"`{getattr(node.target, '__name__', node.target)}`"  # a node added since

    def bind_leftovers(self, expr: ast.expr, node: fx.Node) -> None:
        """Operands the source does not spell out: a traced-through module's parameters."""
        for n in fx_nodes((node.args, node.kwargs)):
            if n.name in self.seen:
                continue
            text = self.attr_text(n)
            if text is None:
                raise Mismatch(f"`{self.src.segment(expr)}` at line {expr.lineno} reads "
                               f"{self.said(n)}, which has no expression in the source there")
            self.bind(n, text)

    def attr_text(self, n: fx.Node) -> str | None:
        """A module attribute (`self.ln.weight`), or one reshaped to broadcast against the
        activations as the capture does for BatchNorm (`self.bn.weight.reshape(-1, 1, 1)`)."""
        if n.op == "get_attr":
            return module_attr_text(self.self_name, self.self_path, self.spelled(n.target))
        reshape = n.target is torch.reshape or (n.op == "call_method" and n.target in (
            "reshape", "view"))
        if not reshape or len(n.args) != 2 or n.kwargs:
            return None
        base, shape = n.args
        if not (isinstance(base, fx.Node) and base.op == "get_attr" and isinstance(
                shape, (tuple, list)) and all(isinstance(d, int) for d in shape)):
            return None
        text = module_attr_text(self.self_name, self.self_path, self.spelled(base.target))
        if text is None:
            return None
        # One sized dim holds every element: `-1` there says the same for any size, so the
        # lines other calls run with other channel counts read the same text.
        sized = [i for i, d in enumerate(shape) if d != 1]
        dims = [-1 if len(sized) == 1 and i == sized[0] else d for i, d in enumerate(shape)]
        return f"{text}.reshape({', '.join(map(str, dims))})"

    def callee_mismatch(self, expr: ast.Call, node: fx.Node) -> Mismatch:
        callee, said_as = self.src.segment(expr.func), self.said(node)
        if said_as.startswith(f"`{callee}` ("):  # `blk(x)` of `for blk in self.blocks`
            return Mismatch(f"`{callee}(...)` at line {expr.lineno} calls {said_as} through a "
                            "variable, another module on each pass; an edit cannot name one "
                            "yet: move the loop's body into a block's `forward` the loop calls")
        return Mismatch(f"`{callee}(...)` at line {expr.lineno} is not {said_as}")


def _other_conversions(mask: fx.Node, picked: fx.Node) -> list[str]:
    """The dtypes of the other additive masks made of `mask` (``ir/sdpa_mask.py`` makes one
    per query dtype) besides the one `picked` starts."""
    return [str(c.meta["val"].dtype) for u in mask.users if u is not picked
            for c in u.users if c.meta.get(ADDITIVE_MASK) and "val" in c.meta]
