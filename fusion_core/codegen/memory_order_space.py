"""An elementwise group whose full-size tensors all lie in one memory order iterates in it.

Reads a group's ``IterationSpace`` (``ir/iteration.py``), the chains a first spread of index
maps gave its values (``indexing._Spread``) and the strides of the values in memory (an
input's own, eager's layout for what the kernel writes: ``layout.dense_permuted``); returns
the space with a ``Reorder`` step (``ir/views.py``: a permute written from the end) that puts
the domain's dims in that memory order, or the space itself.

Why: a channels-last group (a channels-last input, a convolution's channels-last output, and
results laid out as eager lays them out) iterated over NCHW has every tensor stepping by 1
along C but varying along H and W after it, so it tiled (rows down the channels,
`rows // rspan1 * stride0 + rows % rspan1` per load). Over (N, H, W, C) each such tensor is
one contiguous group: the kernel is flat, indexed by the flat index itself, as Inductor
iterates it (its loop order follows the output's strides). A broadcast operand (a
per-channel weight) is read through the same reorder (`i % C`), and results still come back
in their logical shape and eager's strides: the launcher views them through the chain, as it
does a reduction's permuted source (softmax over the channels). Written from the end, the
view takes fewer leading dims as well (``right_aligned`` gives a broadcast input only the
leading dims the reorder moves): the launcher still right-aligns its inputs.

Full-size: spanning every dim of the domain longer than 1 with a nonzero stride; a tensor
broadcast along some dim does not vote. The order is that of the dims longer than 1, by
stride; size-1 dims go where the results' memory order has them (``_written_order``: H of
a channels-last (N, C, 1, W) between N and W, so the result stays one group and H may grow
at run time), else keep their place (a batch of 1 stays outermost). Only a plain
elementwise space is reordered: no reduction, no steps already (a split or a regroup), no
upsample (its repeats are split dims of the domain), no cat (its pieces are cut along a
domain dim) and no generated value (indexed as contiguous, it would vote against any other
order anyway).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import torch

from ..ir.graph import FusionGraph, OpKind
from ..ir.iteration import IterationSpace
from ..ir.views import Reorder, Step, Unsqueeze, ViewError, apply, plain
from .layout import dense_permuted, eager_order
from .upsample_space import upsamples

Layout = tuple[tuple[int, ...], tuple[int, ...]]  # (shape, strides) over the domain


def _memory(g: FusionGraph, inputs: Sequence[str], outputs: Sequence[str],
            chains: Mapping[str, tuple[Step, ...]],
            reads: Mapping[tuple[str, str], tuple[Step, ...]]
            ) -> Iterator[tuple[str, tuple[Step, ...], tuple[int, ...]]]:
    """(value, steps, strides) of each read or write of memory the kernel makes."""
    for name in inputs:
        yield name, chains[name], tuple(g[name].meta.stride)
    for (_, name), steps in reads.items():
        yield name, steps, tuple(g[name].meta.stride)
    for name in outputs:
        yield name, chains[name], _written(g, name)


def _written(g: FusionGraph, name: str) -> tuple[int, ...]:
    """The strides a result is written with: eager's layout, as ``lower._output`` has it."""
    meta = g[name].meta
    eager = dense_permuted(tuple(meta.shape), tuple(meta.stride))
    return eager or torch.empty(meta.shape, device="meta").stride()


def _seen(steps: tuple[Step, ...], shape: tuple[int, ...], stride: tuple[int, ...],
          rank: int) -> Layout | None:
    """(shape, strides) of a tensor seen through `steps`, right-aligned to `rank` dims; None
    where no strides express it (``domain_view`` refuses that by name later)."""
    try:
        t = apply(plain(steps, shape), torch.empty_strided(shape, stride, device="meta"))
    except ViewError:
        return None
    pad = rank - t.dim()
    if pad < 0:
        return None
    return (1,) * pad + tuple(t.shape), (0,) * pad + tuple(t.stride())


def _order(seen: Layout, domain: tuple[int, ...]) -> tuple[int, ...] | None:
    """The domain's dims longer than 1, outermost in memory first; None where the tensor is
    broadcast along one of them (it does not vote)."""
    shape, stride = seen
    long = [k for k, n in enumerate(domain) if n != 1]
    if any(shape[k] == 1 or stride[k] == 0 for k in long):
        return None
    return tuple(sorted(long, key=lambda k: -stride[k]))  # stable: ties keep their order


def memory_ordered(g: FusionGraph, nodes: Sequence[str], inputs: Sequence[str],
                   outputs: Sequence[str], space: IterationSpace,
                   chains: Mapping[str, tuple[Step, ...]],
                   reads: Mapping[tuple[str, str], tuple[Step, ...]]) -> IterationSpace:
    """`space` iterated in the memory order its full-size tensors share (module docstring);
    `space` itself where they share none, it is the domain's own, or the space is not a
    plain elementwise one."""
    kinds = {g[n].kind for n in nodes}
    if space.steps or space.reduced or upsamples(g, nodes) or kinds & {
            OpKind.REDUCTION, OpKind.CONCAT, OpKind.GENERATOR}:
        return space
    domain = space.shape
    orders = set()
    for name, steps, stride in _memory(g, inputs, outputs, chains, reads):
        seen = _seen(steps, tuple(g[name].meta.shape), stride, len(domain))
        if seen is None:
            return space
        order = _order(seen, domain)
        if order is not None:
            orders.add(order)
    if len(orders) != 1:
        return space
    (order,) = orders
    perm = _written_order(g, outputs, chains, domain, order) or _in_slots(order, len(domain))
    if list(perm) == list(range(len(domain))):
        return space
    return IterationSpace(space.anchor, space.anchor_shape, (Reorder(tuple(perm)),), 0)


def _written_order(g: FusionGraph, outputs: Sequence[str],
                   chains: Mapping[str, tuple[Step, ...]], domain: tuple[int, ...],
                   order: tuple[int, ...]) -> tuple[int, ...] | None:
    """Every domain dim in the order the full-size results lie in memory, size-1 dims too,
    as the launcher allocates them at any size (``layout.eager_order``, a result's
    ``memory_order``); None where no result spans the domain or they place a size-1 dim
    apart. A size-1 dim left where it stands could split a result's one group (channels-last
    (2, 3, 1, 4) over (N, W, H, C): H strides past W·C) and, grown at run time, leave it
    apart from the iteration order altogether."""
    found = set()
    for name in outputs:
        shape = tuple(g[name].meta.shape)
        seen = _seen(chains[name], shape, _written(g, name), len(domain))
        if seen is None or _order(seen, domain) != order:
            continue
        pad = len(domain) - len(shape)  # dims the result lacks: outermost, in place
        own = eager_order(seen[0][pad:], seen[1][pad:])
        found.add(tuple(range(pad)) + tuple(k + pad for k in own))
    return found.pop() if len(found) == 1 else None


def _in_slots(order: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """The dims longer than 1 in `order`, refilling their own places; size-1 dims keep
    theirs."""
    slots = sorted(order)
    perm = list(range(rank))
    for slot, k in zip(slots, order, strict=True):
        perm[slot] = k
    return tuple(perm)


def right_aligned(g: FusionGraph, inputs: Sequence[str],
                  chains: Mapping[str, tuple[Step, ...]]) -> dict[str, tuple[Step, ...]]:
    """`chains` with each input broadcast into a ``Reorder``ed space given only the leading
    dims the reorder needs (none for a full-rank one), not the space's whole rank: the
    launcher right-aligns the view as it does the input (a (C,) weight read over (N, C)
    called with one image, (C,)), and results keep eager's rank."""
    out = dict(chains)
    for name in inputs:
        steps, rank = chains[name], len(g[name].meta.shape)
        if not steps or not isinstance(steps[-1], Reorder) or len(steps) > 2 or (
                len(steps) == 2 and steps[0] != Unsqueeze(tuple(range(len(steps[-1].perm)
                                                                  - rank)))):
            continue
        pad = max(0, steps[-1].moved - rank)
        out[name] = ((Unsqueeze(tuple(range(pad))),) if pad else ()) + steps[-1:]
    return out
