"""pytest glue for fusion-advisor (entry point `pytest11: fusion`).

Reads command-line and ini options, the `fusion_check` marker and xdist worker
output; writes baselines (controller only, atomically, at session end), the
terminal summary and, with `--fusion-report[=PATH]`, Markdown and JSON reports.
The data model, comparison, session bookkeeping and report text live in the
sibling modules; this file only wires them into pytest's hooks.
"""

from __future__ import annotations

import argparse
import datetime
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from . import report
from .fixture import CAPTURES, FusionAdvisor
from .measure import FusionHookSpecs, default_measure, local_device
from .session import MODES, FusionSession

MARKER = (
    "fusion_check(model, *inputs, dtype=None, checks=('clusters', 'rejections', 'traffic', "
    "'timings'), traffic_tolerance=None, timing_tolerance=None, timing_alpha=None, "
    "capture=None): analyze `model` (an nn.Module, its class, a zero-argument factory or a .py "
    "path) for the example `inputs` (tensors, shape tuples or 'N,M' strings of `dtype`), "
    "captured with `capture` (auto, fx or export), and compare the result with the test's "
    "baseline in the fusion_baselines folder; the tolerance and capture keywords override the "
    "ini options for this test")
INI_TOLERANCES = {  # ini name -> (Tolerances field, default, help)
    "fusion_traffic_tolerance": ("traffic", "0.0",
                                 "allowed relative increase of a cluster's fused bytes"),
    "fusion_timing_tolerance": ("timing", "0.10", "allowed relative slowdown of a kernel median"),
    "fusion_timing_alpha": ("alpha", "0.05", "significance level for calling a slowdown"),
}
plugin_key = pytest.StashKey["FusionPlugin"]()
advisor_key = pytest.StashKey[FusionAdvisor]()


def _mode(value: str) -> str:
    if value not in MODES:
        raise argparse.ArgumentTypeError(
            f"unknown mode {value!r}: use new, failing or all, written "
            "--fusion-update-baselines=MODE (put test paths before the flag)")
    return value


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(FusionHookSpecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fusion", "fusion-advisor baselines")
    group.addoption("--fusion-report", nargs="?", const="", default=None, metavar="PATH",
                    help="print a fusion summary table after the run; with PATH also write "
                         "PATH.md and PATH.json (PATH may be a folder)")
    group.addoption("--fusion-update-baselines", nargs="?", const="all", default=None,
                    type=_mode, metavar="MODE",
                    help="write fusion baselines: new (missing only), failing (missing, corrupt "
                         "or regressed), all (every checked test, and remove stale ones; the "
                         "default mode)")
    parser.addini("fusion_baselines_dir", "folder of the fusion baselines, relative to the "
                  "rootdir", default="fusion_baselines")
    for name, (_, default, help_) in INI_TOLERANCES.items():
        parser.addini(name, help_, default=default)
    parser.addini("fusion_capture", "graph capture frontend: auto (FX, then torch.export when "
                  "FX cannot trace), fx or export", default="auto")


def _versions() -> dict[str, str]:
    found = {}
    for pkg in ("torch", "triton"):
        try:
            found[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            found[pkg] = "not installed"
    return found


class FusionPlugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        folder = Path(config.getini("fusion_baselines_dir"))
        self.folder = folder if folder.is_absolute() else config.rootpath / folder
        self.mode: str | None = config.getoption("fusion_update_baselines")
        self.report_path: str | None = config.getoption("fusion_report")
        self.ini_tolerances = {}
        for name, (field, _, _) in INI_TOLERANCES.items():
            try:
                self.ini_tolerances[field] = float(config.getini(name))
            except ValueError as e:
                raise pytest.UsageError(f"ini option {name} must be a number, got "
                                        f"{config.getini(name)!r}") from e
        self.capture: str = config.getini("fusion_capture").strip()
        if self.capture not in CAPTURES:
            raise pytest.UsageError(f"ini option fusion_capture must be one of "
                                    f"{', '.join(CAPTURES)}, got {self.capture!r}")
        self.device = local_device()
        self.hw_key = None if self.device == "cpu" else self.device
        self.provenance = {**_versions(), "device": self.device,
                           "date": datetime.date.today().isoformat()}
        self.session = FusionSession(config.rootpath, self.folder, self.mode, self.provenance)
        self.stale: list[dict[str, Any]] = []
        self.written: list[dict[str, Any]] = []
        self.is_worker = hasattr(config, "workerinput")
        self.report_files: list[Path] = []

    def shown(self, path: Path) -> str:
        return self.session.shown(path)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.stash[plugin_key] = FusionPlugin(config)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "fusion-xdist")


def pytest_report_header(config: pytest.Config) -> str:
    p = config.stash[plugin_key]
    v = p.provenance
    timing = "" if p.hw_key else " (timings not checked: no CUDA device)"
    update = f", updating baselines: {p.mode}" if p.mode else ""
    return (f"fusion-advisor: torch {v['torch']}, triton {v['triton']}, device "
            f"{p.device}{timing}, baselines {p.shown(p.folder)}/{update}")


@pytest.hookimpl(trylast=True)
def pytest_fusion_measure(analysis: Any, config: pytest.Config) -> dict | None:
    return default_measure(analysis)


@pytest.fixture
def fusion_advisor(request: pytest.FixtureRequest) -> FusionAdvisor:
    """Analyze models, assert on their fusion, and check them against the test's baseline."""
    return _advisor(request.node)


def _advisor(item: pytest.Item) -> FusionAdvisor:
    if advisor_key not in item.stash:
        item.stash[advisor_key] = FusionAdvisor(item, item.config.stash[plugin_key])
    return item.stash[advisor_key]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    marker = item.get_closest_marker("fusion_check")
    if marker is None:
        return (yield)
    advisor = _advisor(item)
    # Check before the body: a regression message is the clearest failure a reviewer can get,
    # and a failing body assertion must not hide it. The body reads fusion_advisor.result.
    advisor.check(advisor.result)
    return (yield)


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[plugin_key].session.collected.update(i.nodeid for i in session.items)


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash[plugin_key].session.deselected.update(i.nodeid for i in items)


def _narrowed(config: pytest.Config) -> set[str]:
    """Test files named with `::` on the command line: not collected in full."""
    out = set()
    for arg in config.args:
        if "::" in arg:
            path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
            try:
                out.add(path.relative_to(config.rootpath.resolve()).as_posix())
            except ValueError:
                pass
    return out


def _write_atomic(path: Path, text: str) -> None:
    import fusion_core  # only when something is written: a run without fusion tests skips it

    fusion_core.write_atomic(path, text)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    p = config.stash[plugin_key]
    if p.is_worker:
        config.workeroutput["fusion"] = p.session.to_output()
        return
    p.written = p.session.apply_writes(_write_atomic)
    for w in p.written:
        w["path_shown"] = p.shown(Path(w["path"]))
    stale = p.session.stale(_narrowed(config))
    if p.mode == "all":
        for path, _ in stale:
            path.unlink(missing_ok=True)
    p.stale = [{"path": p.shown(path), "test": test} for path, test in stale]
    if p.report_path is not None:
        _write_reports(p)


def _report_args(p: FusionPlugin) -> tuple:
    records = sorted(p.session.records.values(), key=lambda r: r["nodeid"])
    return records, p.written, p.stale, p.mode == "all"


def _write_reports(p: FusionPlugin) -> None:
    import json

    md = report.markdown(*_report_args(p), p.provenance)
    if p.report_path:
        base = Path(p.config.invocation_params.dir, p.report_path)
        if base.is_dir():
            base = base / "fusion-report"
        elif base.suffix in (".md", ".json"):
            base = base.with_suffix("")
        base.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(base.with_name(base.name + ".md"), md + "\n")
        doc = report.json_doc(*_report_args(p), p.provenance)
        _write_atomic(base.with_name(base.name + ".json"),
                                 json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        p.report_files = [base.with_name(base.name + s) for s in (".md", ".json")]
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as f:  # GitHub appends step summaries
            f.write(md + "\n")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    p = config.stash[plugin_key]
    if p.is_worker:
        return
    records, written, stale, removed = _report_args(p)
    lines = report.summary_lines(records, written, stale, removed)
    if p.report_path is not None:
        terminalreporter.write_sep("=", "fusion report")
        for line in report.table_lines(records) if records else ["no fusion checks ran"]:
            terminalreporter.write_line(line)
        for f in getattr(p, "report_files", []):
            terminalreporter.write_line(f"wrote {f}")
    if lines:
        terminalreporter.write_sep("-", "fusion baselines")
        for line in lines:
            terminalreporter.write_line(line)


class XdistHooks:
    """Registered only when pytest-xdist is loaded (its hook is unknown otherwise)."""

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        data = getattr(node, "workeroutput", {}).get("fusion")
        if data:
            node.config.stash[plugin_key].session.merge(data)
