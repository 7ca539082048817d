#!/usr/bin/env bash
# The GPU runs recorded in benchmarks/RESULTS.md, from the repository root on a CUDA machine;
# results and logs under $OUT. One step or several per device call:
#   bash benchmarks/h200_session.sh suite            the whole test suite with CUDA
#   bash benchmarks/h200_session.sh clusters zoo     the cluster panel, the CLI check, the zoo
# Steps:
#   suite     python -m pytest -v (every test, kernels compiled for the GPU instead of the
#             interpreter; `cpu`-marked tests skip): the `timing` tests after the rest, one at
#             a time; SUITE_ARGS narrows both passes; a 10-minute call does not hold the whole
#             suite: SUITE_PASS=rest with SUITE_PART=1, 2 and 3, then SUITE_PASS=timing, one
#             call each; each test's seconds go to $OUT/durations.log as it ends
#   clusters  every cluster of the panel cases against eager, Inductor and the same-size copy,
#             then the CLI's Measured section for ExampleNet at 16384x1024 (compare the two)
#   zoo       benchmarks/model_zoo.py in five processes: torchvision/timm/transformers models, kernels verified
#             natively (numerics only, untimed) and how many --apply would edit; ZOO_MODEL_TIMEOUT s
#             per model (120), ZOO_TIMEOUT s per process (300) with models left after
#             ZOO_TIMEOUT - 30 s listed as not run; each part's table has a 4-line header
#   panel     benchmarks/shapes_panel.py: wide rows, odd sizes, strided reductions; PANEL_CASES
#             takes case numbers or groups (issue28, widths, norms: --list prints them)
#   e2e       benchmarks/end_to_end.py: GPT-2 and a LLaMA-style model, eager / our kernels
#             applied (also as one CUDA graph) / torch.compile, wall and device time
#   launch    benchmarks/launcher_overhead.py: host time per warm launch, ours against Triton's
#             paths, torch's C++ launcher, Inductor and one eager op (LAUNCH_CASES)
#   applied   benchmarks/applied_source.py: the examples' own files rewritten by --apply
#             (gpt12, llama_block), eager / applied / torch.compile of each, wall and device time
#   ncu       Nsight Compute on the kernel each panel case gets by default (ncu_rows.py), a
#             process a case (each at most NCU_CASE_TIMEOUT s, 90) within NCU_BUDGET s (480),
#             then tools/ncu_table.py's table; NCU_CASES takes numbers or groups as
#             PANEL_CASES does (issue28)
#   tiles     benchmarks/tile_order_probe.py: a tiled kernel's tile shapes in the generated
#             program order and column blocks first, against Inductor (TILES_CASES: 20,21)
set -u
export PYTHONPATH=$PWD  # absolute: pytester runs subprocesses in other folders
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"
[ $# -gt 0 ] || set -- suite clusters
for step in "$@"; do
  case $step in
    suite)
      # Two passes: the tests that measure speed (marker `timing`) need the GPU to themselves,
      # so the rest runs first in parallel, then those one at a time. -v names each failure as
      # it happens, and tools/failures_now.py writes its traceback to $OUT/failures.log at
      # once, so a run cut off by the timeout still says what failed and why.
      # SUITE_PASS=rest or timing runs one pass (the whole suite does not fit one 10-minute
      # call). SUITE_PASS=rest with no SUITE_PART runs every part at once: on an H100 on
      # 2026-12-06 parts 2 and 3 took 2166 + 1143 s of worker time (250 + 165 s apart) and
      # part 1 about 3000, so all three at JOBS=16 should take ~450 s (not yet tried).
      export PYTHONPATH=$PYTHONPATH:$PWD/tools FAILURES_LOG=$OUT/failures.log \
        DURATIONS_LOG=$OUT/durations.log
      # One compile thread per pytest worker: 15 workers each forking a pool of 16 compile
      # processes is 240 processes on 16 cores (a part-2 call on 2026-12-05 lost its machine).
      export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-1}
      # SUITE_PART=1, 2 or 3 splits the non-timing pass in parts that each fit a call at
      # JOBS=15: 1 the plugin's pytester runs (tests/test_fusion_*.py), 3 the page tests, the
      # GPU model checks and examples/ (1 and 3 together ran past 540 s on an H100 on
      # 2026-12-05), 2 the rest of tests/ (523 s). SUITE_ARGS, when set, wins.
      plugin_runs="$(ls tests/test_fusion_*.py)"
      pages_and_models="$(ls tests/test_html*.py tests/test_plugin*.py) \
        tests/test_device_placement.py tests/test_validate_scaling.py tests/test_modeltime.py \
        tests/test_apply_compile_gpu.py tests/test_direct_launch_gpu.py tests/test_compiled_record.py"
      case ${SUITE_PART:-} in
        1) SUITE_ARGS=${SUITE_ARGS:-$plugin_runs} ;;
        2) SUITE_ARGS=${SUITE_ARGS:-$(ls tests/test_*.py | grep -v -F -x -f <(
             tr ' ' '\n' <<< "$plugin_runs $pages_and_models" | grep .))} ;;
        3) SUITE_ARGS=${SUITE_ARGS:-"$pages_and_models examples/"} ;;
      esac
      common=(-v -p no:cacheprovider -p no:benchmark -p failures_now --durations=25)
      if [ "${SUITE_PASS:-both}" != timing ]; then
        # shellcheck disable=SC2086
        timeout "${SUITE_TIMEOUT:-420}" python -m pytest "${common[@]}" -n "${JOBS:-12}" \
            -m "not timing" ${SUITE_ARGS:-} > "$OUT/suite.log" 2>&1
        echo "suite (not timing) rc=$?"
        grep -E " (FAILED|ERROR) |^(FAILED|ERROR) " "$OUT/suite.log" | head -40
        tail -1 "$OUT/suite.log"
      fi
      if [ "${SUITE_PASS:-both}" != rest ]; then
        # shellcheck disable=SC2086
        timeout "${TIMING_TIMEOUT:-300}" python -m pytest "${common[@]}" -m timing \
            ${SUITE_ARGS:-} > "$OUT/suite_timing.log" 2>&1
        echo "suite (timing, one at a time) rc=$?"
        grep -E " (FAILED|ERROR) |^(FAILED|ERROR) " "$OUT/suite_timing.log" | head -40
        tail -1 "$OUT/suite_timing.log"
      fi
      ;;
    clusters)
      timeout "${CLUSTERS_TIMEOUT:-330}" python benchmarks/gpu_clusters.py \
          --cases "${CASES:-all}" --out "$OUT/gpu_clusters.json" > "$OUT/gpu_clusters.log" 2>&1
      echo "gpu_clusters rc=$?"
      sed -n '/^| case/,$p' "$OUT/gpu_clusters.log"
      timeout 120 python -m fusion_core.cli --model examples/example_net.py \
          --input-shape 16384,1024 --out-dir "$OUT/gen" --vs-inductor \
          > "$OUT/cli_example_net.txt" 2>&1
      echo "cli rc=$?"
      sed -n '/^Measured/,$p' "$OUT/cli_example_net.txt"
      ;;
    zoo)
      # Five processes at once (nothing in the zoo is timed; 16 cores compile for one GPU),
      # each writing its own table; the rows are then put together in this order.
      groups=("resnet18|efficientnet_b0" "mobilenet_v3_small|convnext_tiny|shufflenet_v2_x0_5"
              "vit (small config)|swin (small config)|mobilenetv3_small_100|convnext_atto"
              "vit_tiny_patch16|levit_128s|gpt2|llama"
              "mistral|qwen2|gemma3 (text)|phi3|bert|roberta|distilbert")
      parts=$(mktemp -d)  # $OUT takes back few files: one table and one log come back
      for i in "${!groups[@]}"; do
        IFS='|' read -r -a names <<< "${groups[$i]}"
        # The per-model limit and the budget keep every row; the timeout is the last resort.
        timeout "${ZOO_TIMEOUT:-300}" python benchmarks/model_zoo.py --out "$parts/$i.md" \
            --model-timeout "${ZOO_MODEL_TIMEOUT:-120}" --budget $((${ZOO_TIMEOUT:-300} - 30)) \
            --only "${names[@]}" > "$parts/$i.log" 2>&1 &
      done
      wait
      { head -n 4 "$parts/0.md"; for i in "${!groups[@]}"; do tail -n +5 "$parts/$i.md"; done
      } > "$OUT/zoo.md"
      tail -n 200 "$parts"/*.log > "$OUT/zoo.log"
      cat "$OUT/zoo.md"
      ;;
    panel)
      # Liger-Kernel travels as a wheel in .whl/ (git-ignored: name it in the call's carry).
      if compgen -G ".whl/*.whl" > /dev/null; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/liger-site .whl/*.whl \
          && export PYTHONPATH=$PYTHONPATH:/tmp/liger-site
      fi
      # --budget skips the cases left when it runs out (said in the table), the timeout kills.
      timeout "${PANEL_TIMEOUT:-330}" python benchmarks/shapes_panel.py \
          --cases "${PANEL_CASES:-all}" --budget "${PANEL_BUDGET:-290}" \
          --out "$OUT/shapes_panel.json" > "$OUT/shapes_panel.log" 2>&1
      echo "shapes_panel rc=$?"
      sed -n '/^| case/,$p' "$OUT/shapes_panel.log"
      ;;
    e2e)
      timeout "${E2E_TIMEOUT:-420}" python benchmarks/end_to_end.py ${E2E_ARGS:-} \
          --out "$OUT/end_to_end.json" > "$OUT/end_to_end.log" 2>&1
      echo "end_to_end rc=$?"
      sed -n '/^| model/,$p' "$OUT/end_to_end.log" | tail -45
      ;;
    launch)
      timeout "${LAUNCH_TIMEOUT:-150}" python benchmarks/launcher_overhead.py --calls 300 \
          --repeat 3 --cases "${LAUNCH_CASES:-ExampleNet,microgpt}" > "$OUT/launcher_overhead.log" 2>&1
      echo "launcher_overhead rc=$?"
      sed -n '/^CUDA/,$p' "$OUT/launcher_overhead.log"
      ;;
    applied)
      timeout "${APPLIED_TIMEOUT:-300}" python benchmarks/applied_source.py \
          --out "$OUT/applied_source.json" > "$OUT/applied_source.log" 2>&1
      echo "applied_source rc=$?"
      sed -n '/^| model/,$p' "$OUT/applied_source.log"
      ;;
    ncu)
      # One ncu process a case: ncu prints its reports when the process ends, so a case cut
      # off loses only itself. A case starts only while its own limit (NCU_CASE_TIMEOUT, 90 s;
      # one takes about 20) still fits in NCU_BUDGET. FUSION_ADVISOR_AUTOTUNE=0: the default
      # configuration, no tuning candidate's launches.
      case_limit=${NCU_CASE_TIMEOUT:-90}
      deadline=$((SECONDS + ${NCU_BUDGET:-480}))
      numbers=$(python -c "import sys; sys.path[:0] = ['benchmarks']
from shapes_panel import case_numbers; print(*case_numbers('${NCU_CASES:-issue28}'))")
      : > "$OUT/ncu.txt"
      for n in $numbers; do
        if [ $((SECONDS + case_limit)) -gt $deadline ]; then
          echo "ncu: NCU_BUDGET spent; not run: case $n and those after it"; break
        fi
        FUSION_ADVISOR_AUTOTUNE=0 timeout "$case_limit" ncu --clock-control none \
            --kernel-name regex:cluster --section SpeedOfLight --section Occupancy \
            --section WarpStateStats --section LaunchStats \
            python benchmarks/ncu_rows.py --cases "$n" >> "$OUT/ncu.txt" 2>&1
        rc=$?
        [ $rc -eq 0 ] || echo "ncu: case $n rc=$rc (124: past NCU_CASE_TIMEOUT)"
      done
      python tools/ncu_table.py "$OUT/ncu.txt" | tee "$OUT/ncu_table.md"
      ;;
    tiles)
      timeout "${TILES_TIMEOUT:-150}" python benchmarks/tile_order_probe.py \
          --cases "${TILES_CASES:-20,21}" > "$OUT/tile_order_probe.log" 2>&1
      echo "tile_order_probe rc=$?"
      sed -n '/^| case/,$p' "$OUT/tile_order_probe.log"
      ;;
    *) echo "unknown step $step (suite, clusters, zoo, panel, e2e, launch, applied, ncu, tiles)"
       exit 2 ;;
  esac
done
