#!/usr/bin/env bash
# On the GPU machine, alone: one side against itself in $2 pairs of fresh processes, every second
# pair with the sides in each other's places (measure_costs since af7690c).
set -uo pipefail
source /tmp/acc/env.sh
NAME=${1:-ac}
python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site . 2>&1 | grep -v "already exists" || true
M=/tmp/noise_mb; [ -d $M/savedmodel ] || CUDA_VISIBLE_DEVICES=-1 TF_ENABLE_ONEDNN_OPTS=0 python3 tests/fixtures/mobilenet_tf1.py $M > /dev/null 2>&1
L=$OUT/noise_$NAME.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ; } > $L
timeout ${3:-200} python3 -m bench.timing_noise $M/savedmodel --inputs $M/images_b8.npz --device gpu --pairs ${2:-4} \
  --out $OUT/noise_${NAME}_aa.jsonl >> $L 2>&1; echo "exit $?" >> $L
date -u +%FT%TZ >> $L
grep -A30 '"ratios"' $L
