"""The one rule every cost of ``tftrace diagnose`` is judged by (tracer.diagnosis.timing), on
real timings: work timed here, interleaved as the rule asks, and a side timed in its children."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from tracer.diagnosis.timing import MIN_RUNS, compare_pairs, compare_timings


def _interleaved(first, second, runs: int = 30) -> tuple[list[float], list[float]]:
    """Milliseconds of each callable, timed A B, B A, ... as tracer.diagnosis.interleave does."""
    a, b = [], []
    for i in range(runs):
        order = ((first, a), (second, b)) if i % 2 == 0 else ((second, b), (first, a))
        for work, times in order:
            t0 = time.perf_counter()
            work()
            times.append((time.perf_counter() - t0) * 1000.0)
    return a, b


def _work() -> None:
    """About a millisecond of one thread's arithmetic (no BLAS threads that spin on a busy machine)."""
    total = 0
    for i in range(40_000):
        total += i * i
    assert total > 0


def test_the_same_work_timed_twice_is_within_timing_noise():
    a, b = _interleaved(_work, _work)
    result = compare_timings(a, b)
    assert not result.significant, result.to_json()
    assert result.interval[0] <= 1.0 <= result.interval[1] or abs(result.ratio - 1.0) < 0.05
    assert result.words().startswith("is within timing noise (95% interval ")
    assert result.words().endswith(", 30 interleaved runs of each)")


def test_a_measured_sleep_is_a_significant_cost():
    a, b = _interleaved(_work, lambda: (_work(), time.sleep(0.004)))
    result = compare_timings(a, b)
    assert result.significant and result.interval[0] > 1.02, result.to_json()
    assert result.cost_pct > 0 and result.words().startswith(f"costs +{result.cost_pct:.1f}% (95% interval +")
    faster = compare_timings(b, a)  # the same timings the other way round: a saving, as significant
    assert faster.significant and faster.words().startswith(f"takes {-faster.cost_pct:.1f}% less time (95% interval -")


def test_per_example_scales_the_ratio_by_the_rows_of_each_side():
    a, b = _steady(2.0, seed=1), _steady(2.0, seed=2)  # B: the same run for four times the rows (not timed here:
    # two real runs of one work on a loaded machine once read 1.6x apart, and this is about the scaling)
    per_run = compare_timings(a, b)
    per_example = compare_timings(a, b, scale=1 / 4, basis="per example")
    assert per_example.ratio == pytest.approx(per_run.ratio / 4)
    assert per_example.interval == pytest.approx((per_run.interval[0] / 4, per_run.interval[1] / 4))
    assert per_example.significant and per_example.cost_pct < -60 and "per example" in per_example.words()


def _steady(ms: float, seed: int = 0, runs: int = 30) -> list[float]:
    """Timings of a process that runs at ``ms`` with a little jitter of its own (1%, seeded)."""
    return list(ms * (1.0 + np.random.default_rng(seed).normal(0.0, 0.01, runs)))


def test_a_cost_is_claimed_only_when_each_pair_of_processes_shows_it():
    """Two processes of one side can run 10% apart (a GPU side autotunes per process): one pair
    that does is significant alone, and claims nothing once a second pair does not repeat it."""
    one_fast_process = (_steady(2.0, seed=3), _steady(2.2, seed=4))
    again_alike = (_steady(2.1, seed=1), _steady(2.1, seed=2))
    assert compare_timings(*one_fast_process).significant  # what one pair alone would claim
    judged = compare_pairs([one_fast_process, again_alike])
    assert not judged.significant and judged.ratio == pytest.approx(np.sqrt(1.1), abs=0.01)
    assert judged.interval[0] < 1.0 < judged.interval[1] == pytest.approx(1.1, abs=0.02)
    low, high = judged.interval_pct
    assert judged.words() == (f"is within timing noise (95% intervals {low:+.1f}% to {high:+.1f}% over 2 pairs of "
                              "fresh processes, 30 interleaved runs of each)")
    # opposite directions: no cost either way
    assert not compare_pairs([one_fast_process, (_steady(2.2), _steady(2.0))]).significant


def test_a_cost_both_pairs_show_is_claimed_with_the_span_of_their_intervals():
    slower = compare_pairs([(_steady(2.0, seed=5), _steady(3.0, seed=6)), (_steady(2.2, seed=7), _steady(3.1, seed=8))])
    first, second = slower.pairs
    low, high = slower.interval_pct
    assert (slower.interval[0], slower.interval[1]) == (min(first.interval[0], second.interval[0]),
                                                        max(first.interval[1], second.interval[1]))
    assert slower.significant and low == pytest.approx(40.9, abs=2) and high == pytest.approx(50.0, abs=2)
    assert slower.ratio == pytest.approx(np.sqrt(first.ratio * second.ratio))
    assert slower.words() == (f"costs +{slower.cost_pct:.1f}% (95% intervals {low:+.1f}% to {high:+.1f}% over 2 pairs "
                              "of fresh processes, 30 interleaved runs of each)")
    as_json = slower.to_json()
    assert [pair["median_b_ms"] for pair in as_json["pairs"]] == pytest.approx([3.0, 3.1], abs=0.02)
    assert as_json["median_a_ms"] == pytest.approx(2.1, abs=0.11) and as_json["significant"] is True


def test_the_interval_depends_on_the_timings_alone():
    a, b = _interleaved(_work, _work, runs=12)
    assert compare_timings(a, b).to_json() == compare_timings(list(a), list(b)).to_json()


def test_too_few_or_impossible_timings_claim_nothing():
    with pytest.raises(ValueError, match=f"at least {MIN_RUNS} timings"):
        compare_timings([1.0] * (MIN_RUNS - 1), [1.0] * 10)
    with pytest.raises(ValueError, match="positive and finite"):
        compare_timings([1.0] * 9 + [0.0], [1.0] * 10)
    with pytest.raises(ValueError, match="at least one pair"):
        compare_pairs([])


@pytest.mark.slow
def test_a_side_timed_in_its_children_costs_what_its_batch_costs(models, tmp_path):
    """The detector at batch 1 and at batch 16, each in a child of its own, interleaved: 16 rows
    per run cost more per run, and far less per example."""
    import os  # noqa: PLC0415

    from tracer.captures.launcher import capture  # noqa: PLC0415
    from tracer.diagnosis.interleave import Timer  # noqa: PLC0415
    from tracer.runspec import InputSpec, Side  # noqa: PLC0415
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415

    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    sides = {n: Side(artifact=ArtifactRef(str(models["detector"])), batch_size=n,
                     inputs=InputSpec(seed=0, examples=16), timing_runs=5) for n in (1, 16)}
    caps = {n: capture(side, Path(tmp_path / f"b{n}"), force=True) for n, side in sides.items()}
    with Timer(tmp_path / "timing") as timer:
        t1, t16, releases = timer.time_pair(("b1", sides[1], caps[1]), ("b16", sides[16], caps[16]), 20)
    assert len(t1) == len(t16) == 20 and min(t1 + t16) > 0
    # each child says the release it times: here both this interpreter's, as their captures ran
    assert releases == {"a": caps[1].manifest["environment"]["tensorflow"],
                        "b": caps[16].manifest["environment"]["tensorflow"]}
    per_example = compare_timings(t1, t16, scale=1 / 16, basis="per example")
    assert per_example.significant and per_example.cost_pct < 0, per_example.to_json()


def test_a_cost_is_timed_in_a_second_pair_of_processes_only_where_the_first_shows_one(monkeypatch, tmp_path):
    """tracer.diagnosis.costs.measure_costs: each pass over the jobs opens a pool of its own (fresh
    processes); a job whose first pair is within noise is not timed again, since no second pair
    could make it a cost; one whose first pair shows a cost must show it again."""
    from types import SimpleNamespace  # noqa: PLC0415

    from tracer.diagnosis import costs  # noqa: PLC0415

    pools: list[list[str]] = []
    places: set[tuple[int, bool]] = set()  # (pass, the roles turned round)
    timings = {"same": [(2.0, 2.0), (2.0, 2.0)], "slower": [(2.0, 2.6), (2.1, 2.1)], "cost": [(2.0, 2.6), (2.0, 2.7)]}

    class Pool:  # stands for interleave.Timer: a pool of fresh children per pass
        def __init__(self, workdir):
            pools.append([])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def time_pair(self, a, b, runs):
            turned = a[1] != "base"  # the second pass times B's side in A's place
            name = a[1] if turned else b[1]
            pools[-1].append(name)
            places.add((len(pools), turned))
            a_ms, b_ms = timings[name][len(pools) - 1]
            a_ms, b_ms = (b_ms, a_ms) if turned else (a_ms, b_ms)
            return (_steady(a_ms, seed=len(pools)), _steady(b_ms, seed=10 + len(pools)),
                    {"a": "y" if turned else "x", "b": "x" if turned else "y"})

    judgements: list[int] = []
    judge = costs.compare_pairs

    def counted(pairs, **kw):
        judgements.append(len(pairs))
        return judge(pairs, **kw)

    monkeypatch.setattr(costs, "Timer", Pool)
    monkeypatch.setattr(costs, "compare_pairs", counted)
    cap = SimpleNamespace(timings=SimpleNamespace(plain_latency_ms={"batch_rows": 1}))
    run = SimpleNamespace(key=lambda: "a", side="base")
    jobs = [((run, cap), (SimpleNamespace(key=lambda n=n: n, side=n), cap), False) for n in timings]
    same, slower, cost = costs.measure_costs(jobs, tmp_path, 30)
    assert pools == [["same", "slower", "cost"], ["slower", "cost"]]
    assert places == {(1, False), (2, True)}  # the second pair with B's side in A's place, put back after
    assert judgements == [1, 1, 1, 2, 2]  # each pair judged once, as it comes: none judged again at the end
    assert same["pair_count"] == len(same["pairs"]) == 1 and not same["significant"]
    assert slower["pair_count"] == 2 and not slower["significant"]  # one process 30% apart, not repeated
    assert cost["pair_count"] == 2 and cost["significant"] and cost["words"].startswith("costs +")
    assert cost["tensorflow"] == {"a": "x", "b": "y"}  # each side's release, whichever place it was timed in
    assert [p["places_turned"] for p in cost["pairs"]] == [False, True]  # the record says how each pair was timed
    assert [p["median_b_ms"] > p["median_a_ms"] for p in cost["pairs"]] == [True, True]  # put back under B

    pools.clear()  # bench.timing_noise: every pair timed, a first pair within noise included
    every = costs.measure_costs(jobs, tmp_path, 30, every_pair=True)
    assert pools == [["same", "slower", "cost"], ["same", "slower", "cost"]]
    assert [t["pair_count"] for t in every] == [2, 2, 2] and [t["significant"] for t in every] == [False, False, True]
