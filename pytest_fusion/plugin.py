"""pytest glue for fusion-advisor (entry point `pytest11: fusion`).

Reads command-line and ini options, the `fusion_check` marker and what xdist
workers send; writes baselines (controller only, atomically, at session end), the
terminal summary and, with `--fusion-report[=PATH]`, Markdown and JSON reports.
All run state lives in one ``FusionSession`` (``config.stash[session_key]``); options
in ``options``, session-end work in ``finish``, the report in ``report.FusionReport``:
this file wires them into pytest's hooks. Importing it loads no torch: the device is
probed when a fusion test first needs it, so runs without fusion tests pay (almost)
nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from . import options
from .measure import FusionHookSpecs, default_measure
from .records import NOT_CHECKED, TestRecord
from .session import FusionSession

if TYPE_CHECKING:  # the fixture, report and session-end modules load when first needed
    from .fixture import FusionAdvisor

MARKER = (
    "fusion_check(model, *inputs, dtype=None, checks=('clusters', 'rejections', 'traffic', "
    "'timings'), traffic_tolerance=None, timing_tolerance=None, timing_alpha=None, "
    "timing_min_bytes=None, capture=None, device=None, improvements=None, model_kwargs=None, "
    "timing_inputs=None, compiled=None, compiled_shapes=()): "
    "analyze `model` (an nn.Module; its class or a factory, called with `model_kwargs`; or a "
    ".py path, path.py:NAME or package.module:NAME) for the example "
    "`inputs` (tensors, shape tuples or 'N,M' strings of `dtype`, 'N,C,H,W:channels_last' for "
    "a channels-last one), timing its kernels at "
    "`timing_inputs` (same forms; default: `inputs`), "
    "captured with `capture` (auto, fx or export), for the target `device` (cpu or cuda), and "
    "compare the result with the test's baseline in the fusion_baselines folder; the "
    "tolerance, capture, device and improvements ('pass' or 'fail') keywords override the ini "
    "options for this test; compiled=True (or ini fusion_compiled) also gates what "
    "torch.compile makes of the model (graph breaks, graphs, Inductor kernels, recompiles "
    "under `compiled_shapes`: one shape per input each)")
DISABLED = "fusion checks disabled (--fusion-disable)"
session_key = pytest.StashKey["FusionSession"]()
advisor_key = pytest.StashKey["FusionAdvisor"]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(FusionHookSpecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> None:
    options.split_update_flag(args)  # before pytest's last parse of the command line


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.stash[session_key] = FusionSession(config)
    if config.stash[session_key].settings.report_base is not None:  # --fusion-report=PATH
        from . import html_report

        html_report.register(config, config.stash[session_key])
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "fusion-xdist")


def pytest_report_header(config: pytest.Config) -> str:
    s = config.stash[session_key]
    v, opts = s.versions, s.settings
    update = f", updating baselines: {opts.mode}" if opts.mode else ""
    off = ", checks disabled" if opts.disabled else ""
    return (f"fusion-advisor: torch {v['torch']}, triton {v['triton']}, baselines "
            f"{s.shown(opts.folder)}/, target {opts.target}{update}{off}")


@pytest.hookimpl(trylast=True)
def pytest_fusion_measure(analysis: Any, config: pytest.Config, device: str,
                          kernels: Any) -> dict | None:
    return default_measure(analysis, device, kernels)


@pytest.fixture
def fusion_advisor(request: pytest.FixtureRequest) -> FusionAdvisor:
    """Analyze models, assert on their fusion, and check them against the test's baseline."""
    return _advisor(request.node)


def _advisor(item: pytest.Item) -> FusionAdvisor:
    from .fixture import FusionAdvisor

    if advisor_key not in item.stash:
        item.stash[advisor_key] = FusionAdvisor(item, item.config.stash[session_key])
    return item.stash[advisor_key]


def _uses_fusion(item: pytest.Item) -> bool:
    return (item.get_closest_marker("fusion_check") is not None
            or "fusion_advisor" in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.stash[session_key].settings.disabled:
        for item in items:
            if _uses_fusion(item):
                item.add_marker(pytest.mark.skip(reason=DISABLED))


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_make_collect_report(collector: pytest.Collector):
    # Innermost wrapper: sees a file's items before pytest's --lf wrapper filters them.
    rep = yield
    ids = [x.nodeid for x in rep.result or () if isinstance(x, pytest.Item)]
    if ids:
        collector.config.stash[session_key].defined.update(ids)
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
    s = item.config.stash[session_key]
    advisor = item.stash.get(advisor_key, None)
    if rep.when == "call" and rep.failed and advisor is not None and not advisor.checked:
        # The test used the fixture but failed before check(): keep it in the report.
        last = advisor.last_result
        s.record(TestRecord(item.nodeid, NOT_CHECKED, last.snapshot.model if last else ""))
    if rep.when == "teardown" and s.is_worker:
        # Ship this test's verdict and pending writes now: a worker that dies later
        # loses nothing (the attribute travels with the serialized report).
        data = s.take(item.nodeid)
        if data:
            rep.fusion_data = data
    return rep


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    data = getattr(report, "fusion_data", None)
    node = getattr(report, "node", None)  # set by xdist on the controller
    if data and node is not None:
        node.config.stash[session_key].merge(data)


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[session_key].collected.update(i.nodeid for i in session.items)


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash[session_key].deselected.update(i.nodeid for i in items)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    s = config.stash[session_key]
    if s.is_worker:
        config.workeroutput["fusion"] = s.to_output()
        return
    from . import finish

    end = finish.finish(s, config)
    s.end = end
    s.errors += end.errors
    s.notes += end.notes
    s.report_files += end.report_files
    if end.failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    s = config.stash[session_key]
    opts = s.settings
    if s.is_worker or not (s.records or s.end and (s.end.written or s.end.stale) or s.notes
                           or s.errors or opts.report_requested):
        return  # nothing to say: a run without fusion tests loads no report code
    report = s.report()
    lines = report.summary_lines() + s.notes
    unjudged = report.unjudged_line(opts.require_timings)
    if unjudged and not opts.require_timings:  # required, it is among the errors below
        lines.append(unjudged)
    if opts.report_requested:
        terminalreporter.write_sep("=", "fusion report")
        if report.records:
            terminalreporter.write_line(f"device: {s.device}")
        for line in report.table_lines() if report.records else ["no fusion checks ran"]:
            terminalreporter.write_line(line)
        from .compiled_report import terminal_lines  # tests with a compiled record, if any

        for line in terminal_lines(report.records):
            terminalreporter.write_line(line)
        for f in s.report_files:
            terminalreporter.write_line(f"wrote {f}")
    if lines:
        terminalreporter.write_sep("-", "fusion baselines")
        for line in lines:
            terminalreporter.write_line(line)
    for line in s.errors:
        terminalreporter.write_line(f"ERROR: {line}", red=True, bold=True)


class XdistHooks:
    """Registered only when pytest-xdist is loaded (its hook is unknown otherwise)."""

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        s = node.config.stash[session_key]
        data = getattr(node, "workeroutput", {}).get("fusion")
        if data is None:
            s.lost_workers.add(str(getattr(getattr(node, "gateway", None), "id", node)))
        else:
            s.merge(data)
