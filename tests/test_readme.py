"""The README's shell commands run and print what the README shows (links: test_readme_links.py).

Reads README.md and .ci/run. Writes only under pytest's temporary folder: a copy of
what the commands need (pyproject.toml, conftest.py, examples/, fusion_baselines/, tools/), in
which the commands run, in README order, the way a reader would type them.

Every ```bash, ```sh, ```shell and ```console block of README.md has a marker comment on the
line before its fence (the README renders without them):

    <!-- readme-test: run -->             run it; each command must exit 0
    <!-- readme-test: run, exit N -->      run it; each command must exit N
    <!-- readme-test: skip: REASON -->     not run; reported as skipped with REASON
    <!-- readme-test: ci -->               the test command: not run (it is the whole suite,
                                           this test included), but it must be the one
                                           .ci/run runs

A ```python block marked `<!-- readme-test: file PATH -->` is written to PATH in the copy
before any command runs. In a ```console block a line starting with `$ ` is a command and
the lines up to the next one are what it prints (stdout and stderr together); a line `...`
stands for any number of lines. A ```bash block's lines are commands whose output is not
shown. Test durations and the copy's own path are normalised before comparing, and a shown
`max abs err` matches a printed one within a factor of four (the last bits vary by CPU).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL_LANGS = ("bash", "sh", "shell", "console")
# What the commands read: the rest of the checkout is imported from ROOT (PYTHONPATH).
COPIED = ("pyproject.toml", "conftest.py", "examples", "fusion_baselines", "tools")
# Variables of the calling run that would change what a command prints or where it writes.
DROPPED_ENV = (
    "CI",
    "GITHUB_ACTIONS",
    "GITHUB_STEP_SUMMARY",
    "COLUMNS",
    "LINES",
    "PYTEST_ADDOPTS",
    "PYTEST_PLUGINS",
    "FORCE_COLOR",
    "PY_COLORS",
    "NO_COLOR",
)
MARKER = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
ANY_LINES = "..."


@dataclass(frozen=True)
class Command:
    text: str
    shown_output: tuple[str, ...] | None  # None: the README shows no output for it


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    marker: str | None  # the marker comment's text, None when the block has none

    @property
    def id(self) -> str:
        return f"README.md:{self.line}"

    @property
    def action(self) -> str:
        return (self.marker or "").split(":")[0].split(",")[0].split()[0] if self.marker else ""

    @property
    def expected_exit(self) -> int:
        found = re.search(r"\bexit\s+(\d+)", self.marker or "")
        return int(found.group(1)) if found else 0

    @property
    def commands(self) -> tuple[Command, ...]:
        lines = self.body.splitlines()
        if self.lang != "console":
            return tuple(
                Command(line, None)
                for line in lines
                if line.strip() and not line.lstrip().startswith("#")
            )
        commands: list[Command] = []
        text, output = None, []
        for line in lines + ["$ "]:  # a sentinel command ends the last one
            if line.startswith("$ "):
                if text is not None:
                    commands.append(Command(text, tuple(output)))
                text, output = line[2:], []
            else:
                output.append(line)
        return tuple(commands)


def blocks(path: Path) -> list[Block]:
    """Every fenced block of `path`, with the marker comment on the line before its fence."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
        found.append(
            Block(
                i + 1,
                opening.group(1),
                "\n".join(lines[i + 1 : end]),
                marker.group(1) if marker else None,
            )
        )
        i = end + 1
    return found


README_BLOCKS = blocks(README)
SHELL_BLOCKS = [b for b in README_BLOCKS if b.lang in SHELL_LANGS]
RUN_BLOCKS = [b for b in SHELL_BLOCKS if b.action == "run"]


# ---------------------------------------------------------------- markers


def test_every_shell_block_says_whether_it_runs():
    """No command is silently left out: each shell block is run, skipped with a reason, or the
    test command; a typo in a marker is an error, not a skip."""
    problems = []
    for b in SHELL_BLOCKS:
        if b.marker is None:
            problems.append(f"{b.id}: ```{b.lang} block without a <!-- readme-test: ... --> line")
        elif b.action not in ("run", "skip", "ci"):
            problems.append(f"{b.id}: unknown readme-test marker {b.marker!r}")
        elif b.action == "skip" and not b.marker.partition(":")[2].strip():
            problems.append(f"{b.id}: a skip marker needs a reason (skip: REASON)")
        elif b.action == "run" and b.lang == "console" and not b.commands:
            problems.append(f"{b.id}: a console block without a `$ ` command")
    assert not problems, "\n".join(problems)
    assert RUN_BLOCKS, "README.md shows no command this test runs"


def test_the_test_command_is_the_one_ci_runs():
    """`.ci/run` runs the README's test command; the README's `ci` block and the line after
    `.ci/run`'s "README's test command" comment must stay the same command."""
    (block,) = [b for b in SHELL_BLOCKS if b.action == "ci"]
    (command,) = block.commands
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    at = next(i for i, line in enumerate(ci) if "README's test command:" in line)
    assert ci[at + 1].strip() == command.text.strip()


def test_the_install_command_ends_with_a_command_this_test_runs():
    """The one-line install runs the main job last; that job is run (and its output compared)
    by a `run` block, so the install command's promise is checked too."""
    install = next(b for b in SHELL_BLOCKS if "pip install" in b.body and b.action == "skip")
    last = install.body.strip().split("&&")[-1].strip()
    assert last in {c.text.strip() for b in RUN_BLOCKS for c in b.commands}


# ---------------------------------------------------------------- running the commands


def _env(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env["PATH"] = os.pathsep.join(
        [str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")]
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _shims(where: Path) -> Path:
    """`python` is this interpreter; `fusion-advisor` is the installed script, or, in a
    checkout run without installing, the same entry point through this interpreter."""
    where.mkdir()
    shims = {"python": ""}
    if shutil.which("fusion-advisor", path=str(Path(sys.executable).parent)) is None:
        shims["fusion-advisor"] = ' -c "from fusion_core.cli import main; main()"'
    for name, args in shims.items():
        (where / name).write_text(f'#!/bin/sh\nexec "{sys.executable}"{args} "$@"\n')
        (where / name).chmod(0o755)
    return where


@dataclass(frozen=True)
class Ran:
    command: Command
    exit_code: int
    output: str


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> dict[str, list[Ran]]:
    """Every `run` block's commands, run in README order in one copy of the checkout (a
    later block sees what an earlier one wrote, as for a reader); block id -> results."""
    base = tmp_path_factory.mktemp("readme")
    copy = base / "repo"
    copy.mkdir()
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, copy / name)
    for b in README_BLOCKS:
        if b.marker and b.marker.startswith("file "):
            target = copy / b.marker.removeprefix("file ").strip()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(b.body + "\n")
    env = _env(_shims(base / "bin"))
    results: dict[str, list[Ran]] = {}
    for b in RUN_BLOCKS:
        results[b.id] = []
        for c in b.commands:
            done = subprocess.run(
                ["bash", "-c", c.text],
                cwd=copy,
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=300,
            )
            results[b.id].append(Ran(c, done.returncode, _normalise(done.stdout, copy)))
    return results


def _normalise(text: str, copy: Path) -> str:
    text = text.replace(f"{copy}{os.sep}", "").replace(str(copy), ".")
    # pytest's closing line: "1 passed in 3.13s" or "... in 62.51s (0:01:02)"
    text = re.sub(r"\bin \d+(\.\d+)?s( \(\d+:\d\d:\d\d\))?", "in <duration>", text)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


# A kernel's error against eager differs in its last bits with the CPU and the thread count
# (torch's and numpy's vector code round exp and tanh differently on AVX-512 and AVX2 hosts,
# and parallel chunks move which elements take it): a shown error matches a printed one
# within ERR_FACTOR of it, zero only zero.
ERR_NUMBER = r"\d\.\d\de[+-]\d\d"
ERR = re.compile(rf"(?<=max abs err )({ERR_NUMBER})")
ERR_FACTOR = 4.0


def _line_pattern(line: str, shown_errors: list[float]) -> str:
    """`line` as a pattern whose error values are groups (their shown values appended)."""
    pieces = ERR.split(line)  # text, error, text, ...
    shown_errors.extend(float(value) for value in pieces[1::2])
    return "".join(re.escape(p) if i % 2 == 0 else f"({ERR_NUMBER})" for i, p in enumerate(pieces))


def _close(shown: float, printed: float) -> bool:
    if shown == 0.0 or printed == 0.0:
        return shown == printed
    return max(shown, printed) / min(shown, printed) <= ERR_FACTOR


def _matches(shown: list[str], printed: str) -> bool:
    """`printed` is `shown`, where a line `...` stands for any number of lines and an
    error value for one within ERR_FACTOR of it."""
    shown_errors: list[float] = []
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line == ANY_LINES else _line_pattern(line, shown_errors) + r"\n"
        for line in shown
    )
    found = re.fullmatch(pattern, printed + "\n")
    return found is not None and all(
        _close(value, float(got)) for value, got in zip(shown_errors, found.groups(), strict=True)
    )


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, id=b.id)
        if b.action == "run"
        else pytest.param(
            b,
            id=b.id,
            marks=pytest.mark.skip(
                reason=b.marker.partition(":")[2].strip()
                if b.action == "skip"
                else "the test command: the whole suite, this test included (.ci/run runs it)"
            ),
        )
        for b in SHELL_BLOCKS
    ],
)
@pytest.mark.slow  # one replay of every command: about 40 s of CPU, mostly torch imports
def test_readme_command_exits_as_shown(block, replay):
    for ran in replay[block.id]:
        assert ran.exit_code == block.expected_exit, (
            f"`{ran.command.text}` exited {ran.exit_code}, README.md:{block.line} expects "
            f"{block.expected_exit}; it printed:\n{ran.output[-4000:]}"
        )


@pytest.mark.slow
@pytest.mark.cpu  # with CUDA the report adds timings and full-size validation
@pytest.mark.parametrize(
    "block",
    [pytest.param(b, id=b.id) for b in RUN_BLOCKS if any(c.shown_output for c in b.commands)],
)
def test_readme_command_prints_what_the_readme_shows(block, replay):
    for ran in replay[block.id]:
        shown = _normalise("\n".join(ran.command.shown_output or ()), Path("/nonexistent"))
        if not _matches(shown.splitlines(), ran.output):
            diff = "\n".join(
                difflib.unified_diff(
                    shown.splitlines(), ran.output.splitlines(), "README.md", "printed", lineterm=""
                )
            )
            pytest.fail(
                f"`{ran.command.text}` (README.md:{block.line}) printed something else:\n{diff}",
                pytrace=False,
            )


def test_a_wildcard_line_stands_for_any_lines_and_nothing_else_differs():
    """The comparison itself: `...` absorbs lines, any other difference fails."""
    assert _matches(["a", ANY_LINES, "d"], "a\nb\nc\nd")
    assert _matches(["a", ANY_LINES, "d"], "a\nd")
    assert not _matches(["a", ANY_LINES, "d"], "a\nb\nc\nd\ne")
    assert not _matches(["a", "b"], "a\nc")
    assert _normalise("1 passed in 3.13s  \n\n", Path("/x")) == "1 passed in <duration>"


def test_an_error_value_matches_one_within_a_factor_of_four_and_zero_only_zero():
    """Another CPU's last bits pass; an error grown past ERR_FACTOR, or from zero, fails."""
    shown = ["cluster 1: verified  max abs err 5.96e-08", "done"]
    assert _matches(shown, "cluster 1: verified  max abs err 1.19e-07\ndone")
    assert _matches(shown, "cluster 1: verified  max abs err 5.96e-08\ndone")
    assert not _matches(shown, "cluster 1: verified  max abs err 2.40e-07\ndone")
    assert not _matches(shown, "cluster 1: verified  max abs err 1.19e-07\nfailed")
    assert not _matches(["max abs err 0.00e+00"], "max abs err 1.19e-07")
    assert _matches(["max abs err 0.00e+00"], "max abs err 0.00e+00")
    assert not _matches(["max abs err 5.96e-08"], "max abs err 0.00e+00")
