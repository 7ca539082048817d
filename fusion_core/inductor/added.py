"""What an Inductor kernel computes beyond one cluster of ours, in the user's words.

Reads an ``Analysis``, one cluster's node names and keys, and one ``InductorKernel``; returns
our nodes outside the cluster whose work the kernel does, and why we leave each out.

The match compares clusters by the keys of *compute* ops, so ops we keep opaque (a
`F.interpolate`, a `.scatter()`; a `torch.cat` no cluster of ours holds) were invisible to
it: Inductor lowers them to index arithmetic and loads inside the consumer's kernel (a UNet
decoder's upsample and skip concatenation inside its GroupNorm; a MoE router's scatter
inside its sum and divide), and the cluster was called "same group". A kernel holds such an
op when one of its nodes, or a `cat` it writes its results into, sits on the op's (module,
file, line) key; where a key is the cluster's own too (one line doing both), only a node of
the same op name counts. Matrix products, convolutions and attention are left to the
epilogue and library-call rules (``explain.py``, ``library_calls.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..ir.concat import concat_problem
from ..ir.graph import OpKind
from ..ir.spelling import said
from ..ir.upsample import OPAQUE_WHY
from ..pipeline import Analysis
from .capture import InductorKernel, module_path
from .kernel_graph import callee, compatible, norm_path

Key = tuple[str, str, int]


# Inductor's ops that read elements at computed positions (an upsample's `_unsafe_index`).
_GATHERS = ("index", "upsample", "gather", "scatter")

Opaque = dict[tuple[str, int], dict[str, Key]]  # (file, line) -> {our node: its key}


def opaque_keys(analysis: Analysis) -> Opaque:
    """Our opaque and in-place calls (not a GEMM, convolution or attention), and our
    concatenations (a cluster holding one matches by its keys; one left out is Inductor's
    extra work), by line."""
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    out: Opaque = {}
    for node in analysis.graph.nodes:
        if (node.kind not in (OpKind.OPAQUE, OpKind.INPLACE, OpKind.CONCAT) or node.op == "meta"
                or node.source is None or callee(node)):
            continue
        fx = fx_nodes.get(node.name)
        mod = module_path(fx.meta.get("nn_module_stack")) if fx is not None else ""
        key = (mod, norm_path(node.source.file), node.source.line)
        out.setdefault(key[1:], {})[node.name] = key
    return out


def _called(analysis: Analysis, name: str) -> str:
    """`cat` for `torch.cat`, `scatter` for `.scatter`: the aten op's likely name."""
    node = analysis.graph[name]
    return (node.target or node.op).rstrip("()_").rsplit(".", 1)[-1]


def added_ops(analysis: Analysis, members: Iterable[str], ours: Iterable[Key],
              kernel: InductorKernel, opaque: Opaque) -> tuple[str, ...]:
    """Our opaque calls outside the cluster (`members`, on keys `ours`) that `kernel`
    computes: by key, or by op name where the key is the cluster's own too."""
    members, ours = set(members), tuple(ours)
    theirs: dict[Key, set[str]] = {}
    # A concatenation the kernel writes its results into is one it does the work of too.
    for n in (*kernel.nodes, *kernel.into_cat):
        if n.line is not None:
            theirs.setdefault((n.module, norm_path(n.file), n.line), set()).add(n.op)
    found: dict[str, None] = {}
    for key, ops in theirs.items():
        here = [name for name, k in opaque.get(key[1:], {}).items()
                if name not in members and compatible(k, key)]
        by_name = [name for name in here if _called(analysis, name) in ops]
        shared = any(compatible(o, key) for o in ours)
        # Ops no call of ours names (an upsample's `_unsafe_index`, `arange`, `mul`) are the
        # work of the calls on this line not named otherwise; on a line the cluster shares
        # (`cat([F.interpolate(x), skip])` with the cat ours), only a gather is.
        rest = ops - {_called(analysis, name) for name in by_name}
        if shared:
            rest = {op for op in rest - {analysis.graph[n].op for n in members}
                    if any(g in op for g in _GATHERS)}
        found.update(dict.fromkeys(here if rest else by_name))
    return tuple(found)


def _why(analysis: Analysis, name: str) -> str:
    node = analysis.graph[name]
    if node.kind is OpKind.INPLACE:
        return "it writes its input in place"
    if node.kind is OpKind.CONCAT:
        apart = concat_problem(analysis.graph, name)
        return (f"a cat we leave out of this cluster: it {apart}" if apart else
                "a cat we leave out of this cluster (we fuse one into elementwise kernels only)")
    if node.param(OPAQUE_WHY):  # a call we know and keep whole (an upsample's mode)
        return f"opaque to us: {node.param(OPAQUE_WHY)}"
    if node.op == "opaque":
        return "opaque to us: fusion-advisor has no fusion rule for it, so it stays a call"
    return "opaque to us: we keep it as one call"


def added_words(analysis: Analysis, names: Iterable[str]) -> str:
    """`F.interpolate` (line 8), `.scatter` (line 14): why we leave each out, one phrase per
    reason."""
    by_why: dict[str, list[str]] = {}
    for name in names:
        by_why.setdefault(_why(analysis, name), []).append(said(analysis.graph, name))
    return "; ".join(f"{', '.join(dict.fromkeys(said_))} ({why})"
                     for why, said_ in by_why.items())
