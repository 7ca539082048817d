"""User-facing errors: each carries one line that names the problem and the fix."""


class FusionAdvisorError(Exception):
    """Bad input or an unanalyzable model. The CLI prints `str(err)` and exits 2."""


class ModelLoadError(FusionAdvisorError):
    pass


class CaptureError(FusionAdvisorError):
    pass


class InputSpecError(FusionAdvisorError):
    pass
