"""The `fusion_advisor` fixture: analyze a model, assert on it, check it against the baseline.

Reads a model (instance, class or factory, with ``model_kwargs`` for the last two, or
a path to a .py file, ``file.py:NAME`` or ``package.module:NAME``) and example inputs;
returns a ``FusionResult`` (``result.py``: the ``Analysis``, its snapshot, its kernels,
generated once, and any measurements), whose methods make the assertions (the fixture's
``assert_*`` methods are aliases kept for existing tests); ``check`` compares with the
test's baseline through the session and fails the test with the reviewer-facing message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from fusion_core.units import plural

from .compare import CHECKS, Tolerances
from .compiled_bounds import BOUNDS, check_bound_values, exceeded
from .construction import describe
from .judge import Verdict
from .measure import to_measured
from .options import CAPTURES, check_improvements, check_target, check_tolerance
from .result import FusionResult, generate_kernels
from .snapshot_build import from_analysis
from .timing_shape import timing_analysis

if TYPE_CHECKING:  # fusion_core loads on first use (see fusion_core/__init__.py)
    from fusion_core.errors import Fix

    from .session import FusionSession

__all__ = ["FusionAdvisor", "FusionResult", "build_inputs", "build_model", "fixes"]

TOLERANCE_ARGS = {"traffic_tolerance": "traffic", "timing_tolerance": "timing",
                  "timing_alpha": "alpha", "timing_min_bytes": "min_bytes"}
MARKER_KEYWORDS = ("dtype", "checks", *TOLERANCE_ARGS, "capture", "device", "improvements",
                   "model_kwargs", "timing_inputs", "compiled", "compiled_shapes", *BOUNDS)


def _as_checks(checks: str | Sequence[str] | None) -> tuple[str, ...]:
    if checks is None:
        return CHECKS
    return (checks,) if isinstance(checks, str) else tuple(checks)


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
    """Shapes given as strings or tuples take `dtype`, a string's memory order its suffix
    ("8,64,56,56:channels_last", as the CLI's); tensors and InputSpecs pass through."""
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
                            "as a string of them separated by commas, e.g. '16384,1024' (a "
                            "memory order may follow a colon: '8,64,56,56:channels_last')",
            Fix.INPUTS: f"check the example inputs given to {call}: their shapes and dtypes",
            Fix.INPUT_COUNT: f"give {call} one example input per argument of forward",
            Fix.EXPORT: f'try torch.export instead (capture="export" in {call}, or '
                        "fusion_capture = export in the ini file)",
            # `{example_py}` and `{label}` are filled in by the error (errors.Fix)
            Fix.MODEL_ARGS: f"pass them as model_kwargs={{example_py}} in {call}, or give "
                            "it a function that builds the model with no arguments (e.g. "
                            "functools.partial({label}, ...)) or the model itself",
            Fix.MODEL_KWARGS: f"check the names given as model_kwargs in {call}",
            Fix.MODEL_VALUES: f"check the values given as model_kwargs in {call} (if they are "
                              "right, the constructor)",
            Fix.MODEL_DEFAULTS: "it ran with {defaults}: pass others as "
                                f"model_kwargs={{example_py}} in {call}, or fix the constructor",
            Fix.CONSTRUCTOR_CODE: "a bug in the constructor, not the model_kwargs given in "
                                  f"{call}: fix the constructor"}


class FusionAdvisor:
    """The `fusion_advisor` fixture of one test: analyses, and the test's one baseline check."""

    def __init__(self, item: pytest.Item, session: FusionSession) -> None:
        self.item, self.session = item, session
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
        """Analyze `model` for the example inputs (tensors, shapes, InputSpecs); a shape string
        may name its memory layout, e.g. "8,64,56,56:channels_last".

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
            capture = self.session.settings.capture
        elif capture not in CAPTURES:
            pytest.fail(f"unknown capture frontend capture={capture!r}: choose from "
                        f"{', '.join(CAPTURES)}", pytrace=False)
        if device is None:
            device = self.session.settings.target
        elif problem := check_target(device, call.replace("(...)", "(device=...)")):
            pytest.fail(problem, pytrace=False)
        try:
            module = build_model(model, model_kwargs)
            analysis = fusion_core.analyze(module, *build_inputs(inputs, dtype),
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
        runs_here = device == "cpu" or self.session.hw_key is not None
        timed, index_map = analysis, None
        if measure and runs_here and timing_inputs is not None:
            timed, index_map = timing_analysis(analysis, timing_inputs, dtype, device,
                                               call)
        generated = generate_kernels(analysis)  # once: the snapshot, timings and page use it
        raw = self.item.config.hook.pytest_fusion_measure(
            analysis=timed, config=self.item.config, device=device,
            kernels=generated if timed is analysis else None) if measure and runs_here else None
        key = self.session.hw_key
        snap = from_analysis(analysis, self.item.nodeid, rootdir, kernels=generated.kinds,
                             target=device)
        if module is not model:  # built here: the baseline says how (an instance: unknown)
            snap = replace(snap, built=describe(model, model_kwargs, analysis.model_name))
        agreement = matched = None
        if bounds or (self.session.settings.compiled if compiled is None else compiled):
            from .compiled_gate import compiled_data  # loads torch: only when asked for

            records, agreement, matched = compiled_data(model, model_kwargs, inputs, dtype,
                                               compiled_shapes, call, rootdir, analysis)
            snap = replace(snap, compiled=records)
            if over := exceeded(bounds, records):  # a budget: whatever the baseline says
                pytest.fail("\n".join(over), pytrace=False)
        if raw:
            taken = () if timed is analysis else tuple(str(s) for s in timed.inputs)
            key, m = to_measured(raw, snap.clusters, taken, index_map)
            if m.clusters or m.model_us:  # nothing timed (the model failed there): none stored
                snap = replace(snap, measured={key: m})
        self.last_result = FusionResult(analysis, snap, raw, key, generated, agreement,
                                        matched)
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
                pytest.fail(f"fusion_check got unknown {plural(len(unknown), 'keyword')} "
                            f"{', '.join(unknown)}: the allowed keywords are "
                            f"{', '.join(MARKER_KEYWORDS)}", pytrace=False)
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
    # Aliases of the result's own assertions (`result.assert_fused(ops)`), kept for tests
    # written against the fixture.
    def assert_fused(self, result: FusionResult, ops: Sequence[str]) -> None:
        """``result.assert_fused(ops)``."""
        __tracebackhide__ = True
        result.assert_fused(ops)

    def assert_no_rejection(self, result: FusionResult, check: str | None = None) -> None:
        """``result.assert_no_rejection(check)``."""
        __tracebackhide__ = True
        result.assert_no_rejection(check)

    def assert_traffic_saved(self, result: FusionResult, at_least: int | None = None,
                             fraction: float | None = None) -> None:
        """``result.assert_traffic_saved(at_least, fraction)``."""
        __tracebackhide__ = True
        result.assert_traffic_saved(at_least, fraction)

    # ------------------------------------------------------------ baseline
    def tolerances(self, **overrides: Any) -> Tolerances:
        """ini values, overridden by the marker, overridden by `overrides`; what timings are
        judged against is the ini's."""
        __tracebackhide__ = True
        marker = self.item.get_closest_marker("fusion_check")
        values = dict(self.session.settings.ini_tolerances)
        for where, source in (("fusion_check", marker.kwargs if marker else {}),
                              ("fusion_advisor.check", overrides)):
            for arg, name in TOLERANCE_ARGS.items():
                if source.get(arg) is not None:
                    value = check_tolerance(name, source[arg], f"{where}({arg}=...)")
                    if isinstance(value, str):
                        pytest.fail(value, pytrace=False)
                    values[name] = value
        return Tolerances(**values, timing_reference=self.session.settings.timing_reference)

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
        return self.session.settings.improvements

    def check(self, result: FusionResult, checks: Sequence[str] | None = None,
              improvements: str | None = None, **tolerances: Any) -> None:
        """Compare `result` with this test's baseline; fail the test on a regression (and
        on an improvement when `improvements="fail"`)."""
        __tracebackhide__ = True
        failure = self._check(result, checks, tolerances, improvements).failure
        if failure:
            pytest.fail(failure, pytrace=False)

    def check_marker(self) -> str | None:
        """The marker's check, made before the test body: fails the test on a regression or
        an unusable baseline; returns the message of a missing baseline instead, so the body
        (the test's own assertions) still runs before that fails the test."""
        __tracebackhide__ = True
        verdict = self._check(self.result, None, {}, None)
        if verdict.failure and verdict.record.status == "missing":
            return verdict.failure
        if verdict.failure:
            pytest.fail(verdict.failure, pytrace=False)
        return None

    def _check(self, result: FusionResult, checks: Sequence[str] | None,
               tolerances: dict[str, Any], improvements: str | None) -> Verdict:
        __tracebackhide__ = True
        if self.checked:
            pytest.fail("a test has one fusion baseline: fusion_advisor.check() was already "
                        "called, or the fusion_check marker checked this test (give the "
                        "marker the tolerances instead)", pytrace=False)
        unknown = set(tolerances) - set(TOLERANCE_ARGS)
        if unknown:
            raise TypeError(f"unknown {plural(len(unknown), 'tolerance')} "
                            f"{', '.join(sorted(unknown))}: use {', '.join(TOLERANCE_ARGS)}")
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
            pytest.fail(f"unknown fusion {plural(len(bad), 'check')} {', '.join(sorted(bad))}: "
                        f"choose from {', '.join(CHECKS)}", pytrace=False)
        compiled = None
        if result.snapshot.compiled:  # the report's clusters beside Inductor's kernels
            from .compiled_report import summary

            compiled = summary(result.snapshot.clusters, result.snapshot.compiled,
                               result.compiled_agreement or {})
        return self.session.check(result.snapshot, tol, checks, result.hw_key,
                                  fail_improvements, self.session.settings.compiler_change,
                                  compiled)
