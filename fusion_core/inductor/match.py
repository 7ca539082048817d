"""Match our clusters against the kernels Inductor generated for the same model.

Reads an ``Analysis`` and an ``InductorCapture``; writes an ``Agreement``: per Inductor
compute kernel a status (``exact`` / ``partial`` / ``missed``), and per cluster of ours a
verdict (``same group`` / ``different grouping`` with how / ``inside a library kernel`` /
``not fused by Inductor``).

Both sides are compared by *keys* (``coverage.py``): (innermost module path, file, line) of
each compute node. The module path tells block 0's line 31 from block 1's. Inductor inlines cheap
pointwise producers into several consumers (recompute); a key belongs to the first kernel
computing it, and a kernel's status and extra ops count only the keys it owns. Nodes
Inductor created in a pattern rewrite carry no stack trace; such a node still explains one
of our nodes whose op it has, when its kernel already overlaps our cluster by key. Ops
Inductor drops (dropout in eval mode, casts to the same dtype) are ignored on our side.
Our views (a permute, a reshape, a nearest upsample's ``Repeat``) move no data: Inductor
folds them into its kernels' indexing and never computes them, so no kernel has to cover
them; their keys still count as ours (an upsample's index `mul` sits on its line).
A split-off bias add and the library calls are ``library_calls.py``'s. A kernel that also
computes an opaque call of ours outside the cluster (an upsample, a scatter, a cat) is never
the cluster's ``same group``: ``added.py`` finds and names it.

A node of ours no generated kernel computes may be computed inside a library call
(``capture.LibraryCall``): a pattern rewrite replaced it (the attention block's scale and
softmax, now inside ``_scaled_dot_product_flash_attention_for_cpu``), or it is the split-off
bias of a GEMM Inductor calls as ``addmm``. A cluster computed wholly so is ``inside a
library kernel``; partly so, a ``different grouping`` that names the call.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis.types import Cluster
from ..pipeline import Analysis
from .added import Opaque, added_ops, added_words, opaque_keys
from .capture import InductorCapture, InductorKernel, LibraryCall
from .coverage import (
    Key,
    cluster_keys,
    computes_exactly,
    covering_kernels,
    folded_views,
    kernel_keys,
    keys_of_ours,
    owned_keys,
    resolved_keys,
)
from .explain import MissLine, cat_feeders, collapse, into_cat, is_cat, miss_reason, short_name
from .kernel_graph import norm_path
from .library_calls import (
    additive_masks,
    cover_split_biases,
    gemm_keys,
    inside_calls,
    inside_words,
    mask_keys,
    named,
    split_biases,
)

SAME, DIFFERENT, NOT_FUSED = "same group", "different grouping", "not fused by Inductor"
INSIDE = "inside a library kernel"


@dataclass(frozen=True)
class KernelMatch:
    kernel: str
    status: str  # "exact", "partial", "missed"
    clusters: tuple[int, ...]  # our clusters overlapping it
    ops: tuple[str, ...]
    lines: tuple[int, ...]
    reason: str = ""  # a missed kernel: why we do not propose it (see explain.py)


@dataclass(frozen=True)
class ClusterVerdict:
    cluster: int
    verdict: str  # SAME, DIFFERENT, INSIDE or NOT_FUSED
    kernels: tuple[str, ...]  # Inductor kernels (and library calls) computing its nodes
    detail: str  # how the grouping differs, in words

    def __str__(self) -> str:
        return self.verdict + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class Agreement:
    model: str
    method: str  # how Inductor's kernels were found (see capture.py)
    kernels: tuple[KernelMatch, ...]  # Inductor's pointwise/reduction kernels
    clusters: tuple[ClusterVerdict, ...]
    layout_kernels: int  # kernels that only copy/gather (not counted)
    single_op_kernels: int = 0  # one user op per kernel: nothing fused, so not counted

    def count(self, status: str) -> int:
        return sum(1 for k in self.kernels if k.status == status)

    @property
    def matched_fraction(self) -> float:
        """Share of Inductor's compute kernels we match exactly or partly."""
        n = len(self.kernels)
        return (self.count("exact") + self.count("partial")) / n if n else 1.0

    @property
    def not_fused(self) -> tuple[int, ...]:
        return tuple(v.cluster for v in self.clusters if v.verdict == NOT_FUSED)


def _adds(analysis: Analysis, c: Cluster, keys: dict[str, tuple[Key | None, str]],
          cover: dict[str, set[int]], kernels: list[InductorKernel], opaque: Opaque
          ) -> dict[int, tuple[str, ...]]:
    """Per kernel computing the cluster: the opaque calls of ours it computes too."""
    ours = [k for k, _ in keys.values() if k is not None]
    hit = set().union(*cover.values()) if cover else set()
    return {i: found for i in sorted(hit)
            if (found := added_ops(analysis, c.nodes, ours, kernels[i], opaque))}


def _describe(analysis: Analysis, k: InductorKernel, owned: set[Key], our_keys: set[Key],
              added: tuple[str, ...]) -> str:
    """`K also computes `mul` (line 8), `F.interpolate` (line 7) (opaque to us: …)`; a
    `cat` the kernel fuses is left to _cat_words."""
    g = analysis.graph
    at = {a: (norm_path(g[a].source.file), g[a].source.line) for a in added}
    # An added call's lowering (an upsample's index `mul`, `add`) is that call, not an op.
    extra = sorted({(n.line or 0, n.op) for n in k.compute_nodes
                    if n.line is not None and (key := (n.module, norm_path(n.file), n.line))
                    not in our_keys and key in owned and key[1:] not in at.values()})
    cats = {(norm_path(n.file), n.line) for n in k.cats}
    added = tuple(a for a in added if not (is_cat(g[a]) and at[a] in cats))
    ops = ", ".join([*(f"`{op}` (line {line})" for line, op in extra),
                     *([added_words(analysis, added)] if added else [])])
    return f"{short_name(k.name)} also computes {ops}" if ops else short_name(k.name)


def _cat_words(analysis: Analysis, hit: list[int], ours: dict, cover: dict[str, set[int]],
               kernels: list[InductorKernel]) -> list[str]:
    """`K: `self.bn` (line 16) written into `cat`'s output (line 17): …` for our ops that feed the
    concatenation; ops that read it were not written into it (a GroupNorm after the skip
    concatenation of a UNet decoder): the kernel computes the `cat` they read."""
    out = []
    held = {(norm_path(s.file), s.line) for n in ours
            if is_cat(node := analysis.graph[n]) and (s := node.source) is not None}
    for i in hit:
        lines_at = {(norm_path(n.file), n.line) for n in kernels[i].cats if n.line is not None}
        if kernels[i].cats and not lines_at <= held:  # a cat of the cluster's own: no miss
            at = sorted({n.line for n in kernels[i].cats if n.line is not None})
            lines = f"line{'s' if len(at) > 1 else ''} {', '.join(map(str, at))}" if at else ""
            computed = [n for n in ours if i in cover[n]]
            fed = cat_feeders(analysis, kernels[i], computed)
            where = f" ({lines})" if lines else ""
            out.append(f"{short_name(kernels[i].name)}: " + (
                f"{named(analysis, fed)} {into_cat(where)}" if fed else
                f"{named(analysis, computed)} read `cat`'s output{where}, which Inductor computes "
                f"in the same kernel; {_our_cat_kernel(analysis, lines_at)}"))
    return out


def _our_cat_kernel(analysis: Analysis, lines: set[tuple[str, int]]) -> str:
    """Where our `cat` on these lines runs: a cluster of ours that writes it, or a call."""
    g = analysis.graph
    cats = {n.name for n in g.nodes if is_cat(n) and (s := n.source) is not None
            and (norm_path(s.file), s.line) in lines}
    # the check that kept the cat from its readers (a cat read through a reshape in the group)
    blamed = next((r for r in analysis.rejections if cats & set(r.culprits)), None)
    why = f"; our {blamed.check} check keeps them apart: {blamed.reason}" if blamed else ""
    for c in analysis.clusters:
        if cats & set(c.nodes):
            return f"our `cat` is written by cluster {c.index} ({c.chain}){why}"
    return f"our `cat` stays a call of its own{why}"


def _verdict(analysis: Analysis, c: Cluster, ours: dict, cover: dict[str, set[int]],
             kernels: list[InductorKernel], kkeys: list[set[Key]],
             inside: dict[str, set[int]], calls: list[LibraryCall],
             adds: dict[int, tuple[str, ...]]) -> ClusterVerdict:
    folded = folded_views(analysis, ours)
    computed = [n for n in ours if n not in folded]  # what a kernel or a call must compute
    hit = sorted(set().union(*cover.values())) if cover else []
    in_calls = sorted(set().union(*inside.values())) if inside else []
    names = tuple(kernels[i].name for i in hit) + tuple(calls[j].op for j in in_calls)
    our_keys = keys_of_ours(ours)
    same = next((i for i in hit if computes_exactly(i, ours, cover, kkeys, adds, folded)), None)
    if same is not None:
        return ClusterVerdict(c.index, SAME, names, short_name(kernels[same].name))
    if computed and all(n in inside for n in computed):
        return ClusterVerdict(c.index, INSIDE, names, inside_words(analysis, inside, calls))
    uncovered = [n for n in computed if not cover[n] and n not in inside]
    fused_with_ours = [i for i in hit if sum(1 for n in computed if i in cover[n]) >= 2]
    if not inside and not fused_with_ours and not adds and all(len(kkeys[i]) <= 1 for i in hit):
        why = "each op is its own kernel" if hit else "no Inductor kernel computes these lines"
        return ClusterVerdict(c.index, NOT_FUSED, names,
                              "; ".join([why, *_cat_words(analysis, hit, ours, cover, kernels)]))
    def computes(i: int) -> str:
        return named(analysis, (n for n in computed if i in cover[n]))

    parts = []
    more = _describe(analysis, kernels[hit[0]], kkeys[hit[0]], our_keys,
                     adds.get(hit[0], ())) if len(hit) == 1 else ""
    if len(hit) == 1 and not inside and " also computes " in more:
        parts.append("Inductor fuses more: " + more)
    else:
        if len(hit) == 1:  # beside a library call, or the kernel leaves some of ours out
            parts.append(f"{short_name(kernels[hit[0]].name)} computes {computes(hit[0])}")
        elif hit:
            split = "; ".join(f"{short_name(kernels[i].name)} ({computes(i)})" for i in hit)
            parts.append(f"Inductor splits it over {len(hit)} kernels: {split}")
        parts += [text for i in adds if " also computes " in (
            text := _describe(analysis, kernels[i], set(), our_keys, adds[i]))]
    parts += _cat_words(analysis, hit, ours, cover, kernels)
    if inside:
        parts.append(inside_words(analysis, inside, calls))
    if uncovered:
        parts.append(f"not in any Inductor kernel: {named(analysis, uncovered)}")
    return ClusterVerdict(c.index, DIFFERENT, names, "; ".join(parts))


def match(analysis: Analysis, cap: InductorCapture) -> Agreement:
    kernels = list(cap.compute_kernels)
    all_keys = [kernel_keys(k) for k in kernels]
    kkeys = owned_keys(all_keys)
    universe = set().union(*all_keys) if all_keys else set()
    raw = [cluster_keys(analysis, c) for c in analysis.clusters]
    masks = [additive_masks(analysis, c) for c in analysis.clusters]
    per_cluster = [mask_keys(resolved_keys(keys, universe), m, universe)
                   for keys, m in zip(raw, masks, strict=True)]
    covers = [covering_kernels(ours, kernels, all_keys) for ours in per_cluster]
    gemm_ks = [gemm_keys(k.nodes) for k in kernels]
    biases = [split_biases(analysis, c) for c in analysis.clusters]
    for b, keys, cover in zip(biases, raw, covers, strict=True):
        cover_split_biases(b, keys, cover, gemm_ks)
    if cap.method == "names":
        return _match_by_names(analysis, cap, kernels, per_cluster)
    calls = list(cap.calls)
    opaque = opaque_keys(analysis)
    adds = [_adds(analysis, c, keys, cov, kernels, opaque)
            for c, keys, cov in zip(analysis.clusters, raw, covers, strict=True)]
    verdicts = tuple(_verdict(analysis, c, ours, cov, kernels, kkeys,
                              inside_calls(keys, cov, b, calls), calls, add)
                     for c, ours, cov, keys, b, add in zip(analysis.clusters, per_cluster,
                                                           covers, raw, biases, adds,
                                                           strict=True))
    results = []
    for i, k in enumerate(kernels):
        overlapping = tuple(c.index for c, ours in zip(analysis.clusters, per_cluster,
                                                      strict=True)
                            if kkeys[i] & keys_of_ours(ours))
        exact = any(computes_exactly(i, per_cluster[c], covers[c], kkeys, adds[c],
                                     folded_views(analysis, per_cluster[c]))
                    for c in overlapping)
        status = "exact" if exact else "partial" if overlapping else "missed"
        ops = tuple(sorted({n.op for n in k.compute_nodes})) or k.ops
        reason = miss_reason(analysis, k) if status == "missed" and k.n_user_ops >= 2 else ""
        results.append(KernelMatch(k.name, status, overlapping, ops, k.lines, reason))
    return _agreement(analysis, cap, kernels, results, verdicts)


def _agreement(analysis: Analysis, cap: InductorCapture, kernels: list[InductorKernel],
               results, verdicts) -> Agreement:
    """Count only kernels that fuse two or more user ops (a lone GELU is not a fusion)."""
    fused = tuple(r for r, k in zip(results, kernels, strict=True) if k.n_user_ops >= 2)
    return Agreement(analysis.model_name, cap.method, fused, tuple(verdicts),
                     len(cap.kernels) - len(kernels), len(results) - len(fused))


def _match_by_names(analysis: Analysis, cap: InductorCapture, kernels: list[InductorKernel],
                    per_cluster: list[dict]) -> Agreement:
    """Fallback without nodes: compare op-name sets, each kernel used by one cluster."""
    free = list(range(len(kernels)))
    verdicts, status = [], {}
    for c, ours in zip(analysis.clusters, per_cluster, strict=True):
        ops = {op for _, op in ours.values()}
        same = next((i for i in free if set(kernels[i].ops) == ops), None)
        part = next((i for i in free if ops & set(kernels[i].ops)), None)
        i = same if same is not None else part
        if i is None:
            verdicts.append(ClusterVerdict(c.index, NOT_FUSED, (), "by kernel names"))
            continue
        free.remove(i)
        status[i] = ("exact" if same is not None else "partial", c.index)
        verdicts.append(ClusterVerdict(
            c.index, SAME if same is not None else DIFFERENT,
            (kernels[i].name,), "" if same is not None else f"by kernel names: {kernels[i].name}"))
    results = [KernelMatch(k.name, status.get(i, ("missed",))[0],
                           status[i][1:] if i in status else (), k.ops, (),
                           "" if i in status else _NAMES_ONLY)
               for i, k in enumerate(kernels)]
    return _agreement(analysis, cap, kernels, results, verdicts)


_NAMES_ONLY = ("no cluster of ours has these ops (Inductor's kernels were found by name only, "
               "without the nodes that would say why)")


def missed_lines(a: Agreement) -> list[MissLine]:
    """The missed kernels, one line per (ops, reason), kernel names shortened."""
    return collapse((k.kernel, k.ops, k.lines, k.reason) for k in a.kernels
                    if k.status == "missed")


def summary_row(a: Agreement) -> dict[str, object]:
    return {"model": a.model, "inductor_kernels": len(a.kernels), "exact": a.count("exact"),
            "partial": a.count("partial"), "missed": a.count("missed"),
            "matched_fraction": round(a.matched_fraction, 4),
            "ours": len(a.clusters), "ours_not_fused": len(a.not_fused),
            "layout_kernels": a.layout_kernels, "single_op_kernels": a.single_op_kernels,
            "method": a.method}


def to_dict(a: Agreement) -> dict[str, object]:
    return {**summary_row(a),
            "kernels": [{"name": k.kernel, "status": k.status, "clusters": list(k.clusters),
                         "ops": list(k.ops), "lines": list(k.lines),
                         "reason": k.reason or None} for k in a.kernels],
            "cluster_verdicts": [{"cluster": v.cluster, "verdict": v.verdict,
                                  "kernels": list(v.kernels), "detail": v.detail}
                                 for v in a.clusters]}
