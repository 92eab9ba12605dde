"""Issue 29, item 3: ``tftrace compare`` over capture format 2 (packed) against format 1 (``npy``).

The same ResNet-50 batch-8 run (checkpoint with oneDNN off as A, SavedModel with oneDNN on as B)
is captured both ways, then each pair of capture directories is compared end to end, as a user
types it (``tftrace compare capA capB --isolate 0``), the two formats interleaved round by round.
Directories given on the command line are received captures: their digests are checked against
what they name before they decide anything, so format 2 decodes every packed tensor and reads the
weights it kept only by digest back from the two checkpoints.

``python -m bench.format_bench [--rounds N] [--tftrace CMD]`` prints one JSON object: each
format's times, their medians and the ratio packed / npy. ``--tftrace`` and ``--cwd`` run another
build (``--tftrace ".venv/bin/python -m tracer.cli" --cwd OTHER_CHECKOUT``) on the same captures,
for a before/after measured on the same machine. ``make bench`` runs :func:`measure_formats` and
puts its ratio in the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .procs import dir_bytes
from .workspace import Workspace

REPO = Path(__file__).resolve().parents[1]
TFTRACE = REPO / ".venv" / "bin" / "tftrace"
FORMATS = ("packed", "npy")


def captures(ws: Workspace, batch: int, fresh: bool = False) -> dict[str, dict[str, Path]]:
    """A and B captured in each format: once, reused while their directory exists (a before/after
    of two builds reads the same captures), or captured again by this build (``fresh``)."""
    model = ws.model("resnet50")
    inputs = ws.inputs(model, batch)
    found: dict[str, dict[str, Path]] = {}
    for fmt in FORMATS:
        found[fmt] = {}
        for side, path, onednn in (("a", model.ckpt, "off"), ("b", model.savedmodel, "on")):
            out = ws.runs_dir / "format" / f"{side}_{fmt}_b{batch}"
            if fresh or not (out / "manifest.json").exists():
                subprocess.run([str(TFTRACE), "capture", str(path), "--inputs", str(inputs),
                                "--out", str(out), "--force", "--tensor-format", fmt, "--onednn", onednn],
                               check=True, capture_output=True)
            found[fmt][side] = out
    return found


def timed_compare(tftrace: list[str], cwd: str | None, a: Path, b: Path, out: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([*tftrace, "compare", str(a), str(b), "--out", str(out), "--force", "--isolate", "0"],
                          check=False, capture_output=True, text=True, cwd=cwd)
    if done.returncode not in (0, 1):
        raise SystemExit(f"tftrace compare failed: {done.stderr.strip()[-500:]}")
    return time.perf_counter() - started


def measure_formats(ws: Workspace, batch: int, rounds: int, tftrace: str = str(TFTRACE), cwd: str | None = None,
                    fresh: bool = False) -> dict[str, Any]:
    """Each format's end-to-end compare times (rounds interleaved), their medians and the ratio
    format 2 / format 1: the figure of issue 29, item 3 (``make bench`` runs it)."""
    caps = captures(ws, batch, fresh)
    times: dict[str, list[float]] = {fmt: [] for fmt in FORMATS}
    for _ in range(rounds):
        for fmt in FORMATS:
            times[fmt].append(timed_compare(tftrace.split(), cwd, caps[fmt]["a"], caps[fmt]["b"],
                                            ws.runs_dir / "format" / f"report_{fmt}"))
    medians = {fmt: statistics.median(t) for fmt, t in times.items()}
    return {"model": "resnet50", "batch": batch, "rounds": rounds, "tftrace": tftrace, "seconds": times,
            "median_s": medians, "packed_over_npy": medians["packed"] / medians["npy"],
            "disk_bytes": {fmt: sum(dir_bytes(caps[fmt][side])["allocated"] for side in ("a", "b")) for fmt in FORMATS}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tftrace", default=str(TFTRACE), help="the tftrace command to time")
    parser.add_argument("--cwd", help="run it there (python -m tracer.cli in another checkout imports that one)")
    args = parser.parse_args(argv)
    figure = measure_formats(Workspace(REPO / "out" / "bench"), args.batch, args.rounds, args.tftrace, args.cwd)
    json.dump(figure, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
