"""The shapes panel's case building and numerics at tiny sizes (`--dry-run`), on any machine:
the lead runs the timed panel on the GPU in one call, so its cases must build here first."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import shapes_panel  # noqa: E402


def test_dry_run_builds_and_checks_cases(tmp_path):
    labels = [c.label for c in shapes_panel.CASES]
    picks = [labels.index("softmax(x/8) 256x50257"),  # 77 columns: the looped kernel
             labels.index("causal-mask softmax 8x1024x1024"),
             labels.index("relu(x.T*2) 4096x4096"),  # tiled
             labels.index("softmax(x/8, dim=1) NCHW 32x64x56x56"),
             labels.index("(y*g).permute(0,3,1,2)+x 64x96x56x56")]  # tiled over (N, C) rows
    out = tmp_path / "panel.json"
    code = shapes_panel.main(["--dry-run", "--out", str(out),
                              "--cases", ",".join(map(str, picks))])
    rows = json.loads(out.read_text())["rows"]
    assert code == 0 and len(rows) == 5
    looped, causal, tiled, channels, channels_last = rows
    for row in (looped, causal, tiled, channels, channels_last):
        assert row["ok"] and row["default_ok"] and row["user_config"], row
    assert looped["kernel"]["looped"] and tiled["kernel"]["tiled"]
    # 2 tiny rows of 77 columns stand for few wide ones: the heuristic splits them (with
    # CUDA the user's column is whatever the launcher's timing picked)
    assert looped["kernel"]["kind"] == "split" and looped["default_config"][0][3] > 1, looped
    assert channels_last["kernel"]["tiled"]
    # a softmax over the channel dim now fuses: its rows are (N, H, W) positions
    assert channels["ok"] and channels["default_ok"] and not channels["kernel"]["looped"]
