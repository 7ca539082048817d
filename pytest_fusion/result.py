"""One analysed model as a test sees it: ``FusionResult``, and the assertions on it.

Reads an ``Analysis``; holds its ``Snapshot``, the raw measurement, and the kernels
generated for it (``GeneratedKernels``: each cluster's kernel, generated once per analysis
and reused by the snapshot, the measure hook and the HTML page). The assertion methods
(``assert_fused``, ``assert_no_rejection``, ``assert_traffic_saved``) raise
``AssertionError`` with the clusters and rejections spelled out; ``assert_fused`` puts the
cause above them (``fusion_core.why_apart``: what keeps the named ops apart, at their lines).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fusion_core.units import counted

from .compare import fmt_bytes
from .snapshot import Snapshot


@dataclass(frozen=True)
class GeneratedKernels:
    """Each cluster's kernel (``fusion_core.Kernel``), or one line saying why none was."""

    kernels: Mapping[int, Any]  # cluster index -> fusion_core.Kernel
    failed: Mapping[int, str]  # cluster index -> why code generation failed

    @property
    def kinds(self) -> dict[int, tuple[str | None, str]]:
        """Cluster index -> (kernel kind, "") or (None, why): what the snapshot stores."""
        out: dict[int, tuple[str | None, str]] = {i: (None, why) for i, why in
                                                  self.failed.items()}
        for i, k in self.kernels.items():
            out[i] = (k.skeleton + (" (looped)" if k.looped else ""), "")
        return out

    @property
    def sources(self) -> dict[int, tuple[str, str]]:
        """Cluster index -> (kernel source, "") or ("", why): what the HTML page shows."""
        out = {i: ("", why) for i, why in self.failed.items()}
        out.update((i, (k.source, "")) for i, k in self.kernels.items())
        return out


NO_KERNELS = GeneratedKernels({}, {})


def generate_kernels(analysis: Any) -> GeneratedKernels:
    """Generate every cluster's kernel once; a failure is that cluster's verdict."""
    import fusion_core

    generate = getattr(fusion_core, "generate", None)
    if generate is None:
        return NO_KERNELS
    kernels, failed = {}, {}
    for c in analysis.clusters:
        try:
            kernels[c.index] = generate(analysis, c)
        except Exception as e:  # noqa: BLE001 - any codegen failure is that cluster's verdict
            failed[c.index] = f"{type(e).__name__}: {e}".splitlines()[0]
    return GeneratedKernels(kernels, failed)


def _is_subsequence(want: Sequence[str], ops: Sequence[str]) -> bool:
    it = iter(ops)
    return all(op in it for op in want)


@dataclass(frozen=True)
class FusionResult:
    analysis: Any  # fusion_core.Analysis
    snapshot: Snapshot
    measurement: dict | None  # raw result of pytest_fusion_measure, None when not measured
    hw_key: str | None
    generated: GeneratedKernels = NO_KERNELS  # the analysis' kernels, generated once
    # {backend: our clusters beside Inductor's kernels} when a compiled record was taken
    compiled_agreement: Mapping[str, Any] | None = None
    # the same agreement typed (fusion_core's), which the HTML page's Inductor tab shows
    compiled_matches: Mapping[str, Any] | None = None

    @property
    def clusters(self):
        return self.analysis.clusters

    @property
    def frontend(self) -> str:
        """The frontend that captured the graph: "fx" or "export" (auto resolves to one)."""
        return self.analysis.graph.frontend

    @property
    def rejections(self):
        return self.analysis.rejections

    @property
    def target(self) -> str:
        """The device the analysis was made for: "cpu" or "cuda"."""
        return self.snapshot.target

    @property
    def kernels(self) -> int:
        """How many clusters got a kernel."""
        return self.snapshot.kernels

    @property
    def saved_bytes(self) -> int:
        return self.snapshot.saved_bytes

    def describe(self) -> str:
        """Every cluster and rejection, one per line (used in assertion messages)."""
        s = self.snapshot
        lines = [f"{s.model}: {counted(len(s.clusters), 'cluster')}"]
        lines += [f"  cluster `{c.chain}` ({c.category}){f' in {c.module}' if c.module else ''}"
                  f" at {c.lines}" for c in s.clusters]
        lines += [f"  rejected: {r.check} on `{r.chain}` at {r.lines}: {r.reason}"
                  for r in s.rejections]
        return "\n".join(lines)

    # ------------------------------------------------------------ assertions
    def assert_fused(self, ops: Sequence[str]) -> None:
        """Some cluster contains `ops`, in this order (other ops may sit between)."""
        __tracebackhide__ = True
        if not any(_is_subsequence(ops, c.ops) for c in self.snapshot.clusters):
            causes = "".join(f"\n{n}" for n in self._causes(ops))
            raise AssertionError(f"`{' → '.join(ops)}` are not fused together.{causes}\n"
                                 + self.describe())

    def _causes(self, ops: Sequence[str]) -> tuple[str, ...]:
        """Why `ops` are not one cluster, one line each, before the clusters (`describe`):
        the plugin's promise is that a failing fusion test names its cause."""
        if not ops or getattr(self.analysis, "graph", None) is None:
            return ()  # a result built from a snapshot alone knows no graph to explain
        import fusion_core

        return fusion_core.why_apart(self.analysis, ops)

    def assert_no_rejection(self, check: str | None = None) -> None:
        """No candidate was rejected (for the given legality check, when given)."""
        __tracebackhide__ = True
        bad = [r for r in self.snapshot.rejections if check is None or r.check == check]
        if bad:
            what = f"`{check}` rejection" if check else "rejection"
            raise AssertionError(f"expected no {what}, found {len(bad)}:\n" + "\n".join(
                f"  {r.check} on `{r.chain}` at {r.lines}: {r.reason}" for r in bad))

    def assert_traffic_saved(self, at_least: int | None = None,
                             fraction: float | None = None) -> None:
        """Fusion saves at least `at_least` bytes and/or `fraction` of the unfused traffic."""
        __tracebackhide__ = True
        s = self.snapshot
        got = s.saved_bytes
        if at_least is not None and got < at_least:
            raise AssertionError(f"fusion saves {fmt_bytes(got)} ({got} B), expected at least "
                                 f"{fmt_bytes(at_least)} ({at_least} B)\n" + self.describe())
        share = got / s.unfused_bytes if s.unfused_bytes else 0.0
        if fraction is not None and share < fraction:
            raise AssertionError(f"fusion saves {share:.0%} of the cluster traffic, expected at "
                                 f"least {fraction:.0%}\n" + self.describe())
