"""What each remedy costs, measured by the one rule of :mod:`tracer.diagnosis.timing`.

A capture times its own plain runs, but captures run one after another, minutes apart, so
their medians carry every drift of the machine between them: two captures of one side of a
~1 ms model differed by 9.4%. A cost is therefore never read from two captures. For every
experiment whose answer states a cost (its factor diverged, with noise removed where it was,
and has a setting to pay for) and for the verified recipe against the plain base side, the
two sides are timed again, interleaved (:mod:`tracer.diagnosis.interleave`), and judged by
:func:`tracer.diagnosis.timing.compare_timings`. The experiment's ``cost_pct`` is then that
measurement's, ``timing`` holds the samples, the interval and whether it is significant, and
the answers say "within timing noise" wherever it is not.

Runs after every comparison and replay, with nothing else running, so the timings have the
machine to themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..captures.reader import Capture
from .experiments import FACTORS
from .interleave import Timer, TimingFailed
from .plan import Planned, Run
from .timing import compare_timings

__all__ = ["TIMED_RUNS", "claims_cost", "time_costs"]

TIMED_RUNS = 30  # timed runs of each side (20 with --quick)


def claims_cost(view: dict[str, Any]) -> bool:
    """Whether the answers state this experiment's cost (it is what :func:`_cost` in answers reads)."""
    factor = FACTORS.get(str(view.get("factor")))
    return (factor is not None and not factor.costless and view.get("verdict") == "diverged"
            and not view.get("attribution") and not view.get("noise_removed_of") and bool(view.get("latency_ms")))


def _rows(lat: dict[str, Any]) -> int:
    return max(1, int(lat.get("batch_rows") or 1))


def _measure(timer: Timer, a: tuple[Run, Capture], b: tuple[Run, Capture], runs: int,
             per_row: bool) -> dict[str, Any]:
    (run_a, cap_a), (run_b, cap_b) = a, b
    try:
        times_a, times_b, releases = timer.time_pair((run_a.key(), run_a.side, cap_a),
                                                     (run_b.key(), run_b.side, cap_b), runs)
    except TimingFailed as exc:
        return {"error": f"could not be timed: {exc}"}
    lat_a, lat_b = (c.timings.plain_latency_ms for c in (cap_a, cap_b))
    scale = _rows(lat_a) / _rows(lat_b) if per_row else 1.0
    timing = compare_timings(times_a, times_b, scale=scale, basis="per example" if per_row else "per run").to_json()
    return {**timing, "tensorflow": releases}  # what each timing child ran (tf_version: two releases)


def time_costs(views: list[dict[str, Any]], results: list[dict[str, Any]], planned: list[Planned],
               capture: Callable[[Run], Capture], workdir: Path, runs: int,
               recipe: tuple[dict[str, Any], Run, Run] | None = None) -> None:
    """Time every experiment whose cost the answers state (judged by ``views``, the experiments
    as the answers see them) and the recipe (its result, the reference run, its side A), and
    write the measurement into ``results``."""
    by_name = {p.name: p for p in planned}
    wanted = {v["name"] for v in views if claims_cost(v)}
    todo = [(r, by_name[r["name"]]) for r in results if r["name"] in wanted and r["name"] in by_name]
    base_first = sorted(todo, key=lambda item: item[1].a.key() if item[1].a else "")  # shared sides in a row
    with Timer(workdir) as timer:
        for result, p in base_first:
            assert p.a is not None and p.b is not None
            timing = _measure(timer, (p.a, capture(p.a)), (p.b, capture(p.b)), runs, p.per_row)
            result["timing"] = timing
            if "error" not in timing:
                result["cost_pct"] = timing["cost_pct"]
        if recipe is not None:
            result, reference, side = recipe
            timing = _measure(timer, (reference, capture(reference)), (side, capture(side)), runs, False)
            result["combined_timing"] = timing
            if "error" not in timing:
                result["combined_cost_pct"] = timing["cost_pct"]
