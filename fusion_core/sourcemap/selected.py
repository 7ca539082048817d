"""Lines that other calls run unfused: the edit runs its kernel on the instances whose calls
formed its clusters, told apart by the class of a layer, and the lines as written elsewhere.

timm's `BatchNormAct2d.forward` normalizes and then calls `self.act`: a SiLU in a block's
first two norms, where the analysis fuses both ops, and an `nn.Identity` in its last, where
the norm runs alone. An edit of the lines changes every call, so it used to stay a pointer;
it is now written

    if isinstance(self.act, nn.SiLU):
        x = cluster3(x, ...)
    else:
        x = F.batch_norm(...)
        x = self.act(x)

The condition must hold on every instance whose call formed one of the edit's clusters and
on no other instance of the class (those the trace never called included), so a call the
kernel was not verified for runs the code as written. Other calls whose ops there
belong to other clusters run the lines as written too: a cluster running on into other
code (the last norm and the block's residual add) keeps its pointer, and one on these lines
alone (a norm's ReLU here, its Hardswish there) has its own kernel under its own condition,
and ``group_edit`` writes them as one edit: `if isinstance(self.act, nn.ReLU) and ...:` /
`elif isinstance(self.act, nn.Hardswish) and ...:` / `else:` the lines as written. The
layer's class must have a name in the file's module (`nn.SiLU`, `torch.nn.SiLU`).

Reads an ``Analysis``, a ``Span`` and the edit's clusters; writes a ``Selection``: the
condition, spelled from the function's receiver, and the instances that run the lines as
written (``alone.check_alone`` skips their calls' ops).
"""

from __future__ import annotations

import ast
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch.fx as fx
import torch.nn as nn

from ..analysis.types import Cluster
from ..pipeline import Analysis
from .callkeys import instance_path
from .guard import settled_value
from .match import self_path_of
from .skipped import skipped_condition
from .span import PointerOnly, Span


class OtherCall(PointerOnly):
    """Another call of the lines runs ops there that the edit does not compute; `unfused`:
    ops that no cluster holds."""

    def __init__(self, reason: str, unfused: bool) -> None:
        super().__init__(reason)
        self.unfused = unfused


@dataclass(frozen=True)
class Selection:
    condition: str  # `isinstance(self.act, nn.SiLU)`: true where the kernel runs
    as_written: frozenset[int]  # id() of each instance whose calls run the lines as written


def instance_of(analysis: Analysis, span: Span, fx_node: fx.Node | None) -> nn.Module | None:
    """The module whose call of the span's function ran `fx_node`, when known."""
    path = instance_path(fx_node, span.scope.class_name)
    if path is None:
        return None
    try:
        return analysis.module.get_submodule(path)
    except AttributeError:
        return None


def _module_of_file(path: str) -> types.ModuleType | None:
    """The imported module whose file is `path` (the user's model file, or a library's)."""
    want = Path(path).resolve()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        # the name first: resolving every loaded module's path costs more than the rest
        if isinstance(file, str) and Path(file).name == want.name and (
                Path(file).resolve() == want):
            return module
    return None


def class_spelling(cls: type, module: types.ModuleType) -> str | None:
    """`cls` as a name `module`'s code can read: its own global, or reached from a module it
    imported (`nn.SiLU`, `torch.nn.SiLU`: the shortest path that names it)."""
    found: list[str] = []
    for name, value in vars(module).items():
        if value is cls:
            found.append(name)
        elif isinstance(value, types.ModuleType) and cls.__module__.startswith(value.__name__):
            rest = cls.__module__[len(value.__name__):].strip(".").split(".")
            for k in range(len(rest) + 1):
                parts = [p for p in rest[:k] if p]
                holder: object = value
                for p in parts:
                    holder = getattr(holder, p, None)
                if getattr(holder, cls.__name__, None) is cls:
                    found.append(".".join([name, *parts, cls.__name__]))
                    break
    return min(found, key=lambda s: (len(s), s)) if found else None


def _layer_condition(runs: Sequence[nn.Module], others: Sequence[nn.Module], receiver: str,
                     module: types.ModuleType) -> str | None:
    """`isinstance(self.<layer>, <classes>)`, true on every module of `runs` and on none of
    `others`, for the first layer of theirs whose classes tell them apart; None if none."""
    for name in runs[0]._modules:
        if not name.isidentifier() or not all(name in m._modules for m in (*runs, *others)):
            continue
        held = [m._modules[name] for m in runs]
        if any(layer is None for layer in held):
            continue
        classes = tuple(dict.fromkeys(type(layer) for layer in held))
        if any(isinstance(m._modules[name], classes) for m in others):
            continue
        spelled = [class_spelling(k, module) for k in classes]
        if any(s is None for s in spelled):
            continue
        kinds = spelled[0] if len(spelled) == 1 else f"({', '.join(spelled)})"  # type: ignore[arg-type]
        return f"isinstance({receiver}.{name}, {kinds})"
    return None


def _runs_and_others(analysis: Analysis, span: Span, clusters: Sequence[Cluster]
                     ) -> tuple[list[nn.Module], list[nn.Module]] | str:
    """The modules whose calls formed `clusters` and the class's other instances, or why
    they cannot be told apart."""
    runs: dict[int, nn.Module] = {}
    for c in clusters:
        path = self_path_of(analysis, c, span.scope)
        if not path:  # the root module, or not known: no other instance to tell apart
            return f"the module that runs cluster {c.index} cannot be told from the others"
        layer = analysis.module.get_submodule(path)
        runs[id(layer)] = layer
    others = {id(m): m for _, m in analysis.module.named_modules()
              if span.scope.owned_by(m) and id(m) not in runs}
    if not others:
        return "that call runs on a module whose other call forms the cluster"
    return list(runs.values()), list(others.values())


def select_by_skipped(analysis: Analysis, span: Span, clusters: Sequence[Cluster],
                      tests: Sequence[ast.expr]) -> Selection | None:
    """Where the `if`s the clusters' calls skipped (skipped.py) tell the instances apart:
    their negated conditions, which hold on every module whose calls formed the clusters,
    when every other instance of the class fails one of them (runs one of those bodies)."""
    receiver = span.scope.receiver
    found = _runs_and_others(analysis, span, clusters)
    if receiver is None or not tests or isinstance(found, str):
        return None
    runs, others = found

    def skips_all(m: nn.Module) -> bool:
        return all(settled_value(t, receiver, m) is False for t in tests)

    if not all(skips_all(m) for m in runs) or any(
            skips_all(m) or any(settled_value(t, receiver, m) is None for t in tests)
            for m in others):
        return None
    return Selection(skipped_condition(span.src, tests), frozenset(id(m) for m in others))


def select_instances(analysis: Analysis, span: Span, clusters: Sequence[Cluster]
                     ) -> Selection | str:
    """The condition that runs the edit's kernel on the calls that formed `clusters` only,
    or why there is none."""
    receiver = span.scope.receiver
    module = _module_of_file(span.src.path)
    if receiver is None or module is None:
        return (f"`{span.scope}` has no module of its own to test" if receiver is None
                else f"{span.src.path} is not a loaded module to spell a class in")
    found = _runs_and_others(analysis, span, clusters)
    if isinstance(found, str):
        return found
    runs, others = found
    condition = _layer_condition(runs, others, receiver, module)
    if condition is None:
        return (f"no layer of `{span.scope.class_name}` has a class (named in the file) on "
                "the modules whose calls form the kernel's clusters that it lacks on the "
                "others, for an `if isinstance(...)` to run the kernel there only")
    return Selection(condition, frozenset(id(m) for m in others))
