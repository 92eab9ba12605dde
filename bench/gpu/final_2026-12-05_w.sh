#!/usr/bin/env bash
# On the GPU machine, after setup: every GPU test on this call's tree, then the session's new paths.
set -uo pipefail
source /tmp/acc/env.sh
NAME=${1:-w}
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .gpu/models/*.whl 2>&1 | grep -v "already exists" || true
python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site . 2>&1 | grep -v "already exists" || true
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import tensorflow as tf; print('TensorFlow', tf.__version__, tf.version.GIT_VERSION)" 2>/dev/null
  date -u +%FT%TZ; git log --oneline -1 2>/dev/null || true; } > $OUT/test_gpu_$NAME.gpu.txt
export TFTRACE_GPU_RESULTS=$OUT/test_gpu_$NAME.jsonl
timeout ${2:-420} python3 -m pytest tests/test_gpu.py tests/test_gpu_users.py -n 4 -p no:cacheprovider -q --durations=5 \
  > $OUT/test_gpu_$NAME.pytest.txt 2>&1
echo "pytest exit $?" >> $OUT/test_gpu_$NAME.pytest.txt
date -u +%FT%TZ >> $OUT/test_gpu_$NAME.gpu.txt
tail -4 $OUT/test_gpu_$NAME.pytest.txt
