#!/usr/bin/env bash
# On the GPU machine: wait up to $1 s for diag.sh's diagnose, then bring back what it wrote.
set -uo pipefail
N=${2:-dg}
for _ in $(seq 1 ${1:-500}); do grep -q "^exit" /tmp/dg/stdout.txt 2>/dev/null && break; sleep 1; done
cp /tmp/dg/gpu.txt $OUT/diag_$N.gpu.txt; cp /tmp/dg/progress.log $OUT/diag_$N.log 2>/dev/null
cp /tmp/dg/stdout.txt $OUT/diag_$N.stdout.txt 2>/dev/null; cp /tmp/dg/results_diagnose.json $OUT/diag_$N.results.json 2>/dev/null
d=$(find /tmp/bw -name diagnosis.json | head -1); [ -n "$d" ] && gzip -c "$d" > $OUT/diag_$N.json.gz
tail -3 /tmp/dg/progress.log 2>/dev/null; cat /tmp/dg/stdout.txt 2>/dev/null | tail -5
