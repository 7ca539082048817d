"""pytest plugin for fusion-advisor: fusion baselines checked like any other test.

Entry point `pytest11: fusion = pytest_fusion.plugin`. Modules: ``snapshot`` (the
baseline data model and YAML data), ``compare`` (regressions and improvements in
words), ``timing`` (the noise-aware timing gate), ``measure`` (where measured fields
come from), ``session`` (verdicts, queued writes, stale files), ``report`` (terminal,
Markdown, JSON), ``fixture`` (`fusion_advisor`), ``options`` (command-line and ini
values), ``finish`` (session end: writes, stale files, temp files, report files) and
``plugin`` (the hooks).
"""
