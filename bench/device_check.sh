#!/usr/bin/env bash
# Every figure that matters on an accelerator host, in one report, within 8 minutes on one GPU:
#   bash bench/device_check.sh [--tiny] [--out REPORT]   (default report: device_check_report.txt)
# training examples/s at the paper's sizes, f32 vs bf16 and lstm_impl chunked vs scan
# (bench_train); the host feeding device-resident fc7 and streamed grids, the model's
# consumption and peak RSS (bench_pipeline); IoU-PQ on the device vs numpy, target >= 20x there,
# and its peak memory (bench_iou); extraction
# images/s (bench_extract); peak device memory (bench_train, bench_pipeline); ViLT fine-tuning
# steps/s at the small size and ViLT-B/32 384 px, f32 and bf16, with its share of the matmul
# peak (bench_vilt); ViLT-B's steps/s and memory per device at fsdp 1 / 2 / 4 / 8, those the
# host's devices allow (bench_fsdp), and the same of PaliGemma 3B's VQA fine-tuning step at 224 px
# (bf16, layers rematerialised) at fsdp 1 / 4 / 8. The PyTorch references run on the host's CPU. --tiny: every script but
# bench_vilt at its small size (the suite runs it on CPU, tests/test_bench.py; bench_vilt's
# torch + transformers start alone would outlast the suite's budget, and tests/test_vilt.py
# holds the model's parity). Each section of the report is the script's output, then
# "--- exit N after S s" (and the end of its stderr when N != 0); the exit status is the
# number of scripts that failed. Each script's first line and last line say whether the host was
# quiet (bench/record.py): on a shared host, read its ratios against the PyTorch side with that.
set -uo pipefail
cd "$(dirname "$0")/.."
TINY=0
OUT=device_check_report.txt
while [ $# -gt 0 ]; do
  case "$1" in
    --tiny) TINY=1 ;;
    --out) OUT=$2; shift ;;
    *) echo "usage: bash bench/device_check.sh [--tiny] [--out REPORT]" >&2; exit 2 ;;
  esac
  shift
done

if [ "$TINY" = 1 ]; then  # seconds per script, then its arguments
  TRAIN=(1500 --batch 32 --rounds 1 --steps 1 --batches 1 --vocab 200 --answers 20 --lstm-impls chunked,scan --config-arg runlocal)
  PIPELINE=(1500 --rows 3000 --grid-rows 300 --min-batches 4 --batch 64 --store-gb 0.03 --train-steps 1
            --grid-steps 1 --config-arg runlocal --buckets 1)
  IOU=(1500 --rounds 1 --scale 0.05)
  EXTRACT=(1500 --size 32 --batch 4 --images 12 --rounds 1)
  FSDP=(1500 --size tiny --batch 8 --fsdp 1,2 --cpu-devices 2 --steps 1)
else  # 465 s in all at most (a section that runs out is cut and reported), the report's first lines included under 8 minutes
  TRAIN=(120 --batch 500 --rounds 3 --steps 3 --lstm-impls chunked,scan)
  PIPELINE=(70 --store-gb 4)
  IOU=(30 --rounds 3)
  EXTRACT=(45 --batch 64 --images 512 --rounds 3)
  VILT=(100 --sizes small,base --batch-small 64 --batch-base 16 --steps 2 --rounds 2 --bf16)
  FSDP=(45 --size base --batch 32 --steps 3 --fsdp 1,2,4,8)
  PALIGEMMA=(55 --model paligemma --size paper --batch 16 --steps 3 --fsdp 1,4,8 --remat full --bf16)
fi

{
  echo "device check $(date -u +%FT%TZ) on $(hostname); git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
  "${PYTHON:-python}" -c "import jax; print('jax', jax.__version__, jax.devices())"
  # what the scripts import beyond jax: a host image without them fails every section at its import
  "${PYTHON:-python}" -c "import importlib.util as u; missing = [m for m in ('msgspec', 'ml_collections', 'torch',
    'transformers', 'tensorflow') if u.find_spec(m) is None]; print('missing Python packages: ' + ', '.join(missing)
    + \" (pip install -e '.[bench]')\" if missing else 'every package the scripts import is there')"
  echo "load: $(uptime)"
} > "$OUT" 2>&1

FAILED=0
section() {  # section SCRIPT SECONDS ARGS...
  local script=$1 seconds=$2 err start status
  shift 2
  err=$(mktemp)
  echo "=== $script $* ===" >> "$OUT"
  start=$(date +%s)
  timeout "$seconds" "${PYTHON:-python}" "bench/$script" "$@" >> "$OUT" 2> "$err"
  status=$?
  echo "--- exit $status after $(( $(date +%s) - start )) s" >> "$OUT"
  if [ "$status" != 0 ]; then
    tail -n 40 "$err" >> "$OUT"
    FAILED=$((FAILED + 1))
  fi
  rm -f "$err"
}
section bench_train.py "${TRAIN[@]}"
section bench_pipeline.py "${PIPELINE[@]}"
section bench_iou.py "${IOU[@]}"
section bench_extract.py "${EXTRACT[@]}"
[ "$TINY" = 1 ] || section bench_vilt.py "${VILT[@]}"
section bench_fsdp.py "${FSDP[@]}"
[ "$TINY" = 1 ] || section bench_fsdp.py "${PALIGEMMA[@]}"
echo "report: $OUT ($FAILED failed)"
exit "$FAILED"
