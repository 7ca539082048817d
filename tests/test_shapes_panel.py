"""The shapes panel's case building and numerics at tiny sizes (`--dry-run`), on any machine:
the lead runs the timed panel on the GPU in one call, so its cases must build here first."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import panel_timing  # noqa: E402
import pytest  # noqa: E402
import shapes_panel  # noqa: E402
import torch  # noqa: E402


def _fake_clock(monkeypatch, fake) -> None:
    """The device clock faked where the panel times: its first samples and the rest."""
    for module in (shapes_panel, panel_timing):
        monkeypatch.setattr(module, "graph_us", fake)


def test_dry_run_builds_and_checks_cases(tmp_path):
    labels = [c.label for c in shapes_panel.CASES]
    picks = [labels.index("softmax(x/8) 256x50257"),  # 77 columns: the looped kernel
             labels.index("causal-mask softmax 8x1024x1024"),
             labels.index("relu(x.T*2) 4096x4096"),  # flat, in x.T's memory order
             labels.index("softmax(x/8, dim=1) NCHW 32x64x56x56"),
             labels.index("(y*g).permute(0,3,1,2)+x 64x96x56x56")]  # tiled over (N, C) rows
    out = tmp_path / "panel.json"
    code = shapes_panel.main(["--dry-run", "--out", str(out),
                              "--cases", ",".join(map(str, picks))])
    rows = json.loads(out.read_text())["rows"]
    assert code == 0 and len(rows) == 5
    looped, causal, transposed, channels, channels_last = rows
    for row in (looped, causal, transposed, channels, channels_last):
        assert row["ok"] and row["default_ok"] and row["user_config"], row
    # eager writes relu(x.T * 2) transposed too: one memory order, iterated in it (it tiled)
    assert looped["kernel"]["looped"] and not transposed["kernel"]["tiled"]
    # 2 tiny rows of 77 columns stand for few wide ones: the heuristic splits them (with
    # CUDA the user's column is whatever the launcher's timing picked)
    assert looped["kernel"]["kind"] == "split" and looped["default_config"][0][3] > 1, looped
    assert channels_last["kernel"]["tiled"]
    # a softmax over the channel dim now fuses: its rows are (N, H, W) positions
    assert channels["ok"] and channels["default_ok"] and not channels["kernel"]["looped"]


def test_case_numbers_take_groups_numbers_and_name_a_bad_one():
    groups = shapes_panel.GROUPS
    assert shapes_panel.case_numbers("widths,3") == [*groups["widths"], 3]
    assert shapes_panel.case_numbers("all") == list(range(len(shapes_panel.CASES)))
    labels = [shapes_panel.CASES[i].label for i in groups["widths"]]
    assert labels == ["softmax(x/8) 2048x50257", "softmax(x/8) 2048x50304",
                      "softmax(x/8) 1024x32000", "softmax(x/8) 1024x32768"]
    norms = {(shapes_panel.CASES[i].label.split()[0], shapes_panel.CASES[i].dtype,
              shapes_panel.CASES[i].shapes[0][1]) for i in groups["norms"]}
    for op in ("layer_norm*2", "rms_norm"):  # every dtype at every width, each past L2
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            assert {w for o, d, w in norms if (o, d) == (op, dtype)} >= {1024, 4096, 16384, 65536}
    for i in groups["norms"]:  # (the forced loops compare with the headline rows' sizes)
        rows, cols = shapes_panel.CASES[i].shapes[0]
        if shapes_panel.CASES[i].looped:
            continue
        assert rows * cols * shapes_panel.CASES[i].dtype.itemsize >= 50 << 20
    with pytest.raises(ValueError, match="no case 'wide'"):
        shapes_panel.case_numbers("wide")
    with pytest.raises(ValueError, match="no case '999'"):
        shapes_panel.case_numbers("999")


def test_every_candidate_is_timed_with_its_own_configuration(monkeypatch, tmp_path):
    """The default-vs-best column: each configuration of the case's bucket is launched (and
    computes the right result) in turn; the timer is faked. The inputs live where the panel
    puts them: where CUDA is, the kernel is compiled and takes CUDA tensors."""
    case = next(c for c in shapes_panel.CASES if c.label == "layer_norm->gelu 4096x4096")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    module, inputs = shapes_panel.build(case, True, device, torch.Generator().manual_seed(0))
    from fusion_core.codegen import generate, write_kernels
    from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster
    from fusion_core.pipeline import analyze

    analysis = analyze(module, *inputs)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, shapes_panel.DRY_RUN_TUNING)
    path = write_kernels([kernel], tmp_path)[0]
    args = cluster_inputs(analysis, cluster, capture_values(analysis, *inputs))
    (want,) = eager_cluster(analysis, cluster)(*args)
    seen = []

    def fake_graph_us(fn, sets):
        out = fn(*sets[0])
        torch.testing.assert_close(out, want, atol=2e-3, rtol=2e-3)
        probe = fn.__globals__
        seen.append(next(iter(probe["CHOSEN"].values())))
        return 10.0 - len(seen)  # the last one timed is fastest

    _fake_clock(monkeypatch, fake_graph_us)
    found = shapes_panel.candidate_us(path, kernel.name, args, [args])
    assert not any("error" in c for c in found), found
    assert [tuple(c["config"]) for c in found] == seen and len(set(seen)) == len(seen) >= 3
    assert min(found, key=lambda c: c["us"])["config"] == list(seen[-1])


def test_the_timed_path_fills_every_column_with_the_clock_faked(monkeypatch, tmp_path):
    """What a GPU run does after the numerics, on CPU: the device clock, the copy, the input
    rotation, the CUDA sync and torch.compile faked, a case at tiny size; every column the
    table prints is filled (the GPU run is the first to see real times)."""
    def fake_graph_us(fn, sets):
        fn(*sets[0])
        return 2.0

    _fake_clock(monkeypatch, fake_graph_us)
    monkeypatch.setattr(shapes_panel, "copy_us", lambda nbytes, l2: 1.0)
    monkeypatch.setattr(shapes_panel, "rotating", lambda inputs, l2: [tuple(inputs)])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch, "compile", lambda fn: fn)
    monkeypatch.setenv("FUSION_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    small = [c for c in shapes_panel.CASES if c.label == "layer_norm*2 8192x4096"][0]
    case = shapes_panel.Case("layer_norm*2 tiny", small.fn, ((4, 64),), ((4, 64),),
                             small.dtype, small.params, liger=small.liger)
    args = shapes_panel.argparse.Namespace(dry_run=False, rounds=2)
    (tmp_path / "work").mkdir()
    row = shapes_panel.run_case(case, args, 0, {}, tmp_path / "work")
    assert row["ok"] and row["default_ok"], row
    for key in ("user_us", "default_us", "best_us", "inductor_us", "copy_us", "eager_us"):
        assert row[key] > 0, key
    assert row["default_over_best"] == 1.0 and row["pct_copy"] == 0.5
    assert row["user_us_rounds"] == row["inductor_us_rounds"] == [2.0, 2.0]
    assert [c["config"] for c in row["candidates"]][0] == row["default_config"][0]
    assert row["cache_hit"]  # (nothing is timed on CPU: the second load picks the same)
    line = shapes_panel.table([row]).splitlines()[-1]
    assert line.count("|") == 16 and "layer_norm*2 tiny" in line


def test_the_compared_columns_are_timed_in_interleaved_rounds_each_its_lowest():
    order = []
    times = iter([9.0, 5.0, 7.0, 6.0])

    def timer(fn, sets):
        order.append(fn)
        return next(times)

    row = {"user_us": 8.0, "inductor_us": 4.0}
    shapes_panel.interleaved(row, {"user_us": ("ours", None), "inductor_us": ("inductor", None)},
                             3, timer)
    assert order == ["ours", "inductor", "ours", "inductor"]  # one of each a round
    assert row["user_us_rounds"] == [8.0, 9.0, 7.0] and row["user_us"] == 7.0
    assert row["inductor_us_rounds"] == [4.0, 5.0, 6.0] and row["inductor_us"] == 4.0


def test_a_column_failing_in_a_later_round_keeps_its_rounds_and_names_the_error():
    def timer(fn, sets):
        if fn == "liger":
            raise RuntimeError("out of memory")
        return 3.0

    row = {"user_us": 5.0, "liger_us": 4.0}
    shapes_panel.interleaved(row, {"user_us": ("ours", None), "liger_us": ("liger", None)},
                             3, timer)
    assert row["user_us_rounds"] == [5.0, 3.0, 3.0] and row["user_us"] == 3.0
    assert row["liger_us_rounds"] == [4.0] and row["liger_us"] == 4.0
    assert row["liger_us_error"] == "round 2: RuntimeError: out of memory"


def test_default_and_best_are_timed_again_side_by_side_unless_they_are_one_config(monkeypatch):
    """The default/best ratio: 1.0 without timing where the heuristic's pick is the best
    configuration; otherwise both timed afresh in interleaved rounds, each its lowest."""
    clock = iter([7.0, 5.0, 6.0, 4.5])  # default, best, default, best

    def fake_graph_us(fn, sets):
        return next(clock)

    _fake_clock(monkeypatch, fake_graph_us)
    same = {"default_config": [[1024, 1, 4]], "best_config": [1024, 1, 4],
            "default_us": 9.0, "best_us": 8.0}
    shapes_panel.default_vs_best(same, print, print, [()], 3)
    assert same["default_is_best"] and same["default_over_best"] == 1.0
    assert "default_vs_best_rounds" not in same and next(clock) == 7.0  # nothing timed
    clock = iter([8.0, 5.5, 7.0, 5.0, 6.0, 4.5])  # default, best, default, best, ...
    other = {"default_config": [[1024, 1, 4]], "best_config": [1024, 1, 8],
             "default_us": 9.0, "best_us": 3.0}  # the best's candidate sample is not reused
    shapes_panel.default_vs_best(other, print, print, [()], 3)
    assert not other["default_is_best"]
    assert other["default_vs_best_rounds"] == {"default": [8.0, 7.0, 6.0],
                                               "best": [5.5, 5.0, 4.5]}
    assert other["default_over_best"] == 6.0 / 4.5
    assert (other["default_us"], other["best_us"]) == (9.0, 3.0)  # the columns keep theirs
