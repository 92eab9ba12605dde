"""A fetch cut into fed parts against one fetch, side by side (issue 29, item 2).

``python -m bench.parts_bench [--rounds N] [--batch B] [--device gpu]``: ResNet-50 (the bench's checkpoint) at
batch 8, ``tftrace capture`` as typed (its fetch cut into parts of ``--part-bytes``' default,
512 MiB, each later part fed what the earlier ones fetched, so the writers store part k while
TensorFlow computes part k + 1), the same in one fetch (``--part-bytes 0``), and the naive
fetch-all script, in rounds whose order rotates. Writes ``bench/results_parts.json``: each
round's seconds, the child's own timings, the process's peak and the parts, and the per-round
ratios, whose medians are the figures (the machine is shared; only ratios measured side by side
count).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from .capture_bench import PART_BYTES, measure_capture
from .procs import REPO, median
from .workspace import Workspace

CONTENDERS = ("capture_one_fetch", "capture", "naive")  # per_round reads them in this order


def per_round(raw: dict[str, list[dict[str, Any]]]) -> dict[str, list[float]]:
    """Each round's ratios: the parts against one fetch, and each capture against the naive script."""
    rounds = list(zip(*(raw[name] for name in CONTENDERS)))
    return {"parts_vs_one_fetch": [p["seconds"] / c["seconds"] for c, p, _ in rounds],
            "one_fetch_vs_naive": [c["seconds"] / n["seconds"] for c, _, n in rounds],
            "parts_vs_naive": [p["seconds"] / n["seconds"] for _, p, n in rounds]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--work", type=Path, default=REPO / "out" / "bench")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results_parts.json")
    parser.add_argument("--device", default=None, help="gpu to run every contender there (default: the CPU)")
    args = parser.parse_args(argv)
    ws = Workspace(args.work)
    model = ws.model("resnet50")
    started = time.time()
    load = [round(x, 2) for x in os.getloadavg()]
    figs = measure_capture(ws, model, args.batch, args.rounds, print, contenders=CONTENDERS, device=args.device)
    ratios = per_round(figs["raw"])
    doc = {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)), "machine": platform.node(),
           "load_average_start": load, "load_average_end": [round(x, 2) for x in os.getloadavg()],
           "model": model.name, "batch": args.batch, "device": args.device or "cpu", "part_bytes": PART_BYTES, "rounds": figs["rounds"],
           "ratios_per_round": ratios, "ratios": {k: median(v) for k, v in ratios.items()},
           "seconds": figs["seconds"], "raw": figs["raw"]}
    args.results.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"ratios": doc["ratios"], "seconds": doc["seconds"], "load": [load, doc["load_average_end"]]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
