#!/usr/bin/env bash
# A/B of the joined kernel's departure count (split_rows._departure), one GPU call:
# HEAD (acquire), relaxed, and no departure with fresh zeroed counters each launch (the
# kernel before the kept counters). On an H100 on 2026-12-07 acquire and relaxed were within
# 1% on every case (RESULTS.md; the variant of 65a78a5's fallback this script also ran went
# with its stale patch). Each variant is a copy of the tree with its own tuning cache; the panel cases (AB_CASES) time every
# candidate. Results under $OUT/ab_<variant>.
set -u
OUT=${OUT:-/tmp/ab}
cases=${AB_CASES:-37,47,48}
root=$PWD
for variant in ${AB_VARIANTS:-acquire relaxed fresh}; do
  tree=/tmp/ab_tree_$variant
  rm -rf "$tree" && cp -r "$root" "$tree"
  f=$tree/fusion_core/codegen/split_rows.py
  case $variant in
    relaxed) sed -i 's/sem="acquire") + 1/sem="relaxed") + 1/' "$f" ;;
    fresh) sed -i 's/^        _departure(out)$/        pass/; s/"if wrap is None:",/"if False:",/' "$f" ;;
  esac
  (cd "$tree" && diff -r -q "$root/fusion_core" fusion_core | grep -v pycache)
  mkdir -p "$OUT/ab_$variant"
  (cd "$tree" && PYTHONPATH=$tree FUSION_ADVISOR_CACHE_DIR=/tmp/ab_cache_$variant \
     timeout "${AB_TIMEOUT:-120}" python benchmarks/shapes_panel.py --cases "$cases" \
     --out "$OUT/ab_$variant/panel.json" > "$OUT/ab_$variant/panel.log" 2>&1)
  echo "== $variant rc=$?"
  sed -n '/^| case/,$p' "$OUT/ab_$variant/panel.log"
done
