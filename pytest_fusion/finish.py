"""Session end on the controller: write baselines, judge stale ones, clean up, write reports.

Reads the ``FusionSession`` (its queued writes, records and settings); writes the baselines
folder (queued baselines through ``BaselineStorage``, stale removals, leftover temp files of
killed writers) and the Markdown/JSON report files, every file atomically. Returns a
``SessionEnd``; nothing raises: each problem becomes one line among its ``errors`` (shown in
the terminal summary) or ``notes``, and ``failed`` says whether the run must fail.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fusion_core.units import counted, plural

from .records import SessionEnd

if TYPE_CHECKING:
    from .session import FusionSession


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


def finish(s: FusionSession, config: pytest.Config) -> SessionEnd:
    """Everything the controller does at session end."""
    opts = s.settings
    written, errors = s.storage.apply(s.writes)
    notes = []
    removed_temp = s.storage.remove_stray_temp_files()
    if removed_temp:
        notes.append(f"removed {counted(len(removed_temp), 'leftover temp file')} of an "
                     f"interrupted baseline write in {s.shown(s.folder)}/")
    if s.lost_workers:
        notes.append(f"stale baselines not judged: {plural(len(s.lost_workers), 'worker')} "
                     f"{', '.join(sorted(s.lost_workers))} went down before reporting "
                     "what they collected")
        stale = []
    else:
        stale = s.stale(narrowed_files(config))
    removing = opts.mode == "all" or opts.prune_stale
    if removing:
        for found in stale:
            found.path.unlink(missing_ok=True)
    failed = bool(errors)
    if stale and opts.fail_stale and not removing:
        errors.append(f"{counted(len(stale), 'stale fusion baseline')} and fusion_fail_stale "
                      "is set: remove them with pytest --fusion-prune-stale")
        failed = True
    end = SessionEnd(tuple(written), tuple(stale), removing)
    s.end = end  # the report reads what was written and found stale
    if opts.require_timings:
        unjudged = s.report().unjudged_line(required=True)
        if unjudged:
            errors.append(unjudged)
            failed = True
    files: list[Path] = []
    if opts.report_requested:
        failed |= not _write_reports(s, files, errors, notes)
    return replace(end, errors=tuple(errors), notes=tuple(notes), report_files=tuple(files),
                   failed=failed)


def _write_reports(s: FusionSession, files: list[Path], errors: list[str],
                   notes: list[str]) -> bool:
    """Write the report files and the step summary (adding to `files`, `errors` and
    `notes`); False when a requested file failed."""
    import fusion_core  # fileio only: loads no torch

    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    base = s.settings.report_base
    if base is None and not step_summary:
        return True  # the terminal table only: no provenance (and no device probe) needed
    report = s.report()
    md = report.markdown(s.provenance)
    ok = True
    if base is not None:
        doc = report.json_doc(s.provenance)
        texts = {base.with_name(base.name + ".md"): md + "\n",
                 base.with_name(base.name + ".json"): json.dumps(doc, indent=2,
                                                                 ensure_ascii=False) + "\n"}
        for path, text in texts.items():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fusion_core.write_atomic(path, text)
                files.append(path)
            except OSError as e:
                errors.append(f"could not write the fusion report {path}: {e.strerror or e}")
                ok = False
    if step_summary:
        try:
            with open(step_summary, "a", encoding="utf-8") as f:  # GitHub appends summaries
                f.write(md + "\n")
        except OSError as e:  # not asked for on the command line: a note, not a failure
            notes.append(f"could not append the fusion report to GITHUB_STEP_SUMMARY "
                         f"({step_summary}): {e.strerror or e}")
    return ok
