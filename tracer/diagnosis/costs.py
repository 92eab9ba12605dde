"""What each remedy costs, measured by the one rule of :mod:`tracer.diagnosis.timing`.

A capture times its own plain runs, but captures run one after another, minutes apart, so
their medians carry every drift of the machine between them: two captures of one side of a
~1 ms model differed by 9.4%. A cost is therefore never read from two captures. For every
experiment whose answer states a cost (its factor diverged, with noise removed where it was,
and has a setting to pay for) and for the verified recipe against the plain base side, the
two sides are timed again, interleaved (:mod:`tracer.diagnosis.interleave`), in a pair of
fresh processes (and a second where the first shows a cost), and judged by :func:`tracer.diagnosis.timing.compare_pairs`. The experiment's
``cost_pct`` is then that measurement's, ``timing`` holds the samples, the interval and whether
it is significant, and the answers say "within timing noise" wherever it is not.

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
from .timing import PAIRS, TimingComparison, compare_pairs

__all__ = ["TIMED_RUNS", "claims_cost", "measure_costs", "time_costs"]

TIMED_RUNS = 30  # timed runs of each side (20 with --quick)


def claims_cost(view: dict[str, Any]) -> bool:
    """Whether the answers state this experiment's cost (it is what :func:`_cost` in answers reads)."""
    factor = FACTORS.get(str(view.get("factor")))
    return (factor is not None and not factor.costless and view.get("verdict") == "diverged"
            and not view.get("attribution") and not view.get("noise_removed_of") and bool(view.get("latency_ms")))


def _rows(lat: dict[str, Any]) -> int:
    return max(1, int(lat.get("batch_rows") or 1))


Timed = tuple[Run, Capture]  # a side to time: its run and the capture it was fed from
Job = tuple[Timed, Timed, bool]  # A, B, and whether their ratio is per example
Samples = list[tuple[list[float], list[float]]]  # per pair of processes: A's and B's milliseconds


def _places_turned(attempt: int) -> bool:
    """Whether a job's pair number ``attempt`` (from 0) is timed with the places turned round:
    every second one (:func:`measure_costs` says why)."""
    return attempt % 2 == 1


def measure_costs(jobs: list[Job], workdir: Path, runs: int, *, pairs: int = PAIRS,
                  every_pair: bool = False) -> list[dict[str, Any]]:
    """Time each job's B against its A, ``runs`` interleaved runs of each, in up to ``pairs``
    pairs of fresh processes, and judge it by :func:`tracer.diagnosis.timing.compare_pairs`; a
    job is (A, B, per_row: whether the ratio is per example). Each pass over the jobs has a pool
    of children of its own, closed before the next pass starts, so the second pair of every job
    runs in processes the first pair never used, while within a pass the base side's child
    serves every job it is in. Every second pass times each job with the places turned round (B's
    side in A's place: started first, timed first in the first interleaved run), and puts its
    samples back the right way: one side against itself on a GPU timed slower in B's place in 40
    of 54 pairs (GPU_RESULTS.md, run ab), whichever process started first, so a bias of the place
    falls on a cost's two pairs with opposite signs and cannot read as a cost. A job whose first
    pair shows no cost is not timed again: the span of the intervals holds the first one, so no
    further pair could make it a cost
    (``every_pair`` times it anyway: ``bench.timing_noise`` wants every pair to count how often
    one alone would have claimed a cost). Returns, per job, the judgement's JSON with the
    TensorFlow release each side's child ran (``tensorflow``: ``{a, b}``), or ``{error}``."""
    samples: list[Samples] = [[] for _ in jobs]
    judged: list[TimingComparison | None] = [None] * len(jobs)
    errors: list[str | None] = [None] * len(jobs)
    releases: list[dict[str, str | None]] = [{} for _ in jobs]
    for attempt in range(pairs):
        with Timer(workdir) as timer:
            for i, ((run_a, cap_a), (run_b, cap_b), _) in enumerate(jobs):
                settled = judged[i] is not None and not judged[i].significant and not every_pair
                if errors[i] is not None or settled:
                    continue  # a pair that shows no cost leaves none to confirm: more pairs cannot claim one
                a, b = (run_a.key(), run_a.side, cap_a), (run_b.key(), run_b.side, cap_b)
                try:
                    if _places_turned(attempt):  # B's side timed in A's place, and A's in B's
                        times_b, times_a, turned = timer.time_pair(b, a, runs)
                        releases[i] = {"a": turned["b"], "b": turned["a"]}
                    else:
                        times_a, times_b, releases[i] = timer.time_pair(a, b, runs)
                except TimingFailed as exc:
                    again = " in a further pair of processes" if attempt else ""
                    errors[i] = f"could not be timed{again}: {exc}"
                    continue
                samples[i].append((times_a, times_b))
                judged[i] = _judged(samples[i], jobs[i])
    out: list[dict[str, Any]] = []
    for judgement, error, release in zip(judged, errors, releases):
        if error is not None or judgement is None:
            out.append({"error": error or "was not timed"})
            continue
        doc = judgement.to_json()
        for k, pair in enumerate(doc["pairs"]):
            pair["places_turned"] = _places_turned(k)  # as timed (the samples are put back under their own sides)
        out.append({**doc, "tensorflow": release})  # what each child ran (tf_version)
    return out


def _judged(pairs: Samples, job: Job) -> TimingComparison:
    (_, cap_a), (_, cap_b), per_row = job
    lat_a, lat_b = (c.timings.plain_latency_ms for c in (cap_a, cap_b))
    scale = _rows(lat_a) / _rows(lat_b) if per_row else 1.0
    return compare_pairs(pairs, scale=scale, basis="per example" if per_row else "per run")


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
    jobs: list[Job] = []
    for _, p in base_first:
        assert p.a is not None and p.b is not None
        jobs.append(((p.a, capture(p.a)), (p.b, capture(p.b)), p.per_row))
    if recipe is not None:
        _, reference, side = recipe
        jobs.append(((reference, capture(reference)), (side, capture(side)), False))
    timings = measure_costs(jobs, workdir, runs)
    for (result, _), timing in zip(base_first, timings):
        result["timing"] = timing
        if "error" not in timing:
            result["cost_pct"] = timing["cost_pct"]
    if recipe is not None:
        result, timing = recipe[0], timings[-1]
        result["combined_timing"] = timing
        if "error" not in timing:
            result["combined_cost_pct"] = timing["cost_pct"]
