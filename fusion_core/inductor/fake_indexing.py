"""Python indexing (`w[0]`, `w[1:3]`, `w[:, 0]`, `w[None]`, `y[i] = v`) of fake cuda tensors.

Why: `Tensor.__getitem__` / `__setitem__` are C++ entry points that open a device guard on
the indexed tensor's device before any op runs; a CPU build of torch has no CUDA guard
("PyTorch is not linked with support for cuda devices"), so `w[0]` failed on a fake cuda
tensor where `w.select(0, 0)` (an op, never guarded) works.

How: the same C++ indexing runs on `meta` stand-ins of the tensors (same sizes, strides,
dtypes; `meta` needs no guard) while its ops are recorded; the recorded ops then run again on
the real tensors, under the capture's modes, so the graph gets the ops torch's own indexing
makes (select, slice, unsqueeze, alias, index, copy_, index_put_, ...). It runs on a GPU
machine too, so both take one path. Known limits: an index of Python `True`/`False` builds
its index tensor with `zeros` where CUDA uses `empty` + `fill_` (same values); a list index
is a tensor made from Python data on the GPU, which a CPU build cannot make (the error says
to use a buffer); a boolean mask needs `nonzero`, which on a CPU build fails on fake cuda
tensors by itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

_INDEXING = (torch.Tensor.__getitem__, torch.Tensor.__setitem__)
_META = torch.device("meta")
_INDEX = torch.ops.aten.index.Tensor


@dataclass(frozen=True)
class _Call:
    func: Any  # an OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    out: Any


class _Recorder(TorchDispatchMode):
    """The ops that reach the dispatcher, outermost only (a running op's own ops are not)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[_Call] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        try:
            out = func(*args, **(kwargs or {}))
        except Exception:
            # A boolean mask's `index` has a data-dependent size `meta` cannot give; it
            # is getitem's last op, so the capture's own fake mode can run it (replay).
            if func is not _INDEX:
                raise
            self.calls.append(_Call(func, args, dict(kwargs or {}), None))
            raise _LastIndex from None
        self.calls.append(_Call(func, args, dict(kwargs or {}), out))
        return out


class _LastIndex(Exception):
    """Getitem stopped at its final `index`, recorded but not run on `meta`."""


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def replay_indexing(func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """`func` (`Tensor.__getitem__` or `__setitem__`) on `args`, without a device guard."""
    device = args[0].device
    real: dict[int, Any] = {}  # id of a meta tensor -> the tensor it stands for
    keep: list[torch.Tensor] = []  # the meta tensors stay alive, so their ids stay unique

    def stand(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        s = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=_META)
        real[id(s)] = x
        keep.append(s)
        return s

    # C++ indexing reads tensors as the indexed one, the index, an element of a tuple or
    # list index, and the value to set.
    with _disable_current_modes():  # the stand-ins and their ops stay out of the capture
        index = args[1]
        if isinstance(index, (tuple, list)):
            index = type(index)(stand(x) for x in index)
        met = (stand(args[0]), stand(index), *map(stand, args[2:]))
        with torch._C.DisableTorchFunction(), _Recorder() as recorder:
            try:
                out, last = func(*met), False
            except _LastIndex:
                if func is not torch.Tensor.__getitem__:  # setitem never ends in `index`
                    raise
                out, last = None, True

    def back(x: Any) -> Any:
        if isinstance(x, torch.device) and x == _META:
            return device
        if isinstance(x, torch.Tensor) and x.device == _META:
            if id(x) not in real:  # made by C++ from Python data, outside the dispatcher
                raise IndexError("an index of Python data (a list) becomes a cuda tensor "
                                 "here, which needs a GPU: index with a tensor buffer "
                                 "instead (register_buffer)")
            return real[id(x)]
        return x

    for call in recorder.calls:
        again = call.func(*tree_map(back, call.args), **tree_map(back, call.kwargs))
        for made, remade in zip(_tensors(call.out), _tensors(again), strict=call.out is not None):
            real[id(made)] = remade
            keep.append(made)
    return again if last else tree_map(back, out)


class GuardFreeIndexing(TorchFunctionMode):
    """Runs Python indexing of cuda tensors through `replay_indexing` (see the module)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if (func in _INDEXING and not kwargs and isinstance(args[0], torch.Tensor)
                and args[0].device.type == "cuda"):
            return replay_indexing(func, args)
        return func(*args, **(kwargs or {}))
