"""The ``torch.export`` frontend: capture a model FX symbolic tracing cannot follow.

Reads an ``nn.Module`` and ``InputSpec``s; writes a ``torch.fx.GraphModule`` of aten
ops whose nodes carry ``meta["val"]`` (fake tensors, so a 16384x1024 input costs
nothing) and ``meta["stack_trace"]``. The graph is the *unlifted* program: parameters
and buffers are ``get_attr`` nodes (normalized to CONSTANT exactly as on the FX side)
and the module runs on the user's inputs alone, like the FX frontend's. Grad-mode and
disabled autocast blocks, which export wraps in one opaque call, are inlined first
(``inline_blocks.py``), so the tidying below sees their ops too. Ops that
return a tuple whose other results nobody reads (``native_layer_norm``…) are
rewritten to their single-result form so the registry sees one value per node.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import operator
import re
import warnings
from collections.abc import Sequence
from dataclasses import replace

import torch
import torch.fx as fx
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ..errors import CaptureError, Fix, InputSpecError
from ..units import counted
from .graph import FusionGraph, OpKind
from .inline_blocks import inline_blocks
from .module_state import kept_as_it_was
from .shapes import InputSpec, check_product_dtypes, fake_inputs, model_device
from .trace import TRACE_THROUGH, _one_line, _where

aten = torch.ops.aten
# Copying the unlifted module (validation does) trips a torch-internal pytree deprecation.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)",
                        category=FutureWarning)


def _bn_args(args: tuple) -> tuple:
    x, w, b, mean, var, momentum, eps = args
    return (x, w, b, mean, var, False, momentum, eps, False)


# Tuple-result op -> (single-result op, how its args map), used when only result 0 is read.
SINGLE_RESULT = {
    aten.native_layer_norm.default: (aten.layer_norm.default, lambda a: a),
    aten.native_dropout.default: (aten.dropout.default, lambda a: a),
    aten._native_batch_norm_legit_no_training.default: (aten.batch_norm.default, _bn_args),
}


def export_graph(model: nn.Module, specs: Sequence[InputSpec]) -> fx.GraphModule:
    """`torch.export.export(model, fake inputs, strict=False)`, unlifted and tidied."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    args = tuple(fake_inputs(mode, specs, model_device(model)))
    _check_arity(model, args)
    try:
        # On failure torch prints the partial graph to stderr and logs a warning; the
        # CaptureError below is the one line the user sees (--debug has the rest).
        # torch.__trace: structured-trace records (empty DEBUG lines in pytest's log capture).
        # A forward that stores a value on itself would keep a fake tensor there.
        with contextlib.redirect_stderr(io.StringIO()), _quiet("torch.fx.experimental"), \
                _quiet("torch.__trace"), _whole_user_stacks(), kept_as_it_was(model):
            program = torch.export.export(model, args, strict=False)
    except Exception as e:  # noqa: BLE001 - export raises many types for untraceable code
        fix = unknown_output_fix(model, e)
        raise CaptureError(f"torch.export failed on {type(model).__name__}.forward"
                           f"{_where(e)}: {fix or _one_line(e)}") from e
    gm = program.module()
    check_product_dtypes(gm, type(model).__name__)  # fake kernels let float16 @ float32 pass
    inline_blocks(gm)  # first: the tidying below then sees the blocks' ops too
    _drop_guards(gm)
    _single_results(gm.graph)
    gm.recompile()
    return gm


# torch's pytree message for a result it cannot flatten (torch 2.4 to 2.13 spell it so).
_UNKNOWN_OUTPUT = re.compile(r"Found <class '([\w.]+)'> in output, which is not a known type")


def unknown_output_fix(model: nn.Module, exc: BaseException | None) -> str | None:
    """What to change when forward returns an object torch.export cannot flatten (a Hugging
    Face `DynamicCache`, a class of the user's); None for any other failure. The class is
    named without the module the loader gave the user's file (`fusion_model_net.Box`)."""
    for _ in range(8):  # export may wrap the error it met: follow a few causes
        if exc is None:
            return None
        found = _UNKNOWN_OUTPUT.search(str(exc))
        if found:
            module, _, cls = found.group(1).rpartition(".")
            hf = (" (a Hugging Face model returns its key/value cache unless its config has "
                  "`use_cache=False`)" if module.startswith("transformers.") else "")
            return (f"{type(model).__name__}.forward returns a `{cls}`, which torch.export "
                    f"cannot flatten: return tensors, or tuples, lists and dicts of them{hf}")
        exc = exc.__cause__
    return None


@contextlib.contextmanager
def _whole_user_stacks():
    """Record stack traces from the first `forward` inwards, as FX does.

    Export's tracer keeps only frames named `forward`, so an op in a helper (a lambda,
    `rotate_half`, transformers' `apply_rotary_pos_emb`) would point at the call in
    `forward` instead of its own line. Private API: without it, export's traces stand.
    """
    tracer = getattr(getattr(torch.fx, "proxy", None), "TracerBase", None)
    original = getattr(tracer, "_filter_traceback_frames", None)
    if original is None:
        yield
        return

    def all_frames(self, summary):
        forward_only = getattr(self, "_record_forward_stack_traces_only", False)
        self._record_forward_stack_traces_only = False
        try:
            return original(self, summary)
        finally:
            self._record_forward_stack_traces_only = forward_only

    tracer._filter_traceback_frames = all_frames
    try:
        yield
    finally:
        tracer._filter_traceback_frames = original


@contextlib.contextmanager
def _quiet(logger: str):
    log = logging.getLogger(logger)
    level, log.level = log.level, logging.CRITICAL
    try:
        yield
    finally:
        log.setLevel(level)


def _check_arity(model: nn.Module, args: tuple) -> None:
    try:
        inspect.signature(model.forward).bind(*args)
    except TypeError as e:
        raise InputSpecError(
            f"{type(model).__name__}.forward does not take {counted(len(args), 'input')} ({e})",
            Fix.INPUT_COUNT) from e


# Run-time checks export inserts (dtype/shape asserts): they read values but produce
# nothing, and would otherwise count as outside consumers in the fan-out check.
ASSERTS = tuple(op for op in (getattr(aten, name, None) for name in (
    "_assert_tensor_metadata", "_assert_scalar", "_assert_async", "sym_constrain_range",
    "sym_constrain_range_for_size")) if op is not None)


def _drop_guards(gm: fx.GraphModule) -> None:
    """Drop the `_guards_fn` input-shape check and the assert ops: not dataflow."""
    for n in reversed(list(gm.graph.nodes)):
        guard = n.op == "call_module" and str(n.target).startswith("_guards")
        check = n.op == "call_function" and getattr(n.target, "overloadpacket", None) in ASSERTS
        if (guard or check) and not n.users:
            gm.graph.erase_node(n)


def _single_results(graph: fx.Graph) -> None:
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in SINGLE_RESULT:
            continue
        users = list(n.users)
        if not users or any(u.target is not operator.getitem or u.args[1] != 0 for u in users):
            continue  # another result is read (or none): leave the tuple op opaque
        target, remap = SINGLE_RESULT[n.target]
        with graph.inserting_before(n):
            single = graph.call_function(target, remap(tuple(n.args)), dict(n.kwargs))
        single.meta.update(n.meta)
        single.meta["val"] = users[0].meta.get("val")
        for u in users:
            u.replace_all_uses_with(single)
            graph.erase_node(u)
        graph.erase_node(n)



def label_modules(graph: FusionGraph, gm: fx.GraphModule) -> FusionGraph:
    """Name opaque ops after the library layer that made them (`self.proj1`, `Linear`),
    views after their aten packet, and `rsub` as the `sub` the user wrote.

    Export records the module stack instead of keeping `call_module` nodes; an op whose
    innermost module is a torch.nn layer we do not trace through gets that layer's
    path and class, as the FX frontend shows it.
    """
    fx_nodes = {n.name: n for n in gm.graph.nodes}
    nodes = []
    for node in graph.nodes:
        stack = fx_nodes[node.name].meta.get("nn_module_stack") if node.name in fx_nodes else None
        if node.kind is OpKind.VIEW:  # `transpose.int` -> `transpose`, as FX names it
            node = replace(node, op=node.op.split(".")[0])
        elif node.op == "rsub":  # `1.0 - x` arrives as rsub(x, 1.0); FX sees sub(1.0, x)
            node = replace(node, op="sub", inputs=node.inputs[::-1])
        elif node.kind is OpKind.OPAQUE and stack:
            path, type_name = list(stack.values())[-1]
            cls = _nn_class(type_name)
            if path and cls is not None and not issubclass(cls, TRACE_THROUGH):
                node = replace(node, op=cls.__name__, target=f"self.{path}")
        nodes.append(node)
    return FusionGraph(name=graph.name, nodes=tuple(nodes), frontend=graph.frontend)


def _nn_class(type_name: object) -> type | None:
    """The torch.nn class a module-stack entry names (a string or a class), else None."""
    if isinstance(type_name, type):
        return type_name if type_name.__module__.startswith("torch.nn.") else None
    text = str(type_name)
    if not text.startswith("torch.nn.modules."):
        return None
    return getattr(nn, text.rsplit(".", 1)[-1], None)
