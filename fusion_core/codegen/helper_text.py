"""The text of runtime helpers as generated files hold them.

Reads this package's own source through `inspect`, once per helper: `inspect.getsource`
re-tokenizes the module for every call (about a millisecond), and every generated file
asks for the same few dozen helpers.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable


@functools.cache
def helper_text(fn: Callable) -> str:
    """`fn`'s definition as written, without trailing blank lines."""
    return inspect.getsource(fn).rstrip()


def joined(fns: Iterable[Callable]) -> str:
    """The helpers' definitions, two blank lines apart."""
    return "\n\n\n".join(helper_text(fn) for fn in fns)
