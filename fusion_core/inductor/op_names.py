"""Inductor's names in our terms: aten packet names as our registry's ops, and the kernel
names Inductor writes into its generated code.

Reads names only (an aten overload packet's ``__name__``, a kernel name such as
``cpp_fused_add_mul_relu_0``, the generated sources' text); returns our registry's op names,
whether an op computes (rather than moves data), and the kernel names found in the code, in
definition order. ``capture.py`` uses them for the nodes and kernels it records, and falls
back on the kernel names alone when Inductor's hooks gave nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..ir.registry import SPECS

# aten overload packet name -> our registry op name, where they differ.
ATEN_TO_OP: dict[str, str] = {
    "_softmax": "softmax", "_log_softmax": "log_softmax", "native_layer_norm": "layer_norm",
    "_fused_rms_norm": "rms_norm", "_to_copy": "to", "relu_": "relu", "masked_fill_": "masked_fill",
    "true_divide": "div", "pow": "pow", "_safe_softmax": "softmax", "var_mean": "layer_norm",
    "_native_batch_norm_legit_no_training": "batch_norm", "_native_batch_norm_legit": "batch_norm",
    "native_batch_norm": "batch_norm", "_batch_norm_with_update": "batch_norm",
    "native_group_norm": "group_norm",  # every GroupNorm: unmapped, none counted as computed
}
# Ops Inductor emits kernels for that only move data (never a fusion we would propose).
LAYOUT_OPS = frozenset({"clone", "copy", "embedding", "index", "cat", "constant_pad_nd",
                        "slice", "select", "view", "permute", "transpose", "expand", "split",
                        "full", "arange", "iota", "scatter", "gather", "index_select"})
_KERNEL_NAME = re.compile(r"\b(cpp_fused_\w+?_\d+|triton_(?:poi|red|per|tem)_fused_\w+?_\d+)\b")


def op_name(aten: str) -> str:
    """Our registry name for an aten packet name (`_softmax` -> `softmax`)."""
    if aten in ATEN_TO_OP:
        return ATEN_TO_OP[aten]
    return aten if aten in SPECS else aten.lstrip("_")


def is_compute(op: str) -> bool:
    spec = SPECS.get(op)
    return spec is not None and spec.kind.is_compute and op not in LAYOUT_OPS


def _kernel_order(name: str) -> int:
    m = re.search(r"_(\d+)$", name)
    return int(m.group(1)) if m else 0


def names_from_code(code: Sequence[str]) -> list[str]:
    """Kernel names in the generated code, in definition order, each once."""
    found = dict.fromkeys(m.group(1) for src in code for m in _KERNEL_NAME.finditer(src))
    return sorted(found, key=_kernel_order)


def ops_from_name(name: str) -> tuple[str, ...]:
    """Best-effort op names in `cpp_fused_add_mul_relu_0` (names are sorted, de-duplicated)."""
    body = re.sub(r"^(cpp|triton_(poi|red|per|tem))_fused_|_\d+$", "", name)
    known = sorted({*SPECS, *ATEN_TO_OP, *LAYOUT_OPS, "native_layer_norm_backward"},
                   key=len, reverse=True)
    ops, rest = [], body
    while rest:
        rest = rest.lstrip("_") if not any(rest.startswith(k) for k in known) else rest
        hit = next((k for k in known if rest.startswith(k)
                    and (len(rest) == len(k) or rest[len(k)] == "_")), None)
        if hit is None:
            hit = rest.split("_", 1)[0]
        ops.append(op_name(hit))
        rest = rest[len(hit):].lstrip("_")
    return tuple(dict.fromkeys(o for o in ops if o))
