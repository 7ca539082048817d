"""A call written over several lines is quoted by its first line with its brackets closed."""

from __future__ import annotations

import pytest

from fusion_core.sourcemap.two_calls import _closed


@pytest.mark.parametrize(("first_line", "quoted"), [
    ("h = layer(", "h = layer(...)"),
    ("y = self.mix(x, [a,", "y = self.mix(x, [a,...])"),
    ("y = f(x)", "y = f(x)"),
    # brackets inside string literals neither open nor close anything
    ('h = self.layer(x, "(", sep=[1,', 'h = self.layer(x, "(", sep=[1,...])'),
    ('y = fmt(x, ")"', 'y = fmt(x, ")"...)'),
])
def test_a_first_line_is_quoted_with_its_brackets_closed(first_line: str, quoted: str) -> None:
    assert _closed(first_line) == quoted
