"""The names generated code carries, spelled in one place.

A cluster's kernel file, its launcher function and the call ``--apply`` writes into the user's
model are all ``cluster{N}``; its ``@triton.jit`` functions are ``cluster{N}_kernel`` (and a
split row's ``cluster{N}_partials`` and ``cluster{N}_finish``); the autograd wrapper class is
``Cluster{N}Function``. The code generator, the source map (which writes and later reads back
the call) and kernel deduplication all take the names from here. No dependencies: the source
map and the CLI use it without loading the code generator or triton.
"""

from __future__ import annotations

import re

_KERNEL = re.compile(r"cluster(\d+)")


def kernel_name(cluster_index: int) -> str:
    """The launcher's name, its file's stem and the call `--apply` writes: `cluster0`."""
    return f"cluster{cluster_index}"


# The `@triton.jit` functions of a kernel file: the kernel, and a split row's two kernels.
JIT_PARTS = ("kernel", "partials", "finish", "joined")


def jit_function_name(cluster_index: int, part: str = "kernel") -> str:
    """A `@triton.jit` function of the cluster's file: `cluster0_kernel`, `cluster0_partials`."""
    assert part in JIT_PARTS, part
    return f"{kernel_name(cluster_index)}_{part}"


def function_class_name(cluster_index: int) -> str:
    """The inference-only autograd wrapper's class: `Cluster0Function`."""
    return f"Cluster{cluster_index}Function"


def cluster_of(name: str) -> int | None:
    """The cluster index a kernel name holds (`cluster3` → 3); None for any other name."""
    found = _KERNEL.fullmatch(name)
    return int(found.group(1)) if found else None


def written(target: str) -> str:
    """A layer's path as the source indexes it: `self.down[0]`, not `self.down.0` (an
    `nn.ModuleList` item's path, which is no Python the user can write)."""
    return re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", target) if target.startswith("self.") else target


def module_written(path: str) -> str:
    """A module's qualified name (`blocks.0.attn`, from `nn_module_stack`) as the user
    reaches it from the model: `self.blocks[0].attn`; the model itself is `self`. Every
    message, the --json report and the HTML page say module paths through this."""
    return written(f"self.{path}") if path else "self"
