"""Measured fields: where they come from and how they become baseline data.

Measurements come from the ``pytest_fusion_measure(analysis, config, device, kernels)``
hook (first non-None result wins; ``device`` is the analysis target, ``cpu`` or ``cuda``;
``kernels`` the kernels already generated for the analysis; an implementation may take
any subset of these arguments).
The plugin calls it only where the target can run: never for a ``cuda`` target on a
machine without CUDA. Its own fallback implementation calls
``fusion_core.measure(analysis)`` when fusion_core exports it and CUDA is available (our
kernels are Triton kernels: they run on the GPU whichever target the clusters were
analysed for). Either returns ``None`` (nothing measured, e.g. no
CUDA; a conftest's ``None`` lets the fallback measure), ``{}`` (measure nothing, even
with CUDA) or a dict::

    {"device": {"name": "NVIDIA H200", "capability": [9, 0]},
     "clusters": [{"index": 0,                      # Cluster.index
                   "kernel_us": [41.2, 40.9, ...],  # repeated timings of our kernel
                   "eager_us": [108.0, ...],        # optional: the eager subgraph
                                                    # (same count: judged kernel_i/eager_i)
                   "gbps": 3400.0,                  # optional: achieved bandwidth
                   "regime": "dram-bound"}],        # optional: launch-bound | l2-resident | ...
     "model": {"fused_us": [...], "eager_us": [...]},  # optional: whole model
     "clock": "device"}                             # optional: "host" when absent

Timings are lists of repeated samples (at least 3, better 10+), so the
comparison can judge significance rather than one number. ``clock`` says how the judged
figures were taken: "device" (CUDA-graph replays: the kernels' own time, which
``fusion_core.measure`` gives on CUDA) or "host" (a clock around each call, launch
included); a cluster's ``kernel_host_us``/``eager_host_us`` and the model's
``fused_host_us``/``eager_host_us`` keep host figures beside device ones (recorded, never
judged).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import tempfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the data model loads when something is measured
    from .snapshot import ClusterRec, Measured


class FusionHookSpecs:
    @pytest.hookspec(firstresult=True)
    def pytest_fusion_measure(self, analysis: Any, config: pytest.Config, device: str,
                              kernels: Any) -> dict | None:
        """Measure the analysis' generated kernels on this machine, or return None.

        `device` is the target the analysis was made for ("cpu" or "cuda"); `kernels` the
        kernels the plugin generated for this analysis (``result.GeneratedKernels``), or
        None when they are to be generated here (a timing shape is another analysis)."""


def hardware_key(device: dict[str, Any]) -> str:
    """`NVIDIA H200 sm_90`: GPU name and compute capability."""
    major, minor = (list(device.get("capability") or [0, 0]) + [0, 0])[:2]
    return f"{device.get('name', 'unknown GPU')} sm_{major}{minor}"


def _floats(xs: Any) -> tuple[float, ...]:
    return tuple(float(x) for x in (xs or ()))


def _count(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) and x > 0 else None


def to_measured(result: dict[str, Any], clusters: Sequence[ClusterRec],
                inputs: tuple[str, ...] = (), index_map: dict[int, int] | None = None
                ) -> tuple[str, Measured]:
    """Convert a measure() result into (hardware key, Measured) keyed by cluster identity.

    `clusters` are the snapshot's, in the analysis' order (`Cluster.index`); `inputs` the
    shapes the timings were taken at; `index_map` takes the measured analysis' cluster
    indices to the snapshot's when the timings were taken on another analysis (a timing
    shape), and leaves out clusters it does not name.
    """
    from .snapshot import CLOCKS, ClusterTiming, Measured

    timings = []
    for entry in result.get("clusters") or ():
        i = entry.get("index")
        if index_map is not None:
            i = index_map.get(i) if isinstance(i, int) else None
        if not isinstance(i, int) or not 0 <= i < len(clusters) or not entry.get("kernel_us"):
            continue
        timings.append(ClusterTiming(
            cluster=clusters[i].ident, kernel_us=_floats(entry["kernel_us"]),
            eager_us=_floats(entry.get("eager_us")), gbps=entry.get("gbps"),
            regime=entry.get("regime"), kernel_host_us=_floats(entry.get("kernel_host_us")),
            eager_host_us=_floats(entry.get("eager_host_us"))))
    model = result.get("model") or {}
    clock = result.get("clock", "host")
    return hardware_key(result.get("device") or {}), Measured(
        clusters=tuple(timings), model_us=_floats(model.get("fused_us")),
        model_eager_us=_floats(model.get("eager_us")),
        date=datetime.date.today().isoformat(), clock=clock if clock in CLOCKS else "host",
        inputs=tuple(inputs), model_host_us=_floats(model.get("fused_host_us")),
        model_eager_host_us=_floats(model.get("eager_host_us")),
        model_launches=_count((model.get("kernels_per_forward") or {}).get("fused")))


def default_measure(analysis: Any, device: str, kernels: Any = None) -> dict | None:
    """fusion_core.measure when it exists and CUDA is present; else None.

    `kernels` (``result.GeneratedKernels``): the analysis' kernels, already generated.
    Timings are taken holding the GPU's lock, so xdist workers (or two pytest runs) that
    share one GPU take turns instead of timing each other's kernels."""
    import torch

    import fusion_core

    fn = getattr(fusion_core, "measure", None)
    if fn is None or not torch.cuda.is_available():
        return None
    with device_lock(_device_id()):
        if kernels is None:
            return fn(analysis)
        return fn(analysis, kernels=kernels.kernels, failed=kernels.failed)


def _device_id() -> str:
    """The current CUDA device's UUID (the same GPU under any CUDA_VISIBLE_DEVICES)."""
    import torch

    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return str(uuid) if uuid is not None else f"cuda{index}"


@contextlib.contextmanager
def device_lock(device_id: str, blocking: bool = True) -> Iterator[None]:
    """Hold an exclusive lock named after `device_id` in the temp folder; BlockingIOError
    when `blocking` is False and another holder has it. No lock where flock does not exist."""
    try:
        import fcntl
    except ImportError:  # Windows: timings may overlap, as before
        yield
        return
    name = "fusion-advisor-" + "".join(c if c.isalnum() else "-" for c in device_id) + ".lock"
    with open(os.path.join(tempfile.gettempdir(), name), "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def local_device() -> str:
    """`cpu` or the hardware key of CUDA device 0 (for provenance and the header)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    props = torch.cuda.get_device_properties(0)
    return hardware_key({"name": props.name, "capability": [props.major, props.minor]})


def median_speedup(eager: tuple[float, ...], fused: tuple[float, ...]) -> float | None:
    """median(eager) / median(fused), the speedup shown in the report."""
    from statistics import median

    if not eager or not fused or median(fused) <= 0:
        return None
    return median(eager) / median(fused)
