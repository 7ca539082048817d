"""The normalized graph every pass after capture reads.

Both capture frontends (FX symbolic tracing and ``torch.export``) produce a
``FusionGraph``: one ``Node`` per value, in topological order, with the op
resolved through the registry (``op``/``kind``), tensor operands as ``Ref``
names, every other argument folded into ``params``, and the propagated
``TensorMeta`` and ``SourceLoc``. Nothing downstream looks at FX targets again.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch


class OpKind(enum.Enum):
    POINTWISE_UNARY = "pointwise-unary"
    POINTWISE_BINARY = "pointwise-binary"  # two or more tensor-or-scalar operands
    REDUCTION = "reduction"
    # Values made from their own index alone (`arange`): no operands, nothing to load.
    GENERATOR = "generator"
    # `torch.cat`: each result element is one operand's element, the operand picked by the
    # coordinate along the cat dim (a piecewise index map, ``codegen/indexing.py``).
    CONCAT = "concat"
    OPAQUE = "opaque"
    # Known, but never computed inside a kernel: they feed the aliasing check.
    VIEW = "view"
    INPLACE = "inplace"
    # Graph structure.
    INPUT = "input"  # placeholder
    CONSTANT = "constant"  # parameter or buffer (get_attr)
    OUTPUT = "output"

    @property
    def is_pointwise(self) -> bool:
        """Each element depends on its own position only (a generator on nothing else)."""
        return self in (OpKind.POINTWISE_UNARY, OpKind.POINTWISE_BINARY, OpKind.GENERATOR)

    @property
    def is_compute(self) -> bool:
        """Ops a fused kernel computes (pointwise, reductions and concatenations)."""
        return self.is_pointwise or self in (OpKind.REDUCTION, OpKind.CONCAT)


@dataclass(frozen=True)
class Ref:
    """A tensor operand: the name of the node producing it."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: torch.dtype
    stride: tuple[int, ...]
    # Where the value lives ("cpu", "cuda:0", "meta"); "" where nobody said (a graph built
    # by hand). Not part of equality: layouts are compared, devices read alone.
    device: str = field(default="", compare=False)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride), strict=True):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        return cls(tuple(t.shape), t.dtype, tuple(t.stride()), str(t.device))


@dataclass(frozen=True)
class SourceLoc:
    """Where in the user's code a node came from (innermost user frame)."""

    file: str
    line: int
    function: str
    code: str = ""
    # The next-outer user frame (the line that called `function`), itself with its caller:
    # lets a source edit replace a whole call of the user's own module or helper. Not part
    # of equality: the same line reached from two call sites is still one place.
    caller: SourceLoc | None = field(default=None, compare=False, repr=False)

    @property
    def chain(self) -> tuple[SourceLoc, ...]:
        """This frame and its callers, outermost first."""
        out: list[SourceLoc] = []
        loc: SourceLoc | None = self
        while loc is not None:
            out.append(loc)
            loc = loc.caller
        return tuple(reversed(out))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


# `h.shape`, `h.ndim`, `h.size(-1)`, `h.dim()`, `h.numel()`: reads of a tensor's shape alone,
# the same in the graph (``normalize._shape_read``) and in the source (``pysource``).
SHAPE_ATTRS = frozenset({"shape", "ndim"})
SHAPE_METHODS = frozenset({"size", "dim", "ndimension", "numel"})
# `x.dtype`, `h.device`: tensor attributes read alone, no data (``normalize._shape_read`` marks
# them `dtype_of`, `device_of`); analysis answers them from the group's inputs
# (``analysis/metadata_reads.py``).
METADATA_ATTRS = ("dtype", "device")
# Such a read's params key: the nodes that take its value (a cast keeps no edge to it).
READ_BY = "read_by"


@dataclass(frozen=True)
class Node:
    name: str
    op: str  # registry name ("mul", "softmax"), or "input"/"constant"/"output"/"opaque"
    kind: OpKind
    inputs: tuple[Any, ...] = ()  # Ref for tensors, plain Python values otherwise
    params: tuple[tuple[str, Any], ...] = ()
    meta: TensorMeta | None = None
    source: SourceLoc | None = None
    target: str = ""  # what the user wrote, for messages: "F.relu", "self.proj1"
    copy_of: str = ""  # a recomputed copy of this node (see analysis/recompute.py)
    module: str = ""  # innermost module it ran in: "blocks.3.mlp"; "" for the model itself

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.inputs if isinstance(a, Ref))

    def param(self, key: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k == key:
                return v
        return default

    @property
    def shape_of(self) -> str:
        """The tensor whose shape alone this node reads (`h.shape`, `h.size(-1)`), or ""."""
        return self.param("shape_of", "") if self.op == "meta" else ""

    @property
    def dtype_of(self) -> str:
        """The tensor whose dtype alone this node reads (`x.dtype`), or ""."""
        return self.param("dtype_of", "") if self.op == "meta" else ""

    @property
    def device_of(self) -> str:
        """The tensor whose device alone this node reads (`h.device`), or ""."""
        return self.param("device_of", "") if self.op == "meta" else ""

    @property
    def metadata_read(self) -> tuple[str, str]:
        """(attribute, tensor) when this node reads only that tensor's dtype or device
        (`("device", "h")` for `h.device`: ``METADATA_ATTRS``), else ("", "")."""
        if self.op == "meta":
            for attr in METADATA_ATTRS:
                if of := self.param(f"{attr}_of", ""):
                    return attr, of
        return "", ""

    @property
    def metadata_of(self) -> str:
        """The tensor whose dtype or device alone this node reads, or ""."""
        return self.metadata_read[1]

    @property
    def label(self) -> str:
        """Short name for messages: `self.proj1` for module calls, else the node name."""
        return self.target if self.target.startswith("self.") else self.name

    @property
    def op_label(self) -> str:
        """For prose beside a line number: `self.proj1` for module calls, else the op the
        user called (`add`), not the graph's node name (`add_6`), which they never wrote."""
        return self.target if self.target.startswith("self.") else self.op


@dataclass(frozen=True)
class FusionGraph:
    name: str  # model class name
    nodes: tuple[Node, ...]
    frontend: str = "fx"  # "fx" or "export"
    _index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._index.update({n.name: i for i, n in enumerate(self.nodes)})

    def __getitem__(self, name: str) -> Node:
        return self.nodes[self._index[name]]

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def position(self, name: str) -> int:
        return self._index[name]

    @cached_property
    def users(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for r in dict.fromkeys(n.refs):
                out[r].append(n.name)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def fixed(self) -> frozenset[str]:
        """Values computed from parameters and buffers only (one pass in graph order): their
        shapes do not follow the model inputs', so a batch of 1 is none of their dims."""
        out: set[str] = set()
        for n in self.nodes:
            if n.kind is OpKind.CONSTANT or (
                    n.kind not in (OpKind.INPUT, OpKind.GENERATOR) and n.refs
                    and all(r in out for r in n.refs)):
                out.add(n.name)
        return frozenset(out)

    @cached_property
    def device(self) -> str:
        """Where the model computes, and its kernels run, as its ``TensorMeta.device`` says:
        the device other than the CPU its inputs and parameters are on, the most common where
        several (a CUDA model may take a CPU tensor too, a CPU position table or a 0-dim
        scalar, which torch reads there or the model moves); else the CPU; "" where no meta
        says."""
        devices = [n.meta.device for n in self.nodes if n.kind in _HOLDERS
                   and n.meta is not None and n.meta.device]
        elsewhere = Counter(d for d in devices if d != "cpu")  # ties: the first seen
        return elsewhere.most_common(1)[0][0] if elsewhere else "cpu" if devices else ""

    @cached_property
    def source_files(self) -> tuple[str, ...]:
        """The files of the user frames the nodes ran in, their own lines and the calls that
        reached them, in graph order: a model whose blocks or helpers (or whose forward, where
        its ops are in a function it calls) live in other files spans several."""
        return tuple(dict.fromkeys(f.file for n in self.nodes if n.source is not None
                                   for f in n.source.chain))

    @property
    def compute_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind not in _STRUCTURAL)

    @property
    def inputs(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind is OpKind.INPUT)


_STRUCTURAL = (OpKind.INPUT, OpKind.CONSTANT, OpKind.OUTPUT)
_HOLDERS = (OpKind.INPUT, OpKind.CONSTANT)  # what the model computes from: its device's
