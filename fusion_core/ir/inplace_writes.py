"""In-place writes the registry has no op for: which calls write their first operand.

Reads one FX node; ``normalize`` makes such a call an ``OpKind.INPLACE`` node rather than
an opaque one, so the legality checks see the write (``analysis/mutation.py``). An item
assignment exports as one (`a[:, 0] = 1.0` is `aten.fill_` on a `select` of `a`,
`a[:, :2] = b` a `copy_`, `a[mask] = 0.0` an `index_put_`), and FX records `.fill_()`,
`.copy_()`, `.zero_()` or `.scatter_()` as methods. Left opaque, nothing marked that they
change their operand, so a kernel could span one and compute the ops after the write from
the value before it.
"""

from __future__ import annotations

import torch
import torch.fx as fx

# Trailing-underscore methods that change a tensor's flags or storage, not its values.
_NO_VALUES = frozenset({"requires_grad_", "share_memory_", "detach_"})


def _in_place_name(name: str) -> bool:
    return (name.endswith("_") and not name.endswith("__") and name not in _NO_VALUES
            and hasattr(torch.Tensor, name))


def _writes_first(op: torch._ops.OpOverload) -> bool:
    """The schema marks its first argument written (`Tensor(a!) self`)."""
    args = op._schema.arguments
    alias = args[0].alias_info if args else None
    return alias is not None and alias.is_write


def written_by(n: fx.Node) -> str | None:
    """The in-place op `n` calls on its first operand (`fill_`, `copy_`, `index_put_`), or
    None when it writes none."""
    first = next((a for a in n.args[:1] if isinstance(a, fx.Node)), None)
    if first is None:
        return None
    if n.op == "call_method":
        return str(n.target) if _in_place_name(str(n.target)) else None
    if n.op != "call_function":
        return None
    if isinstance(n.target, torch._ops.OpOverload):
        return n.target._overloadpacket.__name__ if _writes_first(n.target) else None
    name = getattr(n.target, "__name__", "")
    # `torch.fill_(a, 1.0)`: a torch function named as an in-place Tensor method
    return name if getattr(torch, name, None) is n.target and _in_place_name(name) else None
