"""The `fusion_advisor` fixture: analyze a model, assert on it, check it against the baseline.

Reads a model (instance, class or factory, with ``model_kwargs`` for the last two, or
a path to a .py file, ``file.py:NAME`` or ``package.module:NAME``) and example inputs;
returns a ``FusionResult`` (the ``Analysis`` plus its snapshot and any measurements).
Assertion helpers raise ``AssertionError`` with the clusters and rejections spelled out;
``check`` compares with the test's baseline through the session and fails the test with
the reviewer-facing message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pytest

from .compare import CHECKS, Tolerances, fmt_bytes
from .compiled_bounds import BOUNDS, check_bound_values, exceeded
from .measure import to_measured
from .options import CAPTURES, check_improvements, check_target, check_tolerance
from .session import TestRecord
from .snapshot import Snapshot, from_analysis
from .timing_shape import timing_analysis

if TYPE_CHECKING:  # fusion_core loads on first use (see fusion_core/__init__.py)
    from fusion_core.errors import Fix

TOLERANCE_ARGS = {"traffic_tolerance": "traffic", "timing_tolerance": "timing",
                  "timing_alpha": "alpha", "timing_min_bytes": "min_bytes"}
MARKER_KEYWORDS = ("dtype", "checks", *TOLERANCE_ARGS, "capture", "device", "improvements",
                   "model_kwargs", "timing_inputs", "compiled", "compiled_shapes", *BOUNDS)


@dataclass(frozen=True)
class FusionResult:
    analysis: Any  # fusion_core.Analysis
    snapshot: Snapshot
    measurement: dict | None  # raw result of pytest_fusion_measure, None when not measured
    hw_key: str | None
    # {backend: our clusters beside Inductor's kernels} when a compiled record was taken
    compiled_agreement: Mapping[str, Any] | None = None

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
        return self.snapshot.kernels

    @property
    def saved_bytes(self) -> int:
        return self.snapshot.saved_bytes

    def describe(self) -> str:
        """Every cluster and rejection, one per line (used in assertion messages)."""
        s = self.snapshot
        lines = [f"{s.model}: {len(s.clusters)} cluster(s)"]
        lines += [f"  cluster `{c.chain}` ({c.category}){f' in {c.module}' if c.module else ''}"
                  f" at {c.lines}" for c in s.clusters]
        lines += [f"  rejected: {r.check} on `{r.chain}` at {r.lines}: {r.reason}"
                  for r in s.rejections]
        return "\n".join(lines)


def generated_kernels(analysis: Any) -> dict[int, tuple[str | None, str]]:
    """Cluster index -> (kernel kind, "") or (None, why code generation failed)."""
    import fusion_core

    generate = getattr(fusion_core, "generate", None)
    if generate is None:
        return {}
    out: dict[int, tuple[str | None, str]] = {}
    for c in analysis.clusters:
        try:
            k = generate(analysis, c)
        except Exception as e:  # noqa: BLE001 - any codegen failure is that cluster's verdict
            out[c.index] = (None, f"{type(e).__name__}: {e}".splitlines()[0])
            continue
        out[c.index] = (k.skeleton + (" (looped)" if k.looped else ""), "")
    return out


def _as_checks(checks: str | Sequence[str] | None) -> tuple[str, ...]:
    if checks is None:
        return CHECKS
    return (checks,) if isinstance(checks, str) else tuple(checks)


def _is_subsequence(want: Sequence[str], ops: Sequence[str]) -> bool:
    it = iter(ops)
    return all(op in it for op in want)


def build_model(model: Any, model_kwargs: Mapping[str, Any] | None = None):
    """An nn.Module from an instance, a class or factory called with `model_kwargs`, or a
    .py path (`file.py:NAME`, `package.module:NAME`) whose class or factory is."""
    import torch.nn as nn

    import fusion_core

    if model_kwargs is not None and not isinstance(model_kwargs, Mapping):
        raise fusion_core.FusionAdvisorError(
            f"model_kwargs must be a dict of keyword arguments, got "
            f"{type(model_kwargs).__name__}: e.g. model_kwargs={{'dim': 64}}")
    if isinstance(model, nn.Module):
        if model_kwargs:
            raise fusion_core.FusionAdvisorError(
                f"model_kwargs were given with a model already built ({type(model).__name__} "
                "instance): pass its class or a factory instead, or drop model_kwargs")
        return model
    if isinstance(model, (str, os.PathLike)):
        return fusion_core.load_model(model, model_kwargs=model_kwargs)
    if callable(model):
        return fusion_core.build_model(model, model_kwargs)
    raise fusion_core.FusionAdvisorError(
        f"cannot build a model from {model!r}: pass an nn.Module, its class or a function "
        "returning one (with model_kwargs for their arguments), or the path of a .py file")


def build_inputs(inputs: Sequence[Any], dtype: Any = None) -> list[Any]:
    """Shapes given as strings or tuples take `dtype`; tensors and InputSpecs pass through."""
    import fusion_core

    dt = fusion_core.parse_dtype(dtype) if dtype is not None else None
    out = []
    for x in inputs:
        if isinstance(x, str):
            x = fusion_core.InputSpec.parse(x, dt or "float32")
        elif isinstance(x, (tuple, list)) and dt is not None:
            x = fusion_core.InputSpec(tuple(x), dt)
        out.append(x)
    return out


def fixes(call: str) -> dict[Fix, str]:
    """fusion_core's fixes outside the model (errors.Fix) in a test's terms: the
    arguments of `call`, where the test gave the model and its example inputs."""
    from fusion_core.errors import Fix

    return {Fix.MODEL_FILE: f"give {call} the path of a .py file, or the model's class",
            Fix.MODEL_CLASS: f"give {call} the class itself instead of the file's path",
            Fix.SHAPE_TEXT: "give a shape as a tuple of positive ints, e.g. (16384, 1024), or "
                            "as a string of them separated by commas, e.g. '16384,1024'",
            Fix.INPUTS: f"check the example inputs given to {call}: their shapes and dtypes",
            Fix.INPUT_COUNT: f"give {call} one example input per argument of forward",
            Fix.EXPORT: f'try torch.export instead (capture="export" in {call}, or '
                        "fusion_capture = export in the ini file)",
            # `{example_py}` and `{label}` are filled in by the error (errors.Fix)
            Fix.MODEL_ARGS: f"pass them as model_kwargs={{example_py}} in {call}, or give "
                            "it a function that builds the model with no arguments (e.g. "
                            "functools.partial({label}, ...)) or the model itself",
            Fix.MODEL_KWARGS: f"check the names given as model_kwargs in {call}"}


class FusionAdvisor:
    def __init__(self, item: pytest.Item, plugin: Any) -> None:
        self.item, self.plugin = item, plugin
        self.checked = False
        self.checked_result: FusionResult | None = None  # what check() compared (HTML page)
        self._marker_result: FusionResult | None = None
        self.last_result: FusionResult | None = None  # named in the report if check() never ran

    # ------------------------------------------------------------ analysis
    def analyze(self, model: Any, *inputs: Any, dtype: Any = None, measure: bool = True,
                capture: str | None = None, device: str | None = None,
                model_kwargs: Mapping[str, Any] | None = None,
                timing_inputs: Sequence[Any] | None = None, compiled: bool | None = None,
                compiled_shapes: Sequence[Sequence[Any]] = (),
                **compiled_bounds: int) -> FusionResult:
        """Analyze `model` for the example inputs (tensors, shapes, InputSpecs).

        `model_kwargs`: the keyword arguments `model` (a class or factory) is called with.

        `capture`: "auto", "fx" or "export"; None takes the `fusion_capture` ini option.
        `device`: the target, "cpu" or "cuda"; None takes the `fusion_device` ini option.
        It is what the analysis (and the baseline) describes, possible on any machine;
        kernels are timed where CUDA is (a cuda target is not timed without it).
        `timing_inputs`: the inputs (same forms) the kernels are timed at, e.g. a larger
        batch than the analysed one; None times them at `inputs`.
        `compiled`: also record what torch.compile makes of the model (None: the
        `fusion_compiled` ini option); `compiled_shapes`: extra calls, one shape per input
        each, whose recompiles are counted. `compiled_max_kernels=N` and the other
        `compiled_max_*` bounds take the compiled record too and fail the test past them.
        """
        return self._analyze(model, inputs, dtype, measure, capture, device,
                             "fusion_advisor.analyze(...)", model_kwargs, timing_inputs,
                             compiled, compiled_shapes, compiled_bounds)

    def _analyze(self, model: Any, inputs: Sequence[Any], dtype: Any, measure: bool,
                 capture: str | None, device: str | None, call: str,
                 model_kwargs: Mapping[str, Any] | None = None,
                 timing_inputs: Sequence[Any] | None = None, compiled: bool | None = None,
                 compiled_shapes: Sequence[Sequence[Any]] = (),
                 compiled_bounds: Mapping[str, int] | None = None) -> FusionResult:
        """`analyze`; `call` names where the test gave the model and inputs, for errors."""
        import fusion_core

        bounds = dict(compiled_bounds or {})
        if bad := check_bound_values(bounds, call):
            pytest.fail(bad, pytrace=False)
        if capture is None:
            capture = self.plugin.capture
        elif capture not in CAPTURES:
            pytest.fail(f"unknown capture frontend capture={capture!r}: choose from "
                        f"{', '.join(CAPTURES)}", pytrace=False)
        if device is None:
            device = self.plugin.target
        elif problem := check_target(device, call.replace("(...)", "(device=...)")):
            pytest.fail(problem, pytrace=False)
        try:
            analysis = fusion_core.analyze(build_model(model, model_kwargs),
                                           *build_inputs(inputs, dtype),
                                           capture=capture, device=device)
        except fusion_core.FusionAdvisorError as e:
            failure = f"fusion analysis failed: {e.worded(fixes(call))}"
        else:
            failure = None
        if failure is not None:  # outside the handler: pytest would print the whole chain
            pytest.fail(failure, pytrace=False)
        rootdir = self.item.config.rootpath
        # The kernels are Triton kernels, timed on the GPU whatever the target; a cuda target
        # is not timed on a machine without CUDA (nothing there runs what it describes).
        runs_here = device == "cpu" or self.plugin.hw_key is not None
        timed, index_map = analysis, None
        if measure and runs_here and timing_inputs is not None:
            timed, index_map = timing_analysis(analysis, timing_inputs, dtype, device,
                                               call)
        raw = self.item.config.hook.pytest_fusion_measure(
            analysis=timed, config=self.item.config,
            device=device) if measure and runs_here else None
        key = self.plugin.hw_key
        snap = from_analysis(analysis, self.item.nodeid, rootdir,
                             kernels=generated_kernels(analysis), target=device)
        agreement = None
        if bounds or (self.plugin.compiled if compiled is None else compiled):
            from .compiled_gate import compiled_data  # loads torch: only when asked for

            records, agreement = compiled_data(model, model_kwargs, inputs, dtype,
                                               compiled_shapes, call, rootdir, analysis)
            snap = replace(snap, compiled=records)
            if over := exceeded(bounds, records):  # a budget: whatever the baseline says
                pytest.fail("\n".join(over), pytrace=False)
        if raw:
            taken = () if timed is analysis else tuple(str(s) for s in timed.inputs)
            key, m = to_measured(raw, snap.clusters, taken, index_map)
            if m.clusters or m.model_us:  # nothing timed (the model failed there): none stored
                snap = replace(snap, measured={key: m})
        self.last_result = FusionResult(analysis, snap, raw, key, agreement)
        return self.last_result

    @property
    def result(self) -> FusionResult:
        """The analysis described by this test's `fusion_check` marker."""
        if self._marker_result is None:
            marker = self.item.get_closest_marker("fusion_check")
            if marker is None or not marker.args:
                pytest.fail("fusion_advisor.result needs @pytest.mark.fusion_check(model, "
                            "*inputs) on the test", pytrace=False)
            unknown = sorted(set(marker.kwargs) - set(MARKER_KEYWORDS))
            if unknown:  # a typo would otherwise be ignored and a baseline written
                pytest.fail(f"fusion_check got unknown keyword(s) {', '.join(unknown)}: the "
                            f"allowed keywords are {', '.join(MARKER_KEYWORDS)}", pytrace=False)
            device = marker.kwargs.get("device")
            if device is not None and (problem := check_target(device,
                                                               "fusion_check(device=...)")):
                pytest.fail(problem, pytrace=False)
            checks = _as_checks(marker.kwargs.get("checks"))
            self._marker_result = self._analyze(marker.args[0], marker.args[1:],
                                                marker.kwargs.get("dtype"),
                                                "timings" in checks,
                                                marker.kwargs.get("capture"), device,
                                                "@pytest.mark.fusion_check(...)",
                                                marker.kwargs.get("model_kwargs"),
                                                marker.kwargs.get("timing_inputs"),
                                                marker.kwargs.get("compiled"),
                                                marker.kwargs.get("compiled_shapes", ()),
                                                {k: v for k, v in marker.kwargs.items()
                                                 if k in BOUNDS})
        return self._marker_result

    # ------------------------------------------------------------ assertions
    def assert_fused(self, result: FusionResult, ops: Sequence[str]) -> None:
        """Some cluster contains `ops`, in this order (other ops may sit between)."""
        __tracebackhide__ = True
        if not any(_is_subsequence(ops, c.ops) for c in result.snapshot.clusters):
            raise AssertionError(f"`{' → '.join(ops)}` are not fused together.\n"
                                 + result.describe())

    def assert_no_rejection(self, result: FusionResult, check: str | None = None) -> None:
        """No candidate was rejected (for the given legality check, when given)."""
        __tracebackhide__ = True
        bad = [r for r in result.snapshot.rejections if check is None or r.check == check]
        if bad:
            what = f"`{check}` rejection" if check else "rejection"
            raise AssertionError(f"expected no {what}, found {len(bad)}:\n" + "\n".join(
                f"  {r.check} on `{r.chain}` at {r.lines}: {r.reason}" for r in bad))

    def assert_traffic_saved(self, result: FusionResult, at_least: int | None = None,
                             fraction: float | None = None) -> None:
        """Fusion saves at least `at_least` bytes and/or `fraction` of the unfused traffic."""
        __tracebackhide__ = True
        s = result.snapshot
        got = s.saved_bytes
        if at_least is not None and got < at_least:
            raise AssertionError(f"fusion saves {fmt_bytes(got)} ({got} B), expected at least "
                                 f"{fmt_bytes(at_least)} ({at_least} B)\n" + result.describe())
        share = got / s.unfused_bytes if s.unfused_bytes else 0.0
        if fraction is not None and share < fraction:
            raise AssertionError(f"fusion saves {share:.0%} of the cluster traffic, expected at "
                                 f"least {fraction:.0%}\n" + result.describe())

    # ------------------------------------------------------------ baseline
    def tolerances(self, **overrides: Any) -> Tolerances:
        """ini values, overridden by the marker, overridden by `overrides`."""
        __tracebackhide__ = True
        marker = self.item.get_closest_marker("fusion_check")
        values = dict(self.plugin.ini_tolerances)
        for where, source in (("fusion_check", marker.kwargs if marker else {}),
                              ("fusion_advisor.check", overrides)):
            for arg, name in TOLERANCE_ARGS.items():
                if source.get(arg) is not None:
                    value = check_tolerance(name, source[arg], f"{where}({arg}=...)")
                    if isinstance(value, str):
                        pytest.fail(value, pytrace=False)
                    values[name] = value
        return Tolerances(**values)

    def improvements(self, given: str | None) -> str:
        """What an improvement does: `given`, else the marker's keyword, else the ini."""
        __tracebackhide__ = True
        marker = self.item.get_closest_marker("fusion_check")
        for where, value in (("fusion_advisor.check(improvements=...)", given),
                             ("fusion_check(improvements=...)",
                              marker.kwargs.get("improvements") if marker else None)):
            if value is not None:
                bad = check_improvements(value, where)
                if bad:
                    pytest.fail(bad, pytrace=False)
                return value
        return self.plugin.improvements

    def check(self, result: FusionResult, checks: Sequence[str] | None = None,
              improvements: str | None = None, **tolerances: Any) -> None:
        """Compare `result` with this test's baseline; fail the test on a regression (and
        on an improvement when `improvements="fail"`)."""
        __tracebackhide__ = True
        _, failure = self._check(result, checks, tolerances, improvements)
        if failure:
            pytest.fail(failure, pytrace=False)

    def check_marker(self) -> str | None:
        """The marker's check, made before the test body: fails the test on a regression or
        an unusable baseline; returns the message of a missing baseline instead, so the body
        (the test's own assertions) still runs before that fails the test."""
        __tracebackhide__ = True
        rec, failure = self._check(self.result, None, {}, None)
        if failure and rec.status == "missing":
            return failure
        if failure:
            pytest.fail(failure, pytrace=False)
        return None

    def _check(self, result: FusionResult, checks: Sequence[str] | None,
               tolerances: dict[str, Any], improvements: str | None
               ) -> tuple[TestRecord, str | None]:
        __tracebackhide__ = True
        if self.checked:
            pytest.fail("a test has one fusion baseline: fusion_advisor.check() was already "
                        "called, or the fusion_check marker checked this test (give the "
                        "marker the tolerances instead)", pytrace=False)
        unknown = set(tolerances) - set(TOLERANCE_ARGS)
        if unknown:
            raise TypeError(f"unknown tolerance(s) {sorted(unknown)}: use "
                            f"{', '.join(TOLERANCE_ARGS)}")
        tol = self.tolerances(**tolerances)
        fail_improvements = self.improvements(improvements) == "fail"
        self.checked = True
        self.checked_result = result
        marker = self.item.get_closest_marker("fusion_check")
        if checks is None and marker is not None:
            checks = marker.kwargs.get("checks")
        checks = _as_checks(checks)
        if not checks:  # an empty list gates nothing: say so rather than gate everything
            pytest.fail(f"checks=[] gates nothing: name at least one of {', '.join(CHECKS)}, "
                        "or leave checks out to gate them all", pytrace=False)
        bad = set(checks) - set(CHECKS)
        if bad:
            pytest.fail(f"unknown fusion check(s) {', '.join(sorted(bad))}: choose from "
                        f"{', '.join(CHECKS)}", pytrace=False)
        session = self.plugin.session
        rec, failure = session.check(result.snapshot, tol, checks, result.hw_key,
                                     fail_improvements, self.plugin.compiler_change)
        if result.snapshot.compiled:
            from .compiled_report import summary

            rec.compiled = summary(result.snapshot.clusters, result.snapshot.compiled,
                                   result.compiled_agreement or {})
        session.record(rec)
        return rec, failure
