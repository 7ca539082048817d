"""Views at a cluster's boundary: which view inputs a cluster reads through its own index map.

The one rule: a view input of a legal group (a slice, select, permute, reshape... any view
with index steps, a `chunk` or `split` piece among them, ``ir/split_views.py``) joins the
group when
  - only the group reads it (no other op, no output, no shape read: nothing else needs it
    made), and
  - its source, through a chain of such views, is a value some op of the group reads
    directly anyway, and
  - the code generator can index it (the view has index steps, and no operand but its
    source: a bound computed from the source's own sizes is no operand, ``ir/view_params.py``).
The kernel then takes the source once and reads the view through its index map (``codegen/
indexing.py``) instead of taking both. Why: the same bytes are read (the source is read in
full already, the slice's bytes are a part of them), so the traffic estimate only drops the
second count of them; and the call gets simpler and maps to the user's source: rotary
embeddings' `rotate_half(q)` slices `q` inside the helper, so the call `q * cos +
rotate_half(q) * sin` takes `q, cos, sin`, which the line can pass, instead of the helper's
own slices, which it cannot.

A view of a value the group does not otherwise read stays outside: passing its source
instead would read no fewer bytes and could read more (a whole buffer for a slice of it), a
launcher reading a slice fixes sizes of its source (the sliced dim's for a ``Narrow``, all of
them for another selection), and the line spells the view as the argument anyway
(`scores.masked_fill(self.mask[:T, :T], ...)`). An upsample (``ir/upsample.py``) joins
without that: its source is a factor of its size smaller, so the kernel reads fewer bytes
through it, and the upsampled tensor is never written (a UNet decoder's `F.interpolate`
feeding its cat and GroupNorm).
``detect.py`` applies the rule to each legal group and keeps the larger group only where
the legality checks (the code generator's dry run among them) still pass.
"""

from __future__ import annotations

from collections.abc import Collection

from ..ir.graph import FusionGraph, OpKind
from ..ir.upsample import factors_of
from ..ir.views import INDEX_STEPS
from .group import external_inputs, members


def _indexable(g: FusionGraph, name: str) -> bool:
    node = g[name]
    return (node.kind is OpKind.VIEW and node.param(INDEX_STEPS) is not None
            and len(set(node.refs)) == 1 and node.meta is not None)


def boundary_views(g: FusionGraph, group: Collection[str]) -> tuple[str, ...]:
    """The view inputs of `group` that the module docstring's rule pulls in (with the views
    between them and the value the group reads anyway), in graph order; () if none."""
    inside = members(group)
    direct = set(external_inputs(g, inside))  # read by an op of the group itself
    pulled: set[str] = set()
    for name in direct:
        chain, at = [], name
        while _indexable(g, at) and g.users[at] and all(
                u in inside or u in chain for u in g.users[at]):
            chain.append(at)
            grows = bool(factors_of(tuple(g[at].param(INDEX_STEPS))))
            at = g[at].refs[0]
            if at in direct or grows:
                pulled.update(chain)
                break
    return tuple(sorted(pulled, key=g.position))
