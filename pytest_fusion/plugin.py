"""pytest glue for fusion-advisor (entry point `pytest11: fusion`).

Reads command-line and ini options, the `fusion_check` marker and what xdist
workers send; writes baselines (controller only, atomically, at session end), the
terminal summary and, with `--fusion-report[=PATH]`, Markdown and JSON reports.
Options live in ``options``, session-end work in ``finish``, the data model,
comparison and report text in the sibling modules: this file wires them into
pytest's hooks. Importing it loads no torch: the device is probed when a fusion
test first needs it, so runs without fusion tests pay (almost) nothing.
"""

from __future__ import annotations

import datetime
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import options
from .measure import FusionHookSpecs, default_measure, local_device
from .options import CAPTURES
from .session import FusionSession, TestRecord

if TYPE_CHECKING:  # the fixture, report and session-end modules load when first needed
    from .fixture import FusionAdvisor

MARKER = (
    "fusion_check(model, *inputs, dtype=None, checks=('clusters', 'rejections', 'traffic', "
    "'timings'), traffic_tolerance=None, timing_tolerance=None, timing_alpha=None, "
    "timing_min_bytes=None, capture=None, device=None, improvements=None, model_kwargs=None, "
    "timing_inputs=None, compiled=None, compiled_shapes=()): "
    "analyze `model` (an nn.Module; its class or a factory, called with `model_kwargs`; or a "
    ".py path, path.py:NAME or package.module:NAME) for the example "
    "`inputs` (tensors, shape tuples or 'N,M' strings of `dtype`), timing its kernels at "
    "`timing_inputs` (same forms; default: `inputs`), "
    "captured with `capture` (auto, fx or export), for the target `device` (cpu or cuda), and "
    "compare the result with the test's baseline in the fusion_baselines folder; the "
    "tolerance, capture, device and improvements ('pass' or 'fail') keywords override the ini "
    "options for this test; compiled=True (or ini fusion_compiled) also gates what "
    "torch.compile makes of the model (graph breaks, graphs, Inductor kernels, recompiles "
    "under `compiled_shapes`: one shape per input each)")
DISABLED = "fusion checks disabled (--fusion-disable)"
plugin_key = pytest.StashKey["FusionPlugin"]()
advisor_key = pytest.StashKey["FusionAdvisor"]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(FusionHookSpecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> None:
    options.split_update_flag(args)  # before pytest's last parse of the command line


def _versions() -> dict[str, str]:
    found = {}
    for pkg in ("torch", "triton"):
        try:
            found[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            found[pkg] = "not installed"
    return found


class FusionPlugin:
    """Per-run state (in ``config.stash``): options, the session, session-end results."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        folder = Path(config.getini("fusion_baselines_dir"))
        self.folder = folder if folder.is_absolute() else config.rootpath / folder
        self.mode = options.update_mode(config)
        self.report_requested = config.getoption("fusion_report") is not None
        self.report_base = options.report_base(config)
        self.ini_tolerances = options.ini_tolerances(config)
        self.capture: str = config.getini("fusion_capture").strip()
        if self.capture not in CAPTURES:
            raise pytest.UsageError(f"ini option fusion_capture must be one of "
                                    f"{', '.join(CAPTURES)}, got {self.capture!r}")
        self.improvements: str = config.getini("fusion_improvements").strip()
        bad = options.check_improvements(self.improvements, "ini option fusion_improvements")
        if bad:
            raise pytest.UsageError(bad)
        self.target = options.ini_target(config)  # the marker's or analyze()'s device= wins
        self.compiled: bool = bool(config.getini("fusion_compiled"))  # compiled= on a test wins
        self.compiler_change = options.ini_compiler_change(config)
        flag = config.getoption("fusion_fail_stale")
        self.fail_stale = bool(config.getini("fusion_fail_stale") if flag is None else flag)
        flag = config.getoption("fusion_require_timings")
        self.require_timings = bool(config.getini("fusion_require_timings") if flag is None
                                    else flag)
        self.prune_stale: bool = config.getoption("fusion_prune_stale")
        self.disabled: bool = config.getoption("fusion_disable")
        self.session = FusionSession(config.rootpath, self.folder, self.mode,
                                     lambda: self.provenance, config.get_verbosity())
        self.is_worker = hasattr(config, "workerinput")
        self.stale: list[dict[str, Any]] = []
        self.written: list[dict[str, Any]] = []
        self.report_files: list[Path] = []
        self.removing_stale = False
        self.lost_workers: set[str] = set()
        self.errors: list[str] = []  # problems that fail the run
        self.notes: list[str] = []  # things worth a line that do not

    @cached_property
    def versions(self) -> dict[str, str]:
        return _versions()  # package metadata (~10 ms): for the header and provenance only

    @cached_property
    def device(self) -> str:
        return local_device()  # imports torch: only once a fusion test or report needs it

    @property
    def hw_key(self) -> str | None:
        return None if self.device == "cpu" else self.device

    @cached_property
    def provenance(self) -> dict[str, str]:
        prov = {**self.versions, "device": self.device,
                "date": datetime.date.today().isoformat()}
        if not self.session.owns({}):  # a folder outside the rootdir may be shared
            prov["project"] = self.config.rootpath.name
        return prov

    def shown(self, path: Path) -> str:
        return self.session.shown(path)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.stash[plugin_key] = FusionPlugin(config)
    if config.stash[plugin_key].report_base is not None:  # --fusion-report=PATH
        from . import html_report

        html_report.register(config, config.stash[plugin_key])
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "fusion-xdist")


def pytest_report_header(config: pytest.Config) -> str:
    p = config.stash[plugin_key]
    v = p.versions
    update = f", updating baselines: {p.mode}" if p.mode else ""
    off = ", checks disabled" if p.disabled else ""
    return (f"fusion-advisor: torch {v['torch']}, triton {v['triton']}, baselines "
            f"{p.shown(p.folder)}/, target {p.target}{update}{off}")


@pytest.hookimpl(trylast=True)
def pytest_fusion_measure(analysis: Any, config: pytest.Config, device: str) -> dict | None:
    return default_measure(analysis, device)


@pytest.fixture
def fusion_advisor(request: pytest.FixtureRequest) -> FusionAdvisor:
    """Analyze models, assert on their fusion, and check them against the test's baseline."""
    return _advisor(request.node)


def _advisor(item: pytest.Item) -> FusionAdvisor:
    from .fixture import FusionAdvisor

    if advisor_key not in item.stash:
        item.stash[advisor_key] = FusionAdvisor(item, item.config.stash[plugin_key])
    return item.stash[advisor_key]


def _uses_fusion(item: pytest.Item) -> bool:
    return (item.get_closest_marker("fusion_check") is not None
            or "fusion_advisor" in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.stash[plugin_key].disabled:
        for item in items:
            if _uses_fusion(item):
                item.add_marker(pytest.mark.skip(reason=DISABLED))


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_make_collect_report(collector: pytest.Collector):
    # Innermost wrapper: sees a file's items before pytest's --lf wrapper filters them.
    rep = yield
    ids = [x.nodeid for x in rep.result or () if isinstance(x, pytest.Item)]
    if ids:
        collector.config.stash[plugin_key].session.defined.update(ids)
    return rep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if item.get_closest_marker("fusion_check") is None:
        return (yield)
    advisor = _advisor(item)
    # Check before the body: a regression message is the clearest failure a reviewer can get,
    # and a failing body assertion must not hide it. The body reads fusion_advisor.result.
    # A missing baseline waits for the body: on a first run the test's own assertions run,
    # and a body failure carries the missing baseline as a note, so both are reported.
    missing = advisor.check_marker()
    try:
        out = yield
    except Exception as e:
        if missing:
            e.add_note(missing)
        raise
    if missing:
        pytest.fail(missing, pytrace=False)
    return out


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    rep = yield
    p = item.config.stash[plugin_key]
    advisor = item.stash.get(advisor_key, None)
    if rep.when == "call" and rep.failed and advisor is not None and not advisor.checked:
        # The test used the fixture but failed before check(): keep it in the report.
        from .report import NOT_CHECKED

        last = advisor.last_result
        p.session.record(TestRecord(item.nodeid, NOT_CHECKED,
                                    last.snapshot.model if last else ""))
    if rep.when == "teardown" and p.is_worker:
        # Ship this test's verdict and pending writes now: a worker that dies later
        # loses nothing (the attribute travels with the serialized report).
        data = p.session.take(item.nodeid)
        if data:
            rep.fusion_data = data
    return rep


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    data = getattr(report, "fusion_data", None)
    node = getattr(report, "node", None)  # set by xdist on the controller
    if data and node is not None:
        node.config.stash[plugin_key].session.merge(data)


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[plugin_key].session.collected.update(i.nodeid for i in session.items)


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash[plugin_key].session.deselected.update(i.nodeid for i in items)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    p = config.stash[plugin_key]
    if p.is_worker:
        config.workeroutput["fusion"] = p.session.to_output()
        return
    from . import finish

    if finish.finish(p, session) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    p = config.stash[plugin_key]
    if p.is_worker or not (p.session.records or p.written or p.stale or p.notes or p.errors
                           or p.report_requested):
        return  # nothing to say: a run without fusion tests loads no report code
    from . import finish, report

    records, written, stale, removed = finish.report_args(p)
    lines = report.summary_lines(records, written, stale, removed) + p.notes
    unjudged = report.unjudged_line(records, p.require_timings)
    if unjudged and not p.require_timings:  # required, it is among the errors below
        lines.append(unjudged)
    if p.report_requested:
        terminalreporter.write_sep("=", "fusion report")
        if records:
            terminalreporter.write_line(f"device: {p.device}")
        for line in report.table_lines(records) if records else ["no fusion checks ran"]:
            terminalreporter.write_line(line)
        from .compiled_report import terminal_lines  # tests with a compiled record, if any

        for line in terminal_lines(records):
            terminalreporter.write_line(line)
        for f in p.report_files:
            terminalreporter.write_line(f"wrote {f}")
    if lines:
        terminalreporter.write_sep("-", "fusion baselines")
        for line in lines:
            terminalreporter.write_line(line)
    for line in p.errors:
        terminalreporter.write_line(f"ERROR: {line}", red=True, bold=True)


class XdistHooks:
    """Registered only when pytest-xdist is loaded (its hook is unknown otherwise)."""

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        p = node.config.stash[plugin_key]
        data = getattr(node, "workeroutput", {}).get("fusion")
        if data is None:
            p.lost_workers.add(str(getattr(getattr(node, "gateway", None), "id", node)))
        else:
            p.session.merge(data)
