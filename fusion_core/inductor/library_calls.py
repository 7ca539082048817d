"""Our nodes computed by something other than a kernel Inductor generates.

Reads an ``Analysis``, one cluster's keys and coverage (from ``match.py``), Inductor's
kernels and ``LibraryCall``s; returns which of our nodes a library call computes and says so
in the user's words. A bias add our capture split off a convolution or Linear
(``meta["fusion_split_bias"]``) has no node of its own in Inductor's graph: its lowering adds
the bias on behalf of the convolution or matmul node, so that node, on the same key, stands
for it, in a generated kernel or a library call. A node a pattern rewrite replaced (the
attention block's scale and softmax, now inside
``_scaled_dot_product_flash_attention_for_cpu``) is computed inside that call.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..analysis.types import Cluster
from ..ir.bias_split import SPLIT_BIAS
from ..ir.normalize import module_path
from ..ir.sdpa_mask import ADDITIVE_MASK
from ..ir.spelling import said
from ..pipeline import Analysis
from .capture import InductorNode, LibraryCall
from .kernel_graph import ATTENTION_OPS, GEMM_OPS, compatible, norm_path
from .op_names import is_compute

Key = tuple[str, str, int]


def gemm_keys(nodes: tuple[InductorNode, ...]) -> set[Key]:
    """Keys of the convolutions and matmuls among a kernel's origins (their bias adds)."""
    return {(n.module, norm_path(n.file), n.line) for n in nodes
            if n.op in GEMM_OPS and n.line is not None}


def split_biases(analysis: Analysis, c: Cluster) -> set[str]:
    """The cluster's bias adds our capture split off a GEMM or convolution."""
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    return {name for name in c.nodes
            if name in fx_nodes and fx_nodes[name].meta.get(SPLIT_BIAS)}


def cover_split_biases(biases: set[str], keys: dict[str, tuple[Key | None, str]],
                        cover: dict[str, set[int]], gemm_keys: list[set[Key]]) -> None:
    """A split-off bias add no kernel computes by key: the kernels holding its convolution
    or matmul on a compatible key compute it (see the module docstring)."""
    for name in biases:
        key = keys.get(name, (None, ""))[0]
        if key is None or cover.get(name, True):
            continue
        cover[name] = {i for i, ks in enumerate(gemm_keys) if any(compatible(key, k) for k in ks)}


def additive_masks(analysis: Analysis, c: Cluster) -> dict[str, set[Key]]:
    """The cluster's additive attention mask our capture made of a boolean one
    (``ir/sdpa_mask.py``: its cast and the `where` it casts), with the keys of the attention
    calls reading it. Inductor converts the mask on those calls' behalf, in the kernel it
    fuses with the mask's ops: the calls' keys stand for it there, as a GEMM's key stands for
    its split-off bias add (`mask_keys`)."""
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    out: dict[str, set[Key]] = {}
    for name in c.nodes:
        fx = fx_nodes.get(name)
        if fx is None or not fx.meta.get(ADDITIVE_MASK):
            continue
        keys = {(module_path(fx_nodes[call].meta.get("nn_module_stack")),
                 norm_path(source.file), source.line)
                for call in fx.meta[ADDITIVE_MASK] if call in fx_nodes and call in analysis.graph
                and (source := analysis.graph[call].source) is not None}
        for made in (name, fx.args[0].name):
            if made in c.nodes:
                out[made] = keys
    return out


def mask_keys(ours: dict[str, tuple[frozenset[Key], str]], masks: dict[str, set[Key]],
              universe: set[Key]) -> dict[str, tuple[frozenset[Key], str]]:
    """`ours` (our nodes as the Inductor keys they stand for) with each additive mask node
    standing for the Inductor keys of its attention calls too (see `additive_masks`)."""
    out = dict(ours)
    for name, calls in masks.items():
        if name in out:
            keys, op = out[name]
            out[name] = (keys | {u for u in universe if any(compatible(k, u) for k in calls)},
                         op)
    return out


def _call_keys(call: LibraryCall) -> set[Key]:
    """Keys of the compute ops a library call stands for (a rewrite's scale and softmax)."""
    return {(n.module, norm_path(n.file), n.line) for n in call.computes if is_compute(n.op)}


def inside_calls(keys: dict[str, tuple[Key | None, str]], cover: dict[str, set[int]],
            biases: set[str], calls: list[LibraryCall]) -> dict[str, set[int]]:
    """The library calls computing each of our nodes no generated kernel computes."""
    by_op = [_call_keys(call) for call in calls]
    gemms = [gemm_keys(call.nodes) for call in calls]
    out: dict[str, set[int]] = {}
    for name, (key, _) in keys.items():
        if cover.get(name) or key is None:
            continue
        found = {j for j, ks in enumerate(by_op) if any(compatible(key, k) for k in ks)}
        if name in biases:
            found |= {j for j, ks in enumerate(gemms) if any(compatible(key, k) for k in ks)}
        if found:
            out[name] = found
    return out


def named(analysis: Analysis, names: Iterable[str]) -> str:
    """Our ops as the user wrote them (`add` (line 61)), each phrase once, not FX's node
    names (`add_3`, `dt_add_bias`)."""
    g = analysis.graph
    return ", ".join(dict.fromkeys(said(g, n) if n in g else f"`{n}`" for n in names))


def _call_words(call: LibraryCall) -> str:
    """Why Inductor computes our ops inside `call`, in a few words."""
    if not call.replaced:
        return "library call"
    if call.op.lstrip("_") in ATTENTION_OPS:
        return "attention pattern replaced"
    if call.epilogue:
        what = "convolution" if "conv" in call.op or any(
            "conv" in n.op for n in call.replaced) else "matrix product"
        return f"fused into the {what} call: an extern kernel's epilogue"
    return f"pattern `{call.pattern}` replaced" if call.pattern else "pattern replaced"


def inside_words(analysis: Analysis, inside: dict[str, set[int]],
                  calls: list[LibraryCall]) -> str:
    """`Inductor's `X` computes `mul` (line 3), `softmax` (line 4) (attention pattern
    replaced)`, per call."""
    parts = []
    for j in sorted(set().union(*inside.values())):
        names = named(analysis, (n for n, js in inside.items() if j in js))
        parts.append(f"Inductor's `{calls[j].op}` computes {names} ({_call_words(calls[j])})")
    return "; ".join(parts)
