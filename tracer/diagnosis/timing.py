"""The one statistical rule of every latency comparison ``tftrace diagnose`` makes.

A cost is a claim that B is slower (or faster) than A, and two medians alone cannot carry it:
on a ~1 ms model two captures of the *same* side differed by 9.4% in median latency, and a
cost of 17.4% was claimed from one median against another (issue 23.5). So every cost is
measured and judged the same way:

* **Repeated, interleaved timings of both sides.** A and B each run in a process of their own,
  loaded and warmed up, and are timed one ``session.run`` at a time in the order A B B A A B …
  (:mod:`tracer.diagnosis.interleave`): whatever drifts meanwhile — another job on the cores,
  the clock, the GPU's temperature — hits both sides alike, and one side never runs while the
  other does.
* **The statistic: the ratio of the medians**, ``median(B) / median(A)`` (per example where the
  sides run different batch sizes). Medians, because a single preempted run must not move it.
* **The confidence: a 95% moving-block bootstrap interval** of that ratio. The i-th timings of A
  and B ran next to each other, so they are resampled together, in blocks of ``√n`` consecutive
  pairs, ``RESAMPLES`` times; the ratio of medians of each resample; the 2.5th and 97.5th
  percentiles. Blocks, because a loaded machine runs in spells (a side at 4 ms for ten runs,
  then at 13 ms): timings next to each other are not independent, and an interval that treated
  them as such would claim costs that are spells. The resampling is seeded, so the interval is
  a function of the timings alone (the same samples always give the same answer).
* **Two pairs of fresh processes.** The interval above says how much the runs of *these two
  processes* vary, not how much two processes of one configuration differ, and on a GPU they do:
  each process autotunes its own cuDNN algorithms and lands its memory where it lands. Eighteen
  timings of one GPU side against itself, each pair in fresh processes, gave ratios from 0.90 to
  1.10, and one of them (1.0996, interval 1.037–1.140) was "significant" (GPU_RESULTS.md, run x;
  in run z a first pair called one side 12.3% faster than itself, and its second pair did not).
  So a cost is timed again in a new pair of processes (:data:`PAIRS` pairs in all; the second
  only where the first shows a cost, since only then could it change the answer), and the
  interval stated is the span of the pairs' intervals. The second pair turns the places round
  (B's side timed as A, A's as B; :func:`tracer.diagnosis.costs.measure_costs`): on a GPU the
  process in B's place timed slower in 40 of 54 pairs of one side against itself, and once in
  both pairs of a judgement, which then claimed a cost of +7% where there was none (run ab).
* **A cost is claimed only when it is significant**: when that span lies beyond ``MARGIN`` (2%)
  on one side of no change, that is, when each pair of processes alone shows it, in the same
  direction. Otherwise the comparison is *within timing noise*, and says so with its span
  ("−3.1% to +4.2%"), never as "17% faster". The margin is there because two processes of one
  configuration can differ by a percent or so in a stable way, which no resampling can tell
  from a cost. The ratio stated is the geometric mean of the pairs' ratios.

Nothing here runs anything; the samples come from :mod:`tracer.diagnosis.interleave`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["CONFIDENCE", "MARGIN", "PAIRS", "RESAMPLES", "MIN_RUNS", "PairTiming", "TimingComparison", "compare_pairs",
           "compare_timings"]

CONFIDENCE = 0.95
MARGIN = 0.02  # |ratio - 1| the whole interval must exceed for a cost to be claimed
RESAMPLES = 2000
MIN_RUNS = 5  # fewer timings than this per side give no interval worth stating
SEED = 20231  # the bootstrap's own seed: the interval depends on the timings only
PAIRS = 2  # pairs of fresh processes a cost must show itself in
METHOD = (f"up to {PAIRS} pairs of fresh processes (another where the first shows a cost, with the sides' places "
          "turned round), each timed in interleaved "
          "runs (A B B A ...); per pair the ratio of "
          f"medians B/A and its 95% moving-block bootstrap interval ({RESAMPLES} resamples); significant when the "
          f"span of the pairs' intervals lies beyond ±{MARGIN:.0%}")


@dataclass(frozen=True)
class PairTiming:
    """One pair of processes, A's and B's, timed interleaved: the samples and what they say."""

    a_ms: tuple[float, ...]
    b_ms: tuple[float, ...]
    ratio: float  # median(B) / median(A), scaled
    interval: tuple[float, float]  # the bootstrap interval of ``ratio``

    def to_json(self) -> dict[str, Any]:
        return {"a_ms": [round(t, 4) for t in self.a_ms], "b_ms": [round(t, 4) for t in self.b_ms],
                "median_a_ms": round(float(np.median(self.a_ms)), 4),
                "median_b_ms": round(float(np.median(self.b_ms)), 4),
                "ratio": round(self.ratio, 5), "interval": [round(v, 5) for v in self.interval]}


@dataclass(frozen=True)
class TimingComparison:
    """B's latency against A's, judged by the module's rule over one or more pairs of processes.
    ``ratio`` and ``interval`` are per run, or per example when the two sides run different batch
    sizes (``scale`` = rows of A / rows of B, applied to the ratio of the run medians)."""

    pairs: tuple[PairTiming, ...]
    basis: str  # "per run" | "per example"
    scale: float = 1.0

    @property
    def ratio(self) -> float:
        """The geometric mean of the pairs' ratios."""
        return float(np.exp(np.mean([np.log(pair.ratio) for pair in self.pairs])))

    @property
    def interval(self) -> tuple[float, float]:
        """The span of the pairs' intervals."""
        return min(pair.interval[0] for pair in self.pairs), max(pair.interval[1] for pair in self.pairs)

    @property
    def runs(self) -> int:
        """Timed runs of each side in each pair."""
        return min(min(len(pair.a_ms), len(pair.b_ms)) for pair in self.pairs)

    @property
    def cost_pct(self) -> float:
        return round((self.ratio - 1.0) * 100.0, 2)

    @property
    def interval_pct(self) -> tuple[float, float]:
        return round((self.interval[0] - 1.0) * 100.0, 2), round((self.interval[1] - 1.0) * 100.0, 2)

    @property
    def significant(self) -> bool:
        low, high = self.interval
        return low > 1.0 + MARGIN or high < 1.0 - MARGIN

    def _median_ms(self, side: str) -> float:
        return float(np.median([t for pair in self.pairs for t in getattr(pair, f"{side}_ms")]))

    def words(self) -> str:
        """``costs +12.3% (95% intervals +8.1% to +15.0% over 2 pairs of fresh processes, 30
        interleaved runs of each)``, or ``is within timing noise (…)``: the only way a cost is ever
        said."""
        low, high = self.interval_pct
        basis = " per example" if self.basis == "per example" else ""
        over = f" over {len(self.pairs)} pairs of fresh processes" if len(self.pairs) > 1 else ""
        stated = (f"{CONFIDENCE:.0%} interval{'s' if over else ''} {low:+.1f}% to {high:+.1f}%{basis}{over}, "
                  f"{self.runs} interleaved runs of each")
        if not self.significant:
            return f"is within timing noise ({stated})"
        pct = self.cost_pct
        # a saving in the same sign as its interval: "takes 86.5% less time (… -87.0% to -85.7% …)"
        return f"costs {pct:+.1f}% ({stated})" if pct >= 0 else f"takes {-pct:.1f}% less time ({stated})"

    def to_json(self) -> dict[str, Any]:
        return {
            "method": METHOD, "confidence": CONFIDENCE, "margin": MARGIN, "basis": self.basis,
            "runs": self.runs, "pair_count": len(self.pairs), "pairs": [pair.to_json() for pair in self.pairs],
            "median_a_ms": round(self._median_ms("a"), 4), "median_b_ms": round(self._median_ms("b"), 4),
            "scale": self.scale, "ratio": round(self.ratio, 5), "interval": [round(v, 5) for v in self.interval],
            "cost_pct": self.cost_pct, "interval_pct": list(self.interval_pct), "significant": self.significant,
            "words": self.words(),
        }


def _pair(a_ms: Sequence[float], b_ms: Sequence[float], scale: float) -> PairTiming:
    a, b = np.asarray(a_ms, dtype=np.float64), np.asarray(b_ms, dtype=np.float64)
    if min(a.size, b.size) < MIN_RUNS:
        raise ValueError(f"need at least {MIN_RUNS} timings of each side, got {a.size} and {b.size}")
    if (a <= 0).any() or (b <= 0).any() or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("timings must be positive and finite")
    rng = np.random.default_rng(SEED)
    n = min(a.size, b.size)  # the i-th timings of A and B ran next to each other
    block = max(1, int(round(np.sqrt(n))))
    starts = rng.integers(0, n - block + 1, size=(RESAMPLES, -(-n // block)))
    picks = (starts[:, :, None] + np.arange(block)).reshape(RESAMPLES, -1)[:, :n]
    ratios = np.median(b[:n][picks], axis=1) / np.median(a[:n][picks], axis=1) * scale
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    ratio = float(np.median(b) / np.median(a) * scale)
    return PairTiming(tuple(map(float, a)), tuple(map(float, b)), ratio, (float(low), float(high)))


def compare_pairs(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], *, scale: float = 1.0,
                  basis: str = "per run") -> TimingComparison:
    """Judge B's timings against A's by the module's rule: ``pairs`` holds, for each pair of
    processes, (A's milliseconds, B's milliseconds), one per run, the i-th of each run side by side.

    ``scale`` turns the ratio of run medians into a ratio per example (rows of A / rows of B).
    Raises ValueError for no pair, for fewer than :data:`MIN_RUNS` timings on a side or a
    non-positive one: a caller that has so few has nothing to claim."""
    if not pairs:
        raise ValueError("need at least one pair of timed processes")
    return TimingComparison(tuple(_pair(a, b, scale) for a, b in pairs), basis, scale)


def compare_timings(a_ms: Sequence[float], b_ms: Sequence[float], *, scale: float = 1.0,
                    basis: str = "per run") -> TimingComparison:
    """:func:`compare_pairs` for one pair of processes (what one :meth:`Timer.time_pair` gives)."""
    return compare_pairs([(a_ms, b_ms)], scale=scale, basis=basis)
