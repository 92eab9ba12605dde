#!/usr/bin/env bash
# A/B on the GPU host: the capture with 2 writer threads (base) against writer_threads() (new),
# ResNet-50 batch 8, interleaved rounds, each a fresh `tftrace capture --device gpu`.
source /tmp/acc/env.sh
cd "$(dirname "$0")/../.."
ROOT=$PWD
md5sum tracer/captures/_jobs.py
nproc
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r tracer sample_models bench /tmp/base/
sed -i 's/    return max(2, min(MAX_WRITER_THREADS, cores \/\/ 2))/    return 2/' /tmp/base/tracer/captures/_jobs.py
grep -n "    return 2$" /tmp/base/tracer/captures/_jobs.py
python3 - <<'PY'
from pathlib import Path
from bench.workspace import Workspace
ws = Workspace(Path("/tmp/gbw")); m = ws.model("resnet50"); print(m.ckpt, ws.inputs(m, 8))
PY
CK=/tmp/gbw/models/resnet50/ckpt; X=/tmp/gbw/inputs/resnet50_b8.npy
run() {  # $1 label, $2 tree
  local t0=$(date +%s.%N)
  (cd $2 && PYTHONPATH=$2:/tmp/site python3 -m tracer.cli capture $CK --inputs $X --out /tmp/ab_$1 --force --device gpu > /tmp/ab_$1.log 2>&1) || tail -5 /tmp/ab_$1.log
  local t1=$(date +%s.%N)
  python3 -c "import json,sys;t=json.load(open('/tmp/ab_$1/manifest.json'))['timings'];print('$1', round($t1-$t0,2), {k:t.get(k) for k in ('import_s','load_s','instrumented_s','sync_s','total_s')}, sum(f.stat().st_size for f in __import__('pathlib').Path('/tmp/ab_$1').rglob('*') if f.is_file()))" | tee -a $OUT/ab.txt
}
run warm $ROOT > /dev/null
for r in 1 2 3 4; do
  if [ $((r % 2)) = 1 ]; then run base /tmp/base; run new $ROOT; else run new $ROOT; run base /tmp/base; fi
done
