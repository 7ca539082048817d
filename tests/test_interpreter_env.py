"""The root conftest's guard on TRITON_INTERPRET at collection: a test module that sets it
as it is imported is a collection error naming the module, and the variable is put back
(on a GPU machine it made every later kernel of the worker an interpreted one)."""

import os
from pathlib import Path

import pytest


class _Guard:
    """Only the root conftest's collection hook, for an inner pytest run."""

    def __init__(self, config: pytest.Config) -> None:
        root = config.pluginmanager.get_plugin(str(Path(config.rootpath, "conftest.py")))
        self.pytest_make_collect_report = root.pytest_make_collect_report


def test_a_module_setting_the_variable_at_import_is_a_collection_error(pytester, request):
    before = os.environ.get("TRITON_INTERPRET")
    flipped = "0" if before == "1" else "1"
    pytester.makepyfile(test_sets=f"""
        import os
        os.environ["TRITON_INTERPRET"] = "{flipped}"

        def test_nothing():
            pass
    """)
    result = pytester.inline_run("-p", "no:cacheprovider", plugins=[_Guard(request.config)])
    reports = result.getreports("pytest_collectreport")
    failed = [r for r in reports if r.failed]
    assert len(failed) == 1, reports
    assert str(failed[0].longrepr) == (
        f"importing test_sets.py set TRITON_INTERPRET={flipped!r} (it was {before!r}): "
        "set it in a runner's main(), not at import")
    assert os.environ.get("TRITON_INTERPRET") == before


def test_a_module_leaving_the_variable_alone_collects(pytester, request):
    pytester.makepyfile(test_plain="def test_nothing():\n    pass\n")
    result = pytester.inline_run("-p", "no:cacheprovider", plugins=[_Guard(request.config)])
    result.assertoutcome(passed=1)
