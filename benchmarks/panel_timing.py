"""How shapes_panel.py times a case beyond its first samples: the compared columns in
interleaved rounds, every candidate configuration of the case's bucket, the heuristic's pick
against the best one, and the tuning cache a second load reads.

Reads a generated kernel file (its launcher's `_choose`, `CHOSEN`, `DIRECT_LAUNCH` and
`_time`) and timing callables; writes the panel row's fields. Timings go through `graph_us`
(gpu_clusters.py's device clock: CUDA-graph replays over rotating inputs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
from gpu_clusters import as_tuple, close, copy_us, graph_us, rotating

from fusion_core.codegen import load_kernel


def interleaved(row: dict, timed: dict[str, tuple[Callable, list]], rounds: int,
                timer: Callable[[Callable, list], float] | None = None) -> None:
    """The columns the ratios compare (ours as the user gets it, Inductor's, Liger's), timed
    in `rounds` rounds, one of each a round, each column the lowest of its rounds' medians: a
    column timed first in a row no longer carries the row's slowest minute alone (one sample
    each left "user gets" and the best candidate of the same configuration 2-3% apart). The
    first round is the row's first timing of each; every round goes to `<column>_rounds`. A
    column whose later round fails keeps the rounds it has (the error in `<column>_error`).
    The copy column stays one sample: "% of copy" divides it by ours' lowest round."""
    for key in timed:
        row[f"{key}_rounds"] = [row[key]]
    for _ in range(rounds - 1):
        for key, (fn, sets) in timed.items():
            if f"{key}_error" in row:
                continue
            try:
                row[f"{key}_rounds"].append((timer or graph_us)(fn, sets))
            except Exception as e:  # noqa: BLE001 - report, keep the rounds timed
                done = len(row[f"{key}_rounds"])
                row[f"{key}_error"] = f"round {done + 1}: {type(e).__name__}: {e}"[:200]
    for key in timed:
        row[key] = min(row[f"{key}_rounds"])


def candidate_us(path: Path, name: str, inputs, sets, candidates: tuple = ()) -> list[dict]:
    """Every configuration the launcher may time for the case's shape bucket, each timed as
    the panel times the user's (a fresh module whose `_choose` returns the one forced);
    `candidates`, when given, in place of the file's own (a probe's)."""
    probe = load_kernel(path)
    if candidates:
        probe.CANDIDATES = candidates
    launch, forced = getattr(probe, name), {"i": 0, "configs": ()}

    def choose(key, configs, run, device):
        forced["configs"] = configs
        probe.CHOSEN[key] = configs[forced["i"]]
        return configs[forced["i"]]

    probe._choose = choose
    launch(*inputs)
    found = []
    for i, config in enumerate(forced["configs"]):
        probe.CHOSEN.clear()
        probe.DIRECT_LAUNCH.clear()
        forced["i"] = i
        try:
            found.append({"config": list(config), "us": graph_us(launch, sets)})
        except Exception as e:  # noqa: BLE001 - e.g. out of registers: that candidate's row
            found.append({"config": list(config), "us": float("inf"),
                          "error": f"{type(e).__name__}: {e}"[:200]})
    return found


def default_vs_best(row: dict, default: Callable, best: Callable, sets: list,
                    rounds: int) -> None:
    """"default/best": where the heuristic's pick is the best candidate's configuration, the
    same kernel (1.0, `default_is_best`); else the two timed afresh in `rounds` interleaved
    rounds, each the lowest of its rounds, as the compared columns are (one sample each had
    left the same configuration up to 3-4% from itself; the best candidate's own sample, the
    lowest of many, would favour it). The rounds go to `default_vs_best_rounds`."""
    row["default_is_best"] = row["default_config"] == [row["best_config"]]
    if row["default_is_best"]:
        row["default_over_best"] = 1.0
        return
    timed = {"default": (default, sets), "best": (best, sets)}
    try:
        fresh = {key: graph_us(fn, sets) for key, (fn, sets) in timed.items()}
    except Exception as e:  # noqa: BLE001 - the row keeps its other columns
        row["default_over_best_error"] = f"{type(e).__name__}: {e}"[:200]
        return
    interleaved(fresh, timed, rounds)
    row["default_vs_best_rounds"] = {key: fresh[f"{key}_rounds"] for key in timed}
    for key in timed:  # a later round's failure, kept beside the rounds timed before it
        if f"{key}_error" in fresh:
            row[f"default_vs_best_{key}_error"] = fresh[f"{key}_error"]
    row["default_over_best"] = fresh["default"] / fresh["best"]


def pinned(path: Path, name: str, inputs, config: list, candidates: tuple = ()) -> Callable:
    """The kernel of `path` loaded afresh, launching `config` in every bucket (a candidate
    timed again; of `candidates` when given, as `candidate_us`)."""
    probe = load_kernel(path)
    if candidates:
        probe.CANDIDATES = candidates
    launch = getattr(probe, name)

    def choose(key, configs, run, device):
        chosen = next(c for c in configs if list(c) == config)
        probe.CHOSEN[key] = chosen
        return chosen

    probe._choose = choose
    launch(*inputs)
    return launch


def cache_check(path: Path, name: str, inputs, row: dict) -> None:
    """A second load of the kernel file (a later process) finds the user's choice in the
    tuning cache on disk: its first call times nothing (row["cache_hit"])."""
    again = load_kernel(path)
    timed = []
    real_time = again._time
    again._time = lambda run, config, *how: timed.append(config) or real_time(run, config, *how)
    start = time.perf_counter()
    getattr(again, name)(*inputs)
    torch.cuda.synchronize()
    row["cached_first_call_s"] = round(time.perf_counter() - start, 3)
    row["cache_hit"] = not timed and list(again.CHOSEN.values()) == row["user_config_tuples"]


def print_variants(found: list, inputs: tuple, eager: Callable, cluster, dtype: torch.dtype,
                   l2_bytes: int, listing: bool, timing_only: tuple[str, ...] = ()) -> None:
    """A probe's report of one case: each (label, kernel file, launcher name) of `found`,
    with `listing` its kind and candidates (no GPU needed); else the same-size copy's time,
    then each file as the user gets it (its own per-shape choice) checked against `eager`
    (labels in `timing_only` are not: their values are not meant to be right), and every
    candidate configuration's time."""
    if listing:
        for label, path, _ in found:
            module = load_kernel(path)
            print(f"   {label}: kind {module.KIND}, candidates {list(module.CANDIDATES)}")
        return
    sets = rotating(inputs, l2_bytes)
    want = as_tuple(eager(*inputs))
    print(f"   copy {copy_us(cluster.traffic.fused_bytes, l2_bytes):.1f} µs")
    for label, path, name in found:
        user = getattr(load_kernel(path), name)
        ok, err = close(user(*inputs), want, dtype)  # tunes on CUDA
        verdict = "timing only" if label in timing_only else "ok" if ok else "WRONG"
        chosen = list(user.__globals__["CHOSEN"].values())
        print(f"   {label}: the user gets {graph_us(user, sets):.1f} µs at {chosen}"
              f" ({verdict}, max abs err {err:.3g})", flush=True)
        for c in candidate_us(path, name, inputs, sets):
            print(f"      {c['config']}: {c['us']:.1f} µs")


def run_probe(script: str, description: str, default_cases: str, files: Callable,
              timing_only: tuple[str, ...] = ()) -> int:
    """A probe's command line: `--cases` (panel case numbers or groups), `--list` (no GPU:
    each variant's kind and candidates); for each case `files(case, device, folder)` gives
    (variants, inputs, eager, cluster), reported by `print_variants`."""
    import argparse
    import sys
    import tempfile

    from panel_cases import CASES
    from shapes_panel import case_numbers

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cases", default=default_cases)
    parser.add_argument("--list", action="store_true", help="the configurations, no timing")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() and not args.list else "cpu"
    if device == "cpu" and not args.list:
        sys.exit(f"{script} times kernels on a CUDA GPU (--list runs without one)")
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size if device == "cuda" else 0
    with tempfile.TemporaryDirectory(prefix=Path(script).stem + "-") as work:
        for i, number in enumerate(case_numbers(args.cases)):
            case = CASES[number]
            found, inputs, eager, cluster = files(case, device, Path(work) / str(i))
            print(f"== {case.label} {str(case.dtype).removeprefix('torch.')}", flush=True)
            print_variants(found, inputs, eager, cluster, case.dtype, l2_bytes, args.list,
                           timing_only)
    return 0


def probe_case(found: list, analysis, cluster, model_inputs: tuple, device: str):
    """A probe's `files` result for its variants `found`: (found, the cluster's inputs drawn
    as the shapes panel draws them, the eager cluster, the cluster)."""
    from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster

    values = capture_values(analysis, *model_inputs)
    inputs = cluster_inputs(analysis, cluster, values, torch.Generator(device).manual_seed(1))
    return found, inputs, eager_cluster(analysis, cluster), cluster


def analysed_case(case, device: str, tiny: bool = False):
    """(analysis, its one cluster, the model inputs) of a panel case built on `device` (`tiny`:
    at its tiny shapes); exits naming why where the case is not one cluster."""
    from shapes_panel import build, fused_cluster

    from fusion_core.pipeline import analyze

    module, model_inputs = build(case, tiny, device, torch.Generator().manual_seed(0))
    analysis = analyze(module, *model_inputs)
    cluster, why = fused_cluster(analysis)
    if cluster is None:
        raise SystemExit(f"{case.label}: not one cluster ({why})")
    return analysis, cluster, model_inputs
