"""Whether Triton can be imported here, and the words for a run where it cannot.

Reads nothing but the import system; the CLI asks once per run. Triton is the `gpu`
extra: without it the analysis still runs and kernels are still written, but none can
be compiled, validated or applied.
"""

from __future__ import annotations

import functools

INSTALL_HINT = "pip install 'fusion-advisor[gpu]' (or pip install triton)"


@functools.cache
def triton_missing() -> str | None:
    """None when `import triton` works; otherwise the import error, one line."""
    try:
        import triton  # noqa: F401
    except ImportError as e:
        lines = str(e).strip().splitlines()
        return lines[0] if lines else type(e).__name__
    return None


def triton_note() -> list[str]:
    """The report's header line when Triton is missing (none otherwise)."""
    why = triton_missing()
    if why is None:
        return []
    return [f"triton is not installed ({why}): kernels can be written (--out-dir) but not "
            f"compiled, validated or applied; install it with {INSTALL_HINT}"]
