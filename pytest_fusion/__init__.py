"""pytest plugin for fusion-advisor: fusion baselines checked like any other test.

Entry point `pytest11: fusion = pytest_fusion.plugin`. Modules: ``plugin`` (the hooks),
``session`` (``FusionSession``: all run state), ``records`` (the frozen per-test records,
queued writes and session-end outcome), ``storage`` (``BaselineStorage``: the YAML files),
``judge`` (one test against its baseline), ``result`` (``FusionResult`` and its
assertions), ``fixture`` (`fusion_advisor`), ``report`` (``FusionReport``: terminal,
Markdown, JSON and HTML index rows from one source), ``finish`` (session end), ``options``
(command-line and ini values), ``snapshot``/``schema`` (the baseline data model and its
YAML data), ``compare`` (regressions and improvements in words), ``timing`` (the
noise-aware timing gate) and ``measure`` (where measured fields come from).
"""
