"""User-facing errors: each carries one line that names the problem and the fix.

Some fixes lie outside the model's code, in how the analysis was asked for: other
example inputs, another capture frontend. Only the caller knows how the user gives
those (the CLI through its flags, the pytest plugin through the arguments of
``fusion_check`` and ``fusion_advisor.analyze``), so such an error carries the problem
and a ``Fix``; ``str(err)`` words the fix for the Python API and ``err.worded(...)``
in the caller's terms.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum


class Fix(Enum):
    """A fix outside the model's code; the value is its wording for the Python API."""

    MODEL_FILE = "give the path of a .py file"
    MODEL_CLASS = "pick one with load_model(path, class_name)"
    SHAPE_TEXT = ("give positive integers separated by commas, e.g. '16384,1024' (a memory "
                  "order may follow a colon: '8,64,56,56:channels_last')")
    INPUTS = "check the example inputs' shapes and dtypes"
    INPUT_COUNT = "give one example input per argument of forward"
    EXPORT = 'try torch.export instead (capture="export")'
    # `{example_json}` / `{example_py}`: the missing arguments as a JSON / Python dict to fill in
    MODEL_ARGS = ("give them defaults, or pass them as keyword arguments: "
                  "load_model(path, model_kwargs={example_py})")
    MODEL_KWARGS = "check the names given in model_kwargs"
    # The constructor raised on a value: `{defaults}` ("its defaults (ch=30)", or the values a
    # functools.partial binds) and `{example_*}` fill MODEL_DEFAULTS.
    MODEL_VALUES = "check the values given in model_kwargs (if they are right, the constructor)"
    MODEL_DEFAULTS = ("it ran with {defaults}: pass others as "
                      "model_kwargs={example_py}, or fix the constructor")
    # The constructor's code failed (a typo, an import), whatever the arguments given.
    CONSTRUCTOR_CODE = "a bug in the constructor, not the model_kwargs given: fix the constructor"


class FusionAdvisorError(Exception):
    """Bad input or an unanalyzable model. The CLI prints `err.worded(...)` and exits 2."""

    def __init__(self, problem: str, fix: Fix | None = None,
                 fill: Mapping[str, str] | None = None) -> None:
        """`fill`: the values of the fix wording's `{placeholders}` (see ``Fix``)."""
        self.problem, self.fix, self.fill = problem, fix, dict(fill or {})
        super().__init__(self.worded({f: f.value for f in Fix}))

    def worded(self, fixes: Mapping[Fix, str]) -> str:
        """The problem and its fix, the fix in the caller's words (`fixes`)."""
        problem = getattr(self, "problem", str(self))  # a subclass may skip our __init__
        fix = getattr(self, "fix", None)
        if fix is None:
            return problem
        fill = getattr(self, "fill", None)
        # Only a fix that names placeholders is given values: other wordings stay literal.
        return f"{problem}; {fixes[fix].format_map(fill) if fill else fixes[fix]}"


class ModelLoadError(FusionAdvisorError):
    pass


class CaptureError(FusionAdvisorError):
    pass


class ShapePropagationError(CaptureError):
    """FX traced the model, but a construct of the model's own cannot run on fake tensors:
    it reads a tensor's value (``.item()``, ``.tolist()``, ``bool(t)``) or makes a shape
    from one (``nonzero``, a boolean mask). Not the example input's fault; torch.export,
    which carries such values symbolically, may still capture the model.

    `where`: ``file:line (`code`)`` of the user's line ("" when unknown); `reason`: what
    failed there, one line."""

    def __init__(self, problem: str, where: str = "", reason: str = "",
                 fix: Fix | None = None) -> None:
        super().__init__(problem, fix)
        self.where, self.reason = where, reason


class InputSpecError(FusionAdvisorError):
    pass
