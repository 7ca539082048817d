"""The plugin's command-line and ini options, and the checks on their values.

Reads pytest's parser and config; returns validated plain values (update mode,
tolerances, report base path). Bad values raise ``pytest.UsageError`` with one
line naming the option and what it accepts; per-test values (marker keywords,
``check()`` keywords) are checked by ``check_tolerance`` and fail only that test.
Imports nothing heavy: a run with no fusion test must not pay for torch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .snapshot import TARGETS  # the data model's module imports nothing heavy
from .timing_gate import REFERENCES  # nor does the timing gate's

MODES = ("new", "failing", "all")
UPDATE_FLAG = "--fusion-update-baselines"
REPORT_FLAG = "--fusion-report"
INI_TOLERANCES = {  # ini name -> (Tolerances field, default, help)
    "fusion_traffic_tolerance": ("traffic", "0.0",
                                 "allowed relative increase of a cluster's fused bytes"),
    "fusion_timing_tolerance": ("timing", "0.10", "allowed relative slowdown of a kernel median"),
    "fusion_timing_alpha": ("alpha", "0.05", "significance level for calling a slowdown"),
    "fusion_timing_min_bytes": ("min_bytes", "1048576",
                                "kernels moving fewer fused bytes are not timing-judged: their "
                                "time is the launch, which follows the host's load"),
}
# Tolerances field -> (lowest allowed, highest allowed, whether the lowest is allowed itself)
RANGES = {"traffic": (0.0, math.inf, True), "timing": (0.0, math.inf, True),
          "alpha": (0.0, 1.0, False), "min_bytes": (0.0, math.inf, True)}
RANGE_TEXT = {"traffic": "a finite number >= 0", "timing": "a finite number >= 0",
              "alpha": "a number in (0, 1]", "min_bytes": "a finite number >= 0"}
REPORT_NAME = "fusion-report"
# fusion_core's capture frontends, spelled out here so pytest can validate the ini option
# without importing torch (a test keeps the two in step).
CAPTURES = ("auto", "fx", "export")
# What an improvement does to its test: pass with a notice (default), or fail until accepted.
IMPROVEMENTS = ("pass", "fail")
# What another torch/triton version than a compiled record's baseline does: say it, or fail.
COMPILER_CHANGE = ("report", "fail")


def check_target(value: Any, source: str) -> str | None:
    """The one-line reason `value` is no analysis target, or None when it is one."""
    if isinstance(value, str) and value in TARGETS:
        return None
    return f"{source} must be {' or '.join(TARGETS)}, got {value!r}"


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("fusion", "fusion-advisor baselines")
    group.addoption(REPORT_FLAG, nargs="?", const="", default=None, metavar="PATH",
                    help="print a fusion summary table after the run; with PATH also write "
                         "PATH.md and PATH.json (a PATH ending in / or naming a folder gets "
                         f"{REPORT_NAME}.md/json inside it)")
    # The value is checked in `update_mode`, not by argparse: `--fusion-update-baselines
    # tests/` must leave the path to pytest (see `split_update_flag`).
    group.addoption(UPDATE_FLAG, nargs="?", const="all", default=None, metavar="MODE",
                    help="write fusion baselines: new (missing only), failing (missing, corrupt "
                         "or regressed), all (every checked test, and remove stale ones; the "
                         "default mode)")
    group.addoption("--fusion-fail-stale", action="store_true", default=None,
                    help="fail the run when a fusion baseline is stale (its test is gone); "
                         "also ini fusion_fail_stale")
    group.addoption("--fusion-require-timings", action="store_true", default=None,
                    help="fail the run when no fusion test judged a timing (a GPU job that "
                         "compared nothing); also ini fusion_require_timings")
    group.addoption("--fusion-prune-stale", action="store_true", default=False,
                    help="remove stale fusion baselines without rewriting any other")
    group.addoption("--fusion-disable", action="store_true", default=False,
                    help="skip every fusion check (tests with the fusion_check marker or the "
                         "fusion_advisor fixture), with that reason")
    parser.addini("fusion_baselines_dir", "folder of the fusion baselines, relative to the "
                  "rootdir", default="fusion_baselines")
    for name, (_, default, help_) in INI_TOLERANCES.items():
        parser.addini(name, help_, default=default)
    parser.addini("fusion_capture", "graph capture frontend: auto (FX, then torch.export when "
                  "FX cannot trace), fx or export", default="auto")
    parser.addini("fusion_device", "the device baselines describe: the analysis target (cpu or "
                  "cuda), analysed on any machine; kernels are timed on any CUDA machine, "
                  "whatever the target", default="cpu")
    parser.addini("fusion_fail_stale", "fail the run when a fusion baseline is stale",
                  type="bool", default=False)
    parser.addini("fusion_require_timings", "fail the run when no fusion test judged a "
                  "timing against its baseline (e.g. none has one for this GPU)", type="bool",
                  default=False)
    parser.addini("fusion_improvements", "what a fusion improvement does to its test: pass "
                  "(with a notice and the accept command) or fail (until the baseline is "
                  "updated, so it cannot drift)", default="pass")
    parser.addini("fusion_compiled", "also run torch.compile on each checked model and gate "
                  "its graph breaks, graphs, Inductor kernels and recompiles against the "
                  "baseline (costs a compile per test; the marker's compiled=True does it for "
                  "one test)", type="bool", default=False)
    parser.addini("fusion_timing_reference", "what a timing is judged against: eager (each "
                  "kernel's time as a fraction of its eager ops', sample by sample: load on "
                  "a shared GPU slows both) or absolute (the µs themselves)", default="eager")
    parser.addini("fusion_compiler_change", "what a torch/triton version other than the "
                  "compiled record's baseline does: report (say it) or fail", default="report")


def _ini_choice(config: pytest.Config, name: str, allowed: tuple[str, ...]) -> str:
    """The ini option `name`, one of `allowed`; a usage error naming them otherwise."""
    value = config.getini(name).strip()
    if value not in allowed:
        raise pytest.UsageError(f"ini option {name} must be one of {', '.join(allowed)}, "
                                f"got {value!r}")
    return value


def ini_compiler_change(config: pytest.Config) -> str:
    return _ini_choice(config, "fusion_compiler_change", COMPILER_CHANGE)


def ini_timing_reference(config: pytest.Config) -> str:
    return _ini_choice(config, "fusion_timing_reference", REFERENCES)


def check_improvements(value: Any, source: str) -> str | None:
    """None when `value` is allowed, else the one-line reason."""
    if value in IMPROVEMENTS:
        return None
    return f"{source} must be one of {', '.join(IMPROVEMENTS)}, got {value!r}"


def split_update_flag(args: list[str]) -> None:
    """`--fusion-update-baselines PATH` -> `--fusion-update-baselines=all PATH`, and
    `--fusion-report test_x.py` -> `--fusion-report= test_x.py`, in place.

    argparse gives an optional value the next token whatever it is; only the three
    mode names are taken as the update flag's value, anything else stays a positional
    argument. A report PATH is any path, so only tokens that are tests are left to pytest:
    a node id (`::`) or an existing `.py` file (a report is written beside PATH, never
    over it, so a test file is no report PATH anyone means).
    """
    for i, arg in enumerate(args[:-1]):
        after = args[i + 1]
        if arg == UPDATE_FLAG and after not in MODES and not after.startswith("-"):
            args[i] = f"{UPDATE_FLAG}=all"
        elif arg == REPORT_FLAG and _names_tests(after):
            args[i] = f"{REPORT_FLAG}="  # the bare flag's value: table only


def _names_tests(arg: str) -> bool:
    if arg.startswith("-"):
        return False
    path = arg.partition("::")[0]
    return "::" in arg or (path.endswith(".py") and Path(path).is_file())


def update_mode(config: pytest.Config) -> str | None:
    mode = config.getoption("fusion_update_baselines")
    if mode is not None and mode not in MODES:
        raise pytest.UsageError(f"unknown mode {mode!r}: use new, failing or all, written "
                                f"{UPDATE_FLAG}=MODE")
    return mode


def check_tolerance(field: str, value: Any, source: str) -> float | str:
    """The value as a float, or the one-line reason it is not allowed."""
    lo, hi, lo_ok = RANGES[field]
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number > hi or (
            number < lo or (number == lo and not lo_ok)):
        return f"{source} must be {RANGE_TEXT[field]}, got {value!r}"
    return number


def ini_tolerances(config: pytest.Config) -> dict[str, float]:
    out = {}
    for name, (field, _, _) in INI_TOLERANCES.items():
        value = check_tolerance(field, config.getini(name), f"ini option {name}")
        if isinstance(value, str):
            raise pytest.UsageError(value)
        out[field] = value
    return out


def ini_target(config: pytest.Config) -> str:
    value = config.getini("fusion_device").strip()
    problem = check_target(value, "ini option fusion_device")
    if problem:
        raise pytest.UsageError(problem)
    return value


def report_base(config: pytest.Config) -> Path | None:
    """`PATH` of `--fusion-report=PATH` without suffix (files get .md/.json); None: no files.

    A PATH ending in a separator, or naming an existing folder, is a folder (created
    when missing) holding fusion-report.md/json. What cannot be written is a usage error
    now rather than a traceback after the tests ran.
    """
    given = config.getoption("fusion_report")
    if not given:
        return None
    path = Path(config.invocation_params.dir, given)
    if given.endswith(("/", os.sep)) or path.is_dir():
        base = path / REPORT_NAME
    elif path.suffix in (".md", ".json"):
        base = path.with_suffix("")
    else:
        base = path
    for parent in (base.parent, *base.parent.parents):
        if parent.exists():
            if not parent.is_dir():
                raise pytest.UsageError(f"--fusion-report={given}: {parent} is a file, not a "
                                        "folder; choose another path")
            break
    for suffix in (".md", ".json"):
        target = base.with_name(base.name + suffix)
        if target.is_dir():
            raise pytest.UsageError(f"--fusion-report={given}: {target} is a folder; choose "
                                    "another path")
    return base


@dataclass(frozen=True)
class Settings:
    """The run's option values, read and checked once at configure time."""

    folder: Path  # the baselines folder (absolute)
    mode: str | None  # the update mode (MODES) or None
    report_requested: bool  # --fusion-report given (with or without PATH)
    report_base: Path | None  # PATH of --fusion-report=PATH without suffix
    ini_tolerances: dict[str, float]
    capture: str
    improvements: str
    target: str  # the marker's or analyze()'s device= wins
    compiled: bool  # compiled= on a test wins
    compiler_change: str
    timing_reference: str  # what timings are judged against (timing_gate.REFERENCES)
    fail_stale: bool
    require_timings: bool
    prune_stale: bool
    disabled: bool


def settings(config: pytest.Config) -> Settings:
    """Every option of the run; a bad value raises pytest.UsageError (one line)."""
    folder = Path(config.getini("fusion_baselines_dir"))
    # Checked in the order the options were always read: the first bad one is named.
    mode, base, tolerances = update_mode(config), report_base(config), ini_tolerances(config)
    capture = _ini_choice(config, "fusion_capture", CAPTURES)
    improvements = config.getini("fusion_improvements").strip()
    bad = check_improvements(improvements, "ini option fusion_improvements")
    if bad:
        raise pytest.UsageError(bad)
    fail_stale = config.getoption("fusion_fail_stale")
    require_timings = config.getoption("fusion_require_timings")
    return Settings(
        folder=folder if folder.is_absolute() else config.rootpath / folder,
        mode=mode, report_requested=config.getoption("fusion_report") is not None,
        report_base=base, ini_tolerances=tolerances,
        capture=capture, improvements=improvements, target=ini_target(config),
        compiled=bool(config.getini("fusion_compiled")),
        compiler_change=ini_compiler_change(config),
        timing_reference=ini_timing_reference(config),
        fail_stale=bool(config.getini("fusion_fail_stale") if fail_stale is None
                        else fail_stale),
        require_timings=bool(config.getini("fusion_require_timings") if require_timings is None
                             else require_timings),
        prune_stale=bool(config.getoption("fusion_prune_stale")),
        disabled=bool(config.getoption("fusion_disable")))
