"""A Sequential's layers counted from its end (`self.block[-1]`), for one edit serving blocks
whose Sequentials hold other numbers of layers before the fused ones.

torchvision's MobileNetV3 builds `self.block` from a list that has an expand layer and a
squeeze-excitation in some blocks only: the last conv's BatchNorm is `self.block[2][1]` in
one block and `self.block[3][1]` in another, but `self.block[-1][1]` in both. ``sequential.py``
spells the call so when every block holds the clusters' layers at the same positions counted
from the end; the matcher (``unify.py``) then reads such text per module, where `-1` is that
module's own last layer, and writes the parameters it reads the same way
(`self.block[-1][1].weight`), so the text is one for every block.

Reads the model's modules; writes nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from torch import nn


def _layers(container: nn.Module) -> list[str] | None:
    """The names a container's layers are indexed by, in order; None if it is not indexed."""
    if isinstance(container, (nn.Sequential, nn.ModuleList)):
        return list(container._modules)
    return None


def resolved(model: nn.Module | None, parts: Sequence[str]) -> str | None:
    """The dotted path of the module `parts` name (`["blocks", "3", "block", "-1"]` →
    `blocks.3.block.3` where that Sequential has 4 layers); None when a negative index
    names no layer there. Without negative indices the parts are the path as they are."""
    parts = [p for p in parts if p]
    if not any(p.startswith("-") for p in parts):
        return ".".join(parts)
    if model is None:
        return None
    for i, p in enumerate(parts):
        if not p.startswith("-"):
            continue
        try:
            layers = _layers(model.get_submodule(".".join(parts[:i])))
        except AttributeError:
            return None
        if layers is None or not p[1:].isdigit() or not 0 < int(p[1:]) <= len(layers):
            return None
        parts[i] = layers[int(p)]
    return ".".join(parts)


def same_layer(model: nn.Module | None, a: str, b: str) -> bool:
    """Module paths `a` and `b` name one layer: the same path, or a layer registered under
    two names (`self.conv2 = self.conv1`), which FX names by its first and the source by
    either."""
    if a == b:
        return True
    try:
        return model is not None and model.get_submodule(a) is model.get_submodule(b)
    except AttributeError:
        return False


def within(model: nn.Module | None, layer: str, where: str) -> bool:
    """`where` (a graph node's module path) is `layer` (a path the source spells) or a
    module inside it, under either of its names (``same_layer``)."""
    if where == layer or where.startswith(layer + "."):
        return True
    parts = where.split(".")
    return any(same_layer(model, layer, ".".join(parts[:i])) for i in range(len(parts), 0, -1))


def module_at(model: nn.Module, parts: Sequence[str]) -> tuple[str, nn.Module] | None:
    """The dotted path `parts` name (``resolved``) and the module there; None if none."""
    path = resolved(model, parts)
    try:
        return (path, model.get_submodule(path)) if path is not None else None
    except AttributeError:
        return None


def layer_positions(model: nn.Module | None, path: str, bounds: slice) -> range | None:
    """The positions of the layers `bounds` slices off the Sequential at `path` (`[:-1]`:
    all but the last); None when it is no indexed container. Non-negative bounds need no
    model: an open end reaches any length."""
    if all(b is None or b >= 0 for b in (bounds.start, bounds.stop)):
        return range(bounds.start or 0, bounds.stop if bounds.stop is not None else 1 << 30)
    try:
        layers = _layers(model.get_submodule(path)) if model is not None else None
    except AttributeError:
        return None
    return range(*bounds.indices(len(layers))) if layers is not None else None


def counted_from_end(model: nn.Module | None, self_path: str, target: str,
                     containers: Collection[str]) -> str:
    """`target` (a module attribute's path under `self_path`, `block.3.1.weight`) with the
    layer index of each container in `containers` (paths relative to `self`: `block`)
    counted from that container's end (`block.-1.1.weight`), as the edit spells it."""
    if not containers or model is None:
        return target
    head = self_path + "." if self_path else ""
    if not target.startswith(head):
        return target
    parts = target[len(head):].split(".")
    for at in range(1, len(parts)):
        if ".".join(parts[:at]) not in containers:
            continue
        found = module_at(model, [*self_path.split("."), *parts[:at]])  # `block.-1.layers`
        layers = _layers(found[1]) if found is not None else None
        if layers is not None and parts[at] in layers:
            parts[at] = str(layers.index(parts[at]) - len(layers))
    return head + ".".join(parts)
