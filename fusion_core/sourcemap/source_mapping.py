"""What the source map says about one cluster: a ``SourceMapping``.

Reads nothing and writes nothing: the record ``mapping.py`` makes per cluster and the
console table, the JSON report, the HTML page and ``--apply`` read.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..analysis.types import Cluster


class MapQuality(StrEnum):
    """How a cluster maps to the user's source; the value is what the console table, the
    JSON report and the HTML page show."""

    EXACT = "exact"  # a diff: the range's statements become one call of the kernel
    POINTER = "pointer"  # the file and line range (when known) and the reason, no diff


EXACT, POINTER = MapQuality.EXACT, MapQuality.POINTER


@dataclass(frozen=True)
class ServedPart:
    """Ops of another cluster that another call of the edited lines runs there (served.py):
    the edit computes them with `call`'s kernel; the rest of that cluster stays as written."""

    part: Cluster  # the holder's index, its nodes on these lines, their inputs and outputs
    call: str  # the fused function the edit calls for them
    site: str  # the other call, `at line 34 (`h = self.b2(h, emb)`)`


@dataclass(frozen=True)
class SourceMapping:
    cluster_index: int
    quality: MapQuality
    file: str | None
    start: int | None
    end: int | None
    reason: str | None = None  # why it is a pointer; None when exact
    replacement: str | None = None  # the line replacing start..end (exact only), indented
    function: str | None = None  # `CausalSelfAttention.forward`
    call: str | None = None  # the fused function the replacement calls, e.g. `cluster0`
    args: tuple[str, ...] = ()  # source expression per cluster input, in `Cluster.inputs` order
    shared_with: tuple[int, ...] = ()  # clusters the same lines form in other calls
    digest: str | None = None  # sha256 of the file content this mapping was made from
    original: str | None = None  # the text of lines start..end (exact only)
    # Source expressions the kernel holds as constants, with their value at analysis time.
    baked: tuple[str, ...] = ()
    # Every fused function the replacement calls, when the statement holds several clusters'
    # parts (`self.p(cluster0(a)) @ cluster1(b)`; their clusters are in `shared_with`).
    calls: tuple[str, ...] = ()
    # Other clusters' ops that other calls run on these lines; not applied by this edit.
    serves: tuple[ServedPart, ...] = ()
    # Clusters whose edits must be written with this one: this edit drops a value (`r = x + h`)
    # their kernels recompute, and their edits no longer read it.
    needs: tuple[int, ...] = ()
    # Import lines the replacement needs that the file lacks (`import torch.nn.functional as
    # F` for a layer's call spelled without its bias: unbiased.py); --apply adds them.
    imports: tuple[str, ...] = ()
    # Where other calls run the lines unfused: the test true on the instances whose calls
    # formed the clusters (`isinstance(self.act, nn.SiLU)`, selected.py); the others run
    # the lines as written. train_mode.py writes the `if`.
    condition: str | None = None
    # Lines forming a kernel per layer class in different calls: (condition, replacement)
    # for each, written as one `if` / `elif` edit (train_mode.py); `replacement` is the first.
    branches: tuple[tuple[str, str], ...] = ()

    @property
    def edit_calls(self) -> tuple[str, ...]:
        """The fused functions the replacement calls."""
        return self.calls or ((self.call,) if self.call else ())

    @property
    def exact(self) -> bool:
        return self.quality == EXACT

    @property
    def where(self) -> str:
        if self.file is None:
            return "(no source)"
        tail = f"{self.start}" if self.start == self.end else f"{self.start}-{self.end}"
        return f"{self.file}:{tail}"
