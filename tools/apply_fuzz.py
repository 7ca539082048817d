"""Fuzz `fusion-advisor --apply --yes` over a range of seeds, one JSON line per model.

    TRITON_INTERPRET=1 PYTHONPATH=.:tests python tools/apply_fuzz.py START COUNT [OUTDIR]

The models and checks are tests/apply_fuzz_models.py and tests/apply_fuzz_run.py (the slow
test tests/test_apply_fuzz.py runs the same under FUSION_APPLY_FUZZ=COUNT). Each model is
kept under OUTDIR/m<seed>/ (the rewritten file, its .bak, and orig<seed>.py) to reproduce.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from apply_fuzz_run import run_one


def main() -> None:
    start, count = int(sys.argv[1]), int(sys.argv[2])
    root = Path(sys.argv[3] if len(sys.argv) > 3 else "/tmp/applyfuzz")
    log = root / "log.jsonl"
    root.mkdir(parents=True, exist_ok=True)
    for seed in range(start, start + count):
        try:
            info = run_one(seed, root)
        except Exception as e:  # noqa: BLE001
            info = {"seed": seed, "status": "HARNESS", "why": repr(e)[:400]}
        with log.open("a") as f:
            f.write(json.dumps(info) + "\n")
        print(seed, info["status"], (info.get("why") or "")[:200].replace("\n", " "),
              flush=True)


if __name__ == "__main__":
    main()
