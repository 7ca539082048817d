"""The README's and docs/'s relative links point to files and headings that exist.

Reads README.md and docs/*.md: every Markdown link or image outside code, as GitHub renders
it (a heading's anchor, a fence of n backticks closing only at n or more).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))

def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code; a fence of n backticks closes
    only at a line of at least n (a ````markdown block may hold ```sh)."""
    out, fence = [], ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        ticks = re.match(r"`{3,}", line)
        if (
            fence
            and ticks
            and len(ticks.group(0)) >= len(fence)
            and not line[len(fence) :].strip("`").strip()
        ):
            fence = ""
        elif not fence and ticks:
            fence = ticks.group(0)
        elif not fence:
            out.append((number, line))
    return out


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose(path):
        if heading := re.match(r"#{1,6} (.*)", line):
            slug = _slug(heading.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link and image outside code blocks and code spans."""
    found = []
    for number, line in _prose(path):
        prose = re.sub(r"`[^`]*`", "", line)
        found += [(number, m.group(1)) for m in re.finditer(r"\]\(([^)\s]+)\)", prose)]
    return found


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_and_heading_that_exist(doc):
    broken = _broken_links(doc)
    assert not broken, "\n".join(broken)


def _broken_links(doc: Path) -> list[str]:
    broken = []
    for line, target in _links(doc):
        if re.match(r"[a-z]+:", target):  # https:, mailto: — not checked offline
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{doc.name}:{line}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{doc.name}:{line}: {target} (no heading #{anchor})")
    return broken


def test_a_missing_file_or_heading_is_reported(tmp_path):
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Real heading\n")
    doc.write_text(
        "[ok](b.md#real-heading) [gone](c.md) [typo](b.md#real-headin)\n"
        "`[code](x.md)` [self](#top)\n\n# Top\n"
    )
    assert _broken_links(doc) == [
        "a.md:1: c.md (no such file)",
        "a.md:1: b.md#real-headin (no heading #real-headin)",
    ]


def test_links_and_anchors_are_read_as_github_renders_them():
    assert _slug("Source edits and `--apply`") == "source-edits-and---apply"
    assert _slug("Timings (measured fields)") == "timings-measured-fields"
    assert _links(README)  # the README links its docs pages
    assert "cluster-categories" in _anchors(README)
    # a heading inside a ````markdown example (around a ```sh block) is no anchor
    assert "accept" not in _anchors(ROOT / "docs" / "plugin.md")
