"""Give each repeated operand of a `torch.cat` a node of its own.

Reads a shape-propagated ``fx.GraphModule`` (either frontend); rewrites it in place.
`torch.cat((f, f), -1)` (LLaMA's rotary `emb`) reads `f` through two pieces of the result:
a kernel addresses each operand of a cat through one piece (``ir/concat.py``,
``codegen/indexing.py``), so the second occurrence becomes `aten.alias(f)`, a view with no
steps. Read from an input, the alias loads `f` once more at its own shifted coordinate (as
`x + x.t()` loads `x` twice); computed in the group, `f` would be needed over two maps, and
the alias reads its own copy of `f`'s pointwise producers (``analysis/slice_recompute.py``
counts it as a slice of the whole value), as Inductor recomputes `f` per piece.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .targets import lookup

_ALIAS = torch.ops.aten.alias.default


def distinct_cat_operands(gm: fx.GraphModule) -> list[str]:
    """Replace every later occurrence of an operand a cat repeats by an alias of it; returns
    the aliases' names."""
    made: list[str] = []
    for n in list(gm.graph.nodes):
        if not _is_cat(n) or not n.args or not isinstance(n.args[0], (list, tuple)):
            continue
        seen: set[fx.Node] = set()
        parts, changed = list(n.args[0]), False
        for i, part in enumerate(parts):
            if not isinstance(part, fx.Node):
                continue
            if part in seen:
                with gm.graph.inserting_before(n):
                    alias = gm.graph.create_node("call_function", _ALIAS, (part,), {},
                                                 name=f"{part.name}_again")
                alias.meta.update(part.meta)
                # the user's line is the cat's: it repeats the value
                for key in ("stack_trace", "nn_module_stack"):
                    if key in n.meta:
                        alias.meta[key] = n.meta[key]
                alias.meta.pop("fusion_copy_of", None)
                parts[i] = alias
                made.append(alias.name)
                changed = True
            seen.add(part)
        if changed:
            n.args = (type(n.args[0])(parts), *n.args[1:])
    if made:
        gm.recompile()
    return made


def _is_cat(n: fx.Node) -> bool:
    if n.op != "call_function":
        return False
    hit = lookup(n.target)
    return isinstance(hit, tuple) and hit[0].name == "cat"
