#!/usr/bin/env bash
# The GPU runs recorded in benchmarks/RESULTS.md, in one call of the device tool:
#   bash benchmarks/h200_session.sh            (from the repository root; results under $OUT)
# 1. every cluster of the panel cases against eager, Inductor and the same-size copy;
# 2. the CLI's Measured section for ExampleNet at 16384x1024 (compare with step 1);
# 3. the GPU-only tests, and the GPT-2 plugin check (its model runs on the GPU through export).
set -u
export PYTHONPATH=.
OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"
timeout "${CLUSTERS_TIMEOUT:-360}" python benchmarks/gpu_clusters.py --out "$OUT/gpu_clusters.json" \
    > "$OUT/gpu_clusters.log" 2>&1
echo "gpu_clusters rc=$?"
sed -n '/^| case/,$p' "$OUT/gpu_clusters.log"
timeout 120 python -m fusion_core.cli --model examples/example_net.py --input-shape 16384,1024 \
    --out-dir "$OUT/gen" --vs-inductor > "$OUT/cli_example_net.txt" 2>&1
echo "cli rc=$?"
sed -n '/^Measured/,$p' "$OUT/cli_example_net.txt"
timeout 90 python -m pytest -q -p no:cacheprovider -m gpu tests/ 2>&1 | tail -2
timeout 90 python -m pytest -q -p no:cacheprovider examples/test_transformers_fusion.py \
    --fusion-report 2>&1 | grep -v "moved from" | tail -6
