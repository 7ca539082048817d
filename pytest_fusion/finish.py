"""Session end on the controller: write baselines, judge stale ones, clean up, write reports.

Reads the plugin state (``FusionPlugin``: the session's queued writes and records,
the options); writes the baselines folder (queued baselines, stale removals,
leftover temp files of killed writers) and the report files, every file through
``fusion_core.write_atomic``. Nothing raises: each problem becomes one line in
``plugin.errors`` (shown in the terminal summary) or ``plugin.notes``, and
``failed`` says whether the run's exit status must become a failure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest


def write_atomic(path: Path, text: str) -> None:
    import fusion_core  # fileio only: the name table loads no torch

    fusion_core.write_atomic(path, text)


def _remove_stray_temp_files(folder: Path) -> list[Path]:
    import fusion_core

    return fusion_core.remove_stray_temp_files(folder)


def narrowed_files(config: pytest.Config) -> set[str]:
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


def finish(p: Any, session: pytest.Session) -> bool:
    """Everything the controller does at session end; True when the run must fail."""
    failed = False
    written, errors = p.session.apply_writes(write_atomic)
    p.errors += errors
    failed |= bool(errors)
    for w in written:
        w["path_shown"] = p.shown(Path(w["path"]))
    p.written = written
    removed_temp = _remove_stray_temp_files(p.folder) if p.folder.is_dir() else []
    if removed_temp:
        p.notes.append(f"removed {len(removed_temp)} leftover temp file(s) of an interrupted "
                       f"baseline write in {p.shown(p.folder)}/")
    if p.lost_workers:
        p.notes.append("stale baselines not judged: worker(s) "
                       f"{', '.join(sorted(p.lost_workers))} went down before reporting "
                       "what they collected")
        stale = []
    else:
        stale = p.session.stale(narrowed_files(session.config))
    p.removing_stale = p.mode == "all" or p.prune_stale
    if p.removing_stale:
        for path, _ in stale:
            path.unlink(missing_ok=True)
    p.stale = [{"path": p.shown(path), "test": test} for path, test in stale]
    if stale and p.fail_stale and not p.removing_stale:
        p.errors.append(f"{len(stale)} stale fusion baseline(s) and fusion_fail_stale is set: "
                        "remove them with pytest --fusion-prune-stale")
        failed = True
    if p.require_timings:
        from .report import unjudged_line

        unjudged = unjudged_line(report_args(p)[0], required=True)
        if unjudged:
            p.errors.append(unjudged)
            failed = True
    if p.report_requested:
        failed |= not _write_reports(p)
    return failed


def report_args(p: Any) -> tuple:
    records = sorted(p.session.records.values(), key=lambda r: r["nodeid"])
    return records, p.written, p.stale, p.removing_stale


def _write_reports(p: Any) -> bool:
    """Write the report files and the step summary; False when a requested file failed."""
    from . import report

    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if p.report_base is None and not step_summary:
        return True  # the terminal table only: no provenance (and no device probe) needed
    md = report.markdown(*report_args(p), p.provenance)
    ok = True
    if p.report_base is not None:
        base = p.report_base
        doc = report.json_doc(*report_args(p), p.provenance)
        files = {base.with_name(base.name + ".md"): md + "\n",
                 base.with_name(base.name + ".json"): json.dumps(doc, indent=2,
                                                                 ensure_ascii=False) + "\n"}
        for path, text in files.items():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(path, text)
                p.report_files.append(path)
            except OSError as e:
                p.errors.append(f"could not write the fusion report {path}: {e.strerror or e}")
                ok = False
    if step_summary:
        try:
            with open(step_summary, "a", encoding="utf-8") as f:  # GitHub appends summaries
                f.write(md + "\n")
        except OSError as e:  # not asked for on the command line: a note, not a failure
            p.notes.append(f"could not append the fusion report to GITHUB_STEP_SUMMARY "
                           f"({step_summary}): {e.strerror or e}")
    return ok
