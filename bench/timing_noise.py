"""``python -m bench.timing_noise MODEL [--inputs FILE] [--device gpu] [--pairs 8] [--b-determinism]``

How often the cost rule of :mod:`tracer.diagnosis.timing` claims a cost where there is none, on
this machine: one side timed against itself, as ``diagnose`` times a cost, in ``--pairs`` pairs of
fresh processes, one pair after another. Each pair is judged alone (what a single pair would
claim) and each two consecutive pairs together (what diagnose claims since it times every cost
in two pairs). With ``--b-determinism`` side B is the same side with op determinism on, a
setting that truly costs on a GPU: then the question is the other one, whether the rule still
sees a real cost.

Writes one JSON line per pair and a summary to ``--out`` (default stdout); the samples are kept
so the figures can be recomputed. Nothing here is a unit test: it needs the machine to itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracer.artifacts.loader import ArtifactRef
from tracer.captures.launcher import capture
from tracer.diagnosis.costs import measure_costs
from tracer.diagnosis.plan import Run
from tracer.diagnosis.timing import PAIRS, compare_pairs, compare_timings
from tracer.runspec import InputSpec, Knobs, Side

__all__ = ["main"]


def _pairs(side_a: Side, side_b: Side, pairs: int, runs: int, work: Path) -> list[tuple[list[float], list[float]]]:
    """Every pair's samples, timed by diagnose's own :func:`tracer.diagnosis.costs.measure_costs`
    (a fresh pool of processes per pair), told to time every pair rather than stop at a first
    pair that shows no cost."""
    cap = capture(side_a, work / "cap_a", force=True)
    cap_b = cap if side_b == side_a else capture(side_b, work / "cap_b", force=True)
    job = ((Run(side_a, "a"), cap), (Run(side_b, "b", instance=1), cap_b), False)
    [judged] = measure_costs([job], work / "timing", runs, pairs=pairs, every_pair=True)
    if "error" in judged:
        raise SystemExit(f"timing failed: {judged['error']}")
    return [(pair["a_ms"], pair["b_ms"]) for pair in judged["pairs"]]


def summarise(samples: list[tuple[list[float], list[float]]]) -> dict[str, Any]:
    """Each pair judged alone, and each two consecutive pairs judged by the rule diagnose uses."""
    alone = [compare_timings(a, b) for a, b in samples]
    grouped = [compare_pairs(samples[i:i + PAIRS]) for i in range(0, len(samples) - PAIRS + 1, PAIRS)]
    return {
        "pairs": len(samples),
        "ratios": [round(c.ratio, 4) for c in alone],
        "significant_alone": sum(c.significant for c in alone),
        "rule_groups": len(grouped),
        "significant_by_rule": sum(c.significant for c in grouped),
        "rule_words": [c.words() for c in grouped],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.timing_noise", description=__doc__.split("\n\n")[1])
    parser.add_argument("model")
    parser.add_argument("--inputs", help="a .npz of the signature inputs (default: generated, seed 0)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--b-determinism", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    side_a = Side(artifact=ArtifactRef(args.model), device=args.device, batch_size=args.batch_size,
                  inputs=InputSpec(inputs_file=args.inputs, seed=0, examples=args.batch_size), timing_runs=5)
    side_b = replace(side_a, knobs=Knobs(determinism=True)) if args.b_determinism else side_a
    began = time.time()
    with tempfile.TemporaryDirectory(prefix="tftrace-noise-") as tmp:
        samples = _pairs(side_a, side_b, args.pairs, args.runs, Path(tmp))
    lines = [json.dumps({"pair": i, "a_ms": a, "b_ms": b}) for i, (a, b) in enumerate(samples)]
    summary = {"model": args.model, "device": args.device, "batch_size": args.batch_size, "runs": args.runs,
               "b": "op determinism on" if args.b_determinism else "the same side", "seconds": round(time.time() - began, 1),
               **summarise(samples)}
    text = "\n".join(lines + [json.dumps({"summary": summary})]) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    sys.stdout.write(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
