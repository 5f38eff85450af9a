#!/usr/bin/env bash
# Re-records every bench/records/*.json at its shipped size, one script after another, on a quiet
# machine (the site's performance page shows these records):
#   bash bench/record_all.sh [NAME ...]   (default: every one; needs the bench extra, torch and transformers)
# 16-23 minutes on a quiet 2-core machine (each record keeps its own "seconds"). A script that
# finds the machine busy refuses its record (`bench/record.py`: exit 2, the old record kept);
# the others still run. Prints each script's time; the exit status is the number that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
declare -A ARGS=(  # the shipped sizes
  [bench_score]="--questions 200000 --rounds 3"
  [bench_iou]="--rounds 3"
  [bench_matmul]="--rounds 3"
  [bench_train]="--rounds 5 --steps 3"  # length 26 moves 65-77% between rounds: the median of 5
  [bench_extract]="--rounds 3"
  [bench_vilt]="--sizes small,base --rounds 3"
  [bench_clipseg]="--sizes small,base --rounds 3"
  [bench_paligemma]="--sizes gemma,gemma2 --rounds 3"
  [bench_pixels]="--images 128 --rounds 3"
  [bench_pipeline]="--store-gb 0.5 --buckets 1"  # the paper's model: the ">= 10x" is against it
  [bench_scale]="--fractions 0.125"
  [bench_trained]="--scale 0.01 --rounds 1"
)
ORDER=(bench_score bench_iou bench_matmul bench_train bench_extract bench_vilt bench_clipseg bench_paligemma bench_pixels bench_pipeline bench_scale bench_trained)
[ $# -gt 0 ] && ORDER=("$@")
FAILED=0
BEGAN=$(date +%s)
for name in "${ORDER[@]}"; do
  if [ -z "${ARGS[$name]+set}" ]; then
    echo "bench/record_all.sh: error: no benchmark $name (one of: ${!ARGS[*]})" >&2
    exit 2
  fi
  echo "=== $name ${ARGS[$name]}"
  start=$(date +%s)
  # shellcheck disable=SC2086  # the arguments split into words
  "${PYTHON:-python}" "bench/$name.py" ${ARGS[$name]} --json "bench/records/$name.json"
  status=$?
  echo "--- $name: exit $status after $(( $(date +%s) - start )) s"
  [ "$status" = 0 ] || FAILED=$((FAILED + 1))
done
echo "all in $(( $(date +%s) - BEGAN )) s; $FAILED failed"
exit "$FAILED"
