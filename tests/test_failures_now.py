"""tools/failures_now.py: a failure's traceback and every test's seconds are on disk as soon
as pytest reports them, so a device call cut off by its time limit still says both."""

import os
from pathlib import Path

pytest_plugins = ["pytester"]
TOOLS = str(Path(__file__).resolve().parent.parent / "tools")


def _with_tools(monkeypatch) -> None:
    """The plugin loads in pytester's child process: put tools/ on its path."""
    paths = [TOOLS, os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))


def test_failures_and_durations_are_written_as_reported(pytester, monkeypatch):
    _with_tools(monkeypatch)
    monkeypatch.setenv("FAILURES_LOG", str(pytester.path / "failures.log"))
    monkeypatch.setenv("DURATIONS_LOG", str(pytester.path / "durations.log"))
    pytester.makepyfile(test_two="""
        import time
        def test_slow_pass():
            time.sleep(0.3)
        def test_fails():
            assert 1 == 2, "one is not two"
    """)
    result = pytester.runpytest_subprocess("-p", "failures_now", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    failures = (pytester.path / "failures.log").read_text()
    assert "==== test_two.py::test_fails (call)" in failures
    assert "one is not two" in failures and "test_slow_pass" not in failures
    durations = dict(reversed(line.split()) for line in
                     (pytester.path / "durations.log").read_text().splitlines())
    assert set(durations) == {"test_two.py::test_slow_pass", "test_two.py::test_fails"}
    assert float(durations["test_two.py::test_slow_pass"]) >= 0.3


def test_without_durations_log_nothing_but_failures_is_written(pytester, monkeypatch):
    _with_tools(monkeypatch)
    monkeypatch.setenv("FAILURES_LOG", str(pytester.path / "failures.log"))
    monkeypatch.delenv("DURATIONS_LOG", raising=False)
    pytester.makepyfile(test_one="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "failures_now", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert sorted(p.name for p in pytester.path.iterdir() if p.suffix == ".log") == []
