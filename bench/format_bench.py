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
for a before/after measured on the same machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .workspace import Workspace

REPO = Path(__file__).resolve().parents[1]
FORMATS = ("packed", "npy")


def captures(ws: Workspace, batch: int) -> dict[str, dict[str, Path]]:
    """A and B captured in each format (once; reused while their directory exists)."""
    model = ws.model("resnet50")
    inputs = ws.inputs(model, batch)
    found: dict[str, dict[str, Path]] = {}
    for fmt in FORMATS:
        found[fmt] = {}
        for side, path, onednn in (("a", model.ckpt, "off"), ("b", model.savedmodel, "on")):
            out = ws.runs_dir / "format" / f"{side}_{fmt}_b{batch}"
            if not (out / "manifest.json").exists():
                subprocess.run([str(REPO / ".venv" / "bin" / "tftrace"), "capture", str(path), "--inputs", str(inputs),
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tftrace", default=str(REPO / ".venv" / "bin" / "tftrace"), help="the tftrace command to time")
    parser.add_argument("--cwd", help="run it there (python -m tracer.cli in another checkout imports that one)")
    args = parser.parse_args(argv)
    ws = Workspace(REPO / "out" / "bench")
    caps = captures(ws, args.batch)
    times: dict[str, list[float]] = {fmt: [] for fmt in FORMATS}
    for _ in range(args.rounds):
        for fmt in FORMATS:
            times[fmt].append(timed_compare(args.tftrace.split(), args.cwd, caps[fmt]["a"], caps[fmt]["b"],
                                            ws.runs_dir / "format" / f"report_{fmt}"))
    medians = {fmt: statistics.median(t) for fmt, t in times.items()}
    json.dump({"tftrace": args.tftrace, "batch": args.batch, "rounds": args.rounds, "seconds": times,
               "median_s": medians, "packed_over_npy": medians["packed"] / medians["npy"]}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
