#!/usr/bin/env bash
# On the GPU machine, after setup: the TF1 cond-v2 batch norm (tests/test_lowered_control_flow.py) on the GPU.
set -uo pipefail
source /tmp/acc/env.sh
W=/tmp/lowered; rm -rf $W; mkdir -p $W
python3 - <<'PY'
import subprocess, sys, numpy as np, os
sys.path.insert(0, "tests")
import test_lowered_control_flow as t
subprocess.run([sys.executable, "-c", t._TRAINING, "/tmp/lowered"], check=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})
rng = np.random.default_rng(3)
images = rng.standard_normal((8, 6, 6, 2)).astype(np.float32)
np.savez("/tmp/lowered/training.npz", x=images, is_training=np.array(True))
np.savez("/tmp/lowered/serving.npz", x=images, is_training=np.array(False))
PY
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ; } > $OUT/lowered.txt
python3 -m tracer.cli compare $W/ckpt $W/ckpt --input-names x,is_training --outputs probs --inputs $W/training.npz \
  --a-batch-size 1 --b-batch-size 8 --device gpu --out $W/r1 >> $OUT/lowered.txt 2>&1; echo "exit $?" >> $OUT/lowered.txt
python3 -m tracer.cli compare $W/ckpt $W/export --inputs $W/serving.npz --device gpu --out $W/r2 >> $OUT/lowered.txt 2>&1; echo "exit $?" >> $OUT/lowered.txt
python3 -m tracer.cli compare $W/ckpt $W/ckpt --input-names x,is_training --outputs probs --inputs $W/serving.npz \
  --a-batch-size 1 --b-batch-size 8 --device gpu --out $W/r3 >> $OUT/lowered.txt 2>&1; echo "exit $?" >> $OUT/lowered.txt
for r in r1 r2 r3; do cp $W/$r/report.json $OUT/lowered_$r.json 2>/dev/null; done
tail -60 $OUT/lowered.txt
