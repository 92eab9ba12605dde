"""``python -m bench.rss_probe A B OUT``: one ``tftrace compare`` of two captures, with its memory.

Runs in its own process so that its high-water mark is the compare's alone. Everything the
compare imports is imported first and the mark read (the baseline: the interpreter, numpy,
networkx, jinja2...); then the compare runs (isolation off: replays are child processes
with their own memory) and the mark is read again. Prints one JSON line; sizes in MB (10^6).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def high_water_mb() -> float:
    """``VmHWM`` of this process: the peak resident set so far (file-backed mapped pages included)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError("no VmHWM in /proc/self/status (not Linux?)")


def main(argv: Sequence[str] | None = None) -> int:
    a, b, out = list(sys.argv[1:] if argv is None else argv)
    # everything the compare imports comes first, so the baseline is read after it
    import tracer.report.render  # noqa: F401
    from tracer.comparison.pipeline import comparing
    from tracer.report.build import report_comparison

    baseline = high_water_mb()
    t0 = time.perf_counter()
    with comparing(a, b, out, isolate=0, force=True) as result:
        report_comparison(result)
    seconds = time.perf_counter() - t0
    print(json.dumps({"baseline_mb": baseline, "peak_mb": high_water_mb(), "compare_s": seconds,
                      "verdict": result.verdict}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
