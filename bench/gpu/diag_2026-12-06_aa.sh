#!/usr/bin/env bash
# On the GPU machine, after setup: the sample detector's full diagnose matrix (bench.diagnose_bench),
# started in a process session of its own so it outlives this call (wait.sh collects it). Nothing
# else may run on the GPU meanwhile: its costs are timed.
set -uo pipefail
source /tmp/acc/env.sh
python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site . 2>&1 | grep -v "already exists" || true
rm -rf /tmp/dg /tmp/bw /tmp/dgrepo; mkdir -p /tmp/dg /tmp/dgrepo  # a copy of the tree: a later call re-sends it
tar --exclude=./.gpu --exclude=./.venv -cf - . | (cd /tmp/dgrepo && tar xf -)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import tensorflow as tf; print('TensorFlow', tf.__version__, tf.version.GIT_VERSION)" 2>/dev/null
  date -u +%FT%TZ; } > /tmp/dg/gpu.txt
R=/tmp/dgrepo
setsid nohup bash -c "source /tmp/acc/env.sh; cd $R; python3 -m bench.diagnose_bench --device gpu --work /tmp/bw \
  --out /tmp/dg --log /tmp/dg/progress.log > /tmp/dg/stdout.txt 2>&1; echo \"exit \$?\" >> /tmp/dg/stdout.txt; \
  date -u +%FT%TZ >> /tmp/dg/gpu.txt" > /dev/null 2>&1 < /dev/null &
sleep ${1:-5}
cat /tmp/dg/gpu.txt; tail -5 /tmp/dg/progress.log 2>/dev/null
