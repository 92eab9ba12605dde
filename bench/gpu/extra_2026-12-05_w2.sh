#!/usr/bin/env bash
# On the GPU machine: the session's new paths on the GPU (string outputs in diagnose's replays,
# TF Serving warmup requests as inputs).
set -uo pipefail
source /tmp/acc/env.sh
NAME=${1:-w}
W=/tmp/extra; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site . 2>&1 | grep -v "already exists" || true
python3 - <<'PY'
import subprocess, sys, os
sys.path.insert(0, "tests")
import test_diagnose as t
subprocess.run([sys.executable, "-c", t.CLASSIFIER, "/tmp/extra/classifier", "/tmp/extra/examples.npy"], check=True,
               env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})
PY
L=$OUT/extra_$NAME.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ; } > $L
python3 -m tracer.cli diagnose $W/classifier --inputs $W/examples.npy --device gpu --only repeat,batch,device \
  --out $W/d >> $L 2>&1; echo "exit $?" >> $L
cp $W/d/diagnosis.json $OUT/extra_${NAME}_diagnosis.json 2>/dev/null
date -u +%FT%TZ >> $L
tail -30 $L
