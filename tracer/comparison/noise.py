"""A side's run-to-run noise, measured in fresh processes: whether each side repeats itself.

Why a stage of its own: an agreement between two runs says nothing about the next two when a
side does not repeat itself (cuDNN autotuning picks each process's convolution algorithms by
timing; atomics accumulate in any order). So the noise is *measured*, never assumed:

* ``--repeat K`` runs every side K times (K-1 more fresh processes);
* by default (``repeat=None``) a side is run once more only where it can be nondeterministic —
  a GPU side without op determinism (:func:`tracer.comparison.judge.per_process_nondeterminism`),
  or, found later by the isolation, a side whose replay differed from its own capture — and a
  CPU side whose replays repeat costs no process at all;
* ``--repeat 1`` opts out: the sides that could have moved are named in
  :attr:`Noise.not_measured`, so the headline says the noise was not measured.

Every output is then judged over every pair of runs (A run i against B run j), against each
side's spread (:class:`OutputNoise`): "A vs B within what each side does by itself" is a
statement about all the runs, not about a lucky first pair. Bit-identical and within tolerance
must hold for every pair; "within the noise" asks whether A and B come, in some pair of runs, as
close as a side comes to itself (the closest pair against the largest spread). Not the farthest
pair: with K runs a side there are K² pairs across and K(K-1) within, all alike when A and B are
the same computation, so the farthest of the many would beat the farthest of the few by chance
alone (two runs each: two times in three).

A tensor that holds a detector's lists of detections, which A and B are judged on between matched
detections, moves between two runs by what its matched detections move, measured the same way
(:mod:`tracer.comparison.list_runs`): a list that only comes out in another order has noise 0, not
the size of a box.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from ..captures.launcher import PreparedChild, capture as capture_side, prepared_if_room
from ..captures.progress_view import working
from ..captures.reader import Capture
from ..pythons import made_with
from ..metrics import TensorMetrics, compare_arrays
from ..runspec import Side
from ..safewrite import claim
from .align import Alignment
from .detection_lists import DetectionList
from .divergence import Tolerance
from .judge import per_process_nondeterminism
from .list_runs import Naming, PlainMatches, lists_between, plain_list
from .pairing import b_keys_as_a, is_capture

__all__ = ["Noise", "OutputNoise", "RepeatPlan", "first_repeat_child", "measure_noise", "plan_more", "plan_repeats",
           "side_noise", "NONDETERMINISTIC_GPU"]

NONDETERMINISTIC_GPU = ("runs on a GPU without op determinism, where each fresh process may pick other kernels "
                        "(cuDNN autotuning) and atomics sum in any order")


@dataclass
class OutputNoise:
    """One output over every run: each side's spread, and A against B over every pair of runs."""

    spread: dict[str, float] = field(default_factory=dict)  # "a"/"b" -> max |run i - run 1| of that side
    spread_within_tolerance: bool = True  # every repeat of each side within tolerance of its first run
    cross_max_abs: float = 0.0  # the largest max |A run i - B run j| over every pair
    cross_closest: float = math.inf  # the smallest of those: how close A and B come in some pair of runs
    cross_identical: bool = True  # every pair bit for bit
    cross_within_tolerance: bool = True  # every pair within tolerance
    cross_nonfinite: bool = False  # NaN or Inf where the other side has none, in some pair
    pairs: int = 0
    runs: dict[str, int] = field(default_factory=dict)  # "a"/"b" -> how many runs of it were compared

    @property
    def chance(self) -> float | None:
        """How likely the closest A-vs-B pair lies beyond the largest spread by chance alone, when A
        and B are one computation: the runs are then exchangeable, and the chance that the
        within-side pairs are the smallest of all pairs' differences is 1 / C(all pairs, within
        pairs) (two runs each: 1 in 15; three: 1 in 5005). None where no side was repeated."""
        n = sum(self.runs.values())
        within = sum(k * (k - 1) // 2 for k in self.runs.values())
        return 1 / math.comb(n * (n - 1) // 2, within) if within else None

    @property
    def noise(self) -> float:
        return max(self.spread.values(), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {"spread": dict(self.spread), "spread_within_tolerance": self.spread_within_tolerance,
                "cross_max_abs": self.cross_max_abs, "cross_closest": self.cross_closest if self.pairs else None,
                "cross_identical": self.cross_identical,
                "cross_within_tolerance": self.cross_within_tolerance, "pairs": self.pairs,
                "runs": dict(self.runs), "chance_beyond_by_chance": self.chance}


@dataclass
class Noise:
    """What the repeats measured (empty when none ran)."""

    per_tensor: dict[str, float] = field(default_factory=dict)  # A tensor -> the larger run-to-run max |diff|
    summary: dict[str, Any] | None = None  # report.json's "noise" (None: no side was repeated)
    per_output: dict[str, float] = field(default_factory=dict)  # A's signature key -> the same, plain outputs
    outputs: dict[str, OutputNoise] = field(default_factory=dict)  # A's signature key -> over every run pair
    not_measured: list[dict[str, str]] = field(default_factory=list)  # {"side", "why"}: could move, not measured
    runs: dict[str, list[Capture]] = field(default_factory=dict)  # "a"/"b" -> its captures, the first one first
    closest: dict[str, float] = field(default_factory=dict)  # A tensor -> smallest max |A - B| over run pairs

    def judge_pairs(self, alignment: Alignment, metrics: dict[str, TensorMetrics], tolerance: Tolerance,
                    lists: Mapping[str, DetectionList] | None = None, signature_map: Mapping[str, str] | None = None
                    ) -> None:
        """For each tensor beyond tolerance and beyond the noise in the first pair of runs, the
        closest A and B come over every pair of runs (:attr:`closest`): read only for those few. A
        detection list (``lists``, A's and B's) is measured there as it was in the first pair, between
        matched detections (:meth:`DetectionList.size`)."""
        if not self.runs or all(len(v) < 2 for v in self.runs.values()):
            return
        lists = lists or {}
        wanted: dict[str, str] = {}
        for node in alignment.nodes.values():
            for pair in node.tensors:
                m = metrics.get(pair.a)
                if m is None or pair.b is None or m.identical or not self.per_tensor.get(pair.a):
                    continue
                listed, tol = lists.get(pair.a), tolerance.for_tensor(pair.a)
                size = listed.size(m) if listed is not None else m.max_abs
                within = listed.within(m, *tol) if listed is not None else m.within(*tol)
                if size > self.per_tensor[pair.a] and not within:
                    wanted[pair.a] = pair.b
        b_names = Naming(wanted, dict(signature_map or {}))
        for ca in self.runs["a"]:
            for cb in self.runs["b"]:
                in_lists = lists_between(ca, cb, {t: lists[t] for t in wanted if t in lists},
                                         lambda t: tolerance.for_tensor(t)[1], y_names=b_names)
                for ta, tb in wanted.items():
                    size = _closest(ca, cb, ta, tb, in_lists.get(ta))
                    if size is not None:
                        self.closest[ta] = min(self.closest.get(ta, size), size)

    def known(self, alignment: Alignment) -> dict[str, float] | None:
        """A tensor -> its measured run-to-run noise, 0.0 included where both sides were repeated
        and it did not move; None when no repeat ran. A tensor absent is not known."""
        if not self.summary:
            return None
        if all("max_abs" in (self.summary.get(key) or {}) for key in ("a", "b")):
            return {p.a: self.per_tensor.get(p.a, 0.0)
                    for n in alignment.nodes.values() for p in n.tensors if p.comparable and p.a}
        return {name: v for name, v in self.per_tensor.items() if v > 0}  # one side only: a zero is half a measure

    def measured(self, side: str) -> bool:
        return bool(self.summary) and "max_abs" in (self.summary.get(side) or {})


@dataclass(frozen=True)
class RepeatPlan:
    """The runs that measure the noise, planned once: each side's runs in all, the sides that can
    move but will not be measured, and the captures to make, in the order they run."""

    runs: dict[str, int]
    unmeasured: list[dict[str, str]]
    jobs: list[tuple[str, int, Side]]  # (side, repeat number, what to run)
    why: dict[str, str] = field(default_factory=dict)  # side in runs -> why it runs again (the report's noise.SIDE)


def plan_repeats(targets: dict[str, Any], captures: dict[str, Capture], repeat: int | None) -> RepeatPlan:
    """How many runs each side gets and why, and the sides that can move but will not be measured.

    ``repeat`` given: every side that can be re-run gets it (1: none). None (the default): 2 runs
    for a side that can be nondeterministic (see the module docstring), 1 for the others.
    """
    runs: dict[str, int] = {}
    unmeasured: list[dict[str, str]] = []
    for key, target in targets.items():
        risky = per_process_nondeterminism(captures[key])
        wanted = repeat if repeat is not None else (2 if risky else 1)
        if wanted > 1 and is_capture(target):
            if risky:
                unmeasured.append({"side": key, "why": f"it {NONDETERMINISTIC_GPU}, and was given as a capture "
                                                       "directory, which cannot be re-run here"})
            continue
        if wanted > 1:
            runs[key] = wanted
        elif risky:
            unmeasured.append({"side": key, "why": f"it {NONDETERMINISTIC_GPU}, and `--repeat 1` ran it once"})
    why = {key: "`--repeat`" if repeat is not None else f"side {key.upper()} {NONDETERMINISTIC_GPU}" for key in runs}
    return RepeatPlan(runs, unmeasured, _repeat_jobs(targets, captures, runs), why)


def plan_more(targets: dict[str, Any], captures: dict[str, Capture], runs: dict[str, int],
              done: Mapping[str, list[Capture]], why: Mapping[str, str]) -> RepeatPlan:
    """Further runs, judging's: each side in ``runs`` up to that many runs in all, continuing from
    its runs so far (``done``: a side not run again yet has its first capture only), for the reason
    ``why`` gives (a side measured before keeps its first reason and records this one as
    ``more_runs``)."""
    return RepeatPlan(runs, [], _repeat_jobs(targets, captures, runs, done), {key: why[key] for key in runs})


def _repeat_jobs(targets: dict[str, Any], captures: dict[str, Capture], runs: dict[str, int],
                 done: Mapping[str, list[Capture]] | None = None) -> list[tuple[str, int, Side]]:
    """The captures that measure the noise, in the order they run: (side, repeat number, what to run);
    ``done``: each side's runs so far, which a further measurement continues from (else one each)."""
    return [(name, i, _as_ran(captures[name], targets[name])) for name, count in runs.items()
            for i in range(len((done or {}).get(name) or [None]), count)]


def first_repeat_child(plan: RepeatPlan) -> PreparedChild | None:
    """The first noise repeat's child, started as soon as both sides are captured, so that it imports
    TensorFlow and loads its model while this process compares the captures (on the H200, 10-40 s
    of comparing and 40 s of loading for the 35,000-op stand-in); None where the plan runs no side
    again, or memory does not hold it."""
    side = plan.jobs[0][2] if plan.jobs else None
    return prepared_if_room(side, side.max_memory) if side is not None else None


def measure_noise(
    plan: RepeatPlan, captures: dict[str, Capture], alignment: Alignment, out: Path,
    console: Console, signature_map: dict[str, str], tolerance: Tolerance,
    earlier: Noise | None = None, lists: Mapping[str, DetectionList] | None = None,
    first: PreparedChild | None = None, then: Callable[[int], None] | None = None,
) -> Noise:
    """Capture each side as ``plan`` says (fresh processes) and measure how much every tensor and
    every plain output moves by itself; then judge every output over every pair of A and B runs.
    ``earlier``: a measurement this one extends (its sides are kept; a side
    measured there runs only the captures it lacks, and its ``why`` stays, this plan's recorded as
    ``more_runs``);
    ``lists``: the detection lists A and B were measured on between matched detections, which their
    runs are measured on so too; ``first``: the first repeat's child, already loading
    (:func:`first_repeat_child`); ``then``: called once the last repeat's child is up, with its
    --max-memory, to start the child the step after this one needs (the replays')."""
    noise = earlier or Noise()
    summary: dict[str, Any] = dict(noise.summary or {})
    runs_of = noise.runs or {key: [captures[key]] for key in ("a", "b")}
    noise.runs = runs_of
    started = time.monotonic()
    runs, jobs, why = plan.runs, plan.jobs, plan.why
    before = {name: len(runs_of[name]) for name in runs}
    ahead: dict[int, PreparedChild | None] = {0: first} if first is not None and jobs else {}

    def start_next(k: int) -> Callable[[dict[str, Any]], None]:
        """Once job ``k``'s child is up, the next job's child imports TensorFlow and loads its model
        (after the last job: ``then``'s)."""
        def heard(_event: dict[str, Any]) -> None:
            if k + 1 < len(jobs) and k + 1 not in ahead:
                ahead[k + 1] = prepared_if_room(jobs[k + 1][2], jobs[k][2].max_memory)
            elif k + 1 == len(jobs) and then is not None and k + 1 not in ahead:
                ahead[k + 1] = None  # once
                then(jobs[k][2].max_memory)
        return heard

    try:
        for k, (name, i, side) in enumerate(jobs):
            claim(out, ["captures"])
            runs_of[name].append(capture_side(side, out / "captures" / f"{name}_repeat{i}", force=True,
                                              console=console, prepared=ahead.pop(k, None), on_event=start_next(k)))
    finally:
        for child in ahead.values():
            if child is not None:
                child.cancel()  # its job never came (a capture before it failed): nothing is left running
    captures_read = sum(len(runs_of[name]) for name in runs)
    with working(console, "noise", f"comparing every tensor of {captures_read} captures, run against run"):
        for name, count in runs.items():
            earlier_side = summary.get(name) or {}
            more = ({"why": earlier_side.get("why", ""), "more_runs": {"added": count - before[name],
                                                                       "because": why.get(name, "")}}
                    if before[name] > 1 else {"why": why.get(name, "")})
            summary[name] = side_noise(name, runs_of[name], alignment, noise, signature_map, tolerance, lists) | {
                "runs": count, **more}
    seconds = time.monotonic() - started
    summary["repeats"] = max([summary.get("repeats", 1), *runs.values()])
    summary["seconds"] = round(summary.get("seconds", 0.0) + seconds, 3)  # what measuring the noise cost
    summary["processes"] = summary.get("processes", 0) + len(jobs)
    for name in ("a", "b"):
        summary.setdefault(name, {"skipped": "run once: nothing showed that it changes from run to run"})
    noise.summary = summary
    if runs:
        noise.outputs = _over_every_pair(runs_of, signature_map, tolerance, lists)
        summary["outputs"] = {key: o.to_json() for key, o in noise.outputs.items()}
    return noise


def _as_ran(capture: Capture, target: Any) -> Side:
    """The side a capture ran, to run again: exactly what ran, the examples included, with what
    the capture does not record: the permission (``target``'s) and the interpreter (the one that
    captured it)."""
    return Side.from_json(capture.spec).with_(allow_unsafe_ops=isinstance(target, Side) and target.allow_unsafe_ops,
                                              python=made_with(capture.path))


def side_noise(name: str, runs: list[Any], alignment: Alignment, noise: Noise, signature_map: Mapping[str, str],
               tolerance: Tolerance, lists: Mapping[str, DetectionList] | None = None) -> dict[str, Any]:
    """One side's spread over its runs (``runs``: its captures, the first one first): every compared
    tensor, a detection list between the detections the runs' outputs matched (``lists``: those A and
    B were measured on so), then every plain output; recorded in ``noise`` and returned as the side's
    report.json ``noise`` entry."""
    base = runs[0]
    worst, noisy = 0.0, 0
    outputs: dict[str, float] = {}
    a_keys = b_keys_as_a(signature_map)  # B's output key -> A's (--map)
    names = Naming() if name == "a" else Naming(
        {p.a: p.b for n in alignment.nodes.values() for p in n.tensors if p.b}, dict(signature_map))
    matches = PlainMatches()  # one match per pair of runs and group, shared by the group's outputs
    for again in runs[1:]:
        in_lists = lists_between(base, again, lists or {}, lambda t: tolerance.for_tensor(t)[1], names, names)
        for node in alignment.nodes.values():
            for pair in node.tensors:
                own = pair.a if name == "a" else pair.b
                if not pair.comparable or own is None or not again.has(own) or not base.has(own):
                    continue
                m = compare_arrays(base.tensor(own), again.tensor(own))
                if not m.identical:
                    noisy += 1
                    listed = in_lists.get(pair.a)
                    moved = listed.size(m) if listed is not None else _moved(m)
                    noise.per_tensor[pair.a] = max(noise.per_tensor.get(pair.a, 0.0), moved)
                    worst = max(worst, moved)
        for key in base.outputs:  # the plain runs' outputs move by themselves too
            first, later = base.plain_output(key), again.plain_output(key)
            if first is None or later is None or first.shape != later.shape:
                continue
            m = compare_arrays(first, later)
            a_key = key if name == "a" else a_keys.get(key, key)
            keys = dict(signature_map) if name == "b" else None  # B's runs name A's keys through --map
            rtol = tolerance.for_tensor(base.outputs[key])[1]
            listed = plain_list(output_list(lists, a_key), base, again, first, later, rtol, keys, keys, matches)
            moved = listed.size(m) if listed is not None else 0.0 if m.identical else _moved(m)
            noise.per_output[a_key] = max(noise.per_output.get(a_key, 0.0), moved)
            outputs[a_key] = max(outputs.get(a_key, 0.0), moved)
    return {"max_abs": worst, "tensors_that_moved": noisy, "outputs_max_abs": outputs,
            "repeats_itself": noisy == 0 and not any(outputs.values())}


def _closest(ca: Capture, cb: Capture, ta: str, tb: str, listed: DetectionList | None = None) -> float | None:
    """max |A - B| of one pair of runs on one tensor (a detection list: :meth:`DetectionList.size`,
    ``listed`` being its lists in these runs); None where a run lacks it or shapes differ."""
    if not ca.has(ta) or not cb.has(tb):
        return None
    va, vb = ca.tensor(ta), cb.tensor(tb)
    if va.shape != vb.shape:
        return None
    m = compare_arrays(va, vb)
    return listed.size(m) if listed is not None else 0.0 if m.identical else m.max_abs


def _moved(m: TensorMetrics) -> float:
    """How far a tensor moved between two runs: its max |diff|; a bool that flipped (max |diff| 0
    for a bool) moved by 1, so the noise it shows is never read as none."""
    return m.max_abs if m.max_abs > 0 or m.identical else 1.0


def output_list(lists: Mapping[str, DetectionList] | None, a_key: str) -> DetectionList | None:
    """A list measured between matched detections that holds output ``a_key``'s rows (any one: each
    names the group of detections its plain values are matched by), or None."""
    return next((listed for listed in (lists or {}).values()
                 if listed.output == a_key and listed.spec is not None and listed.matched is not None), None)


def _over_every_pair(runs_of: dict[str, list[Capture]], signature_map: dict[str, str], tolerance: Tolerance,
                     lists: Mapping[str, DetectionList] | None = None) -> dict[str, OutputNoise]:
    """Every plain output, A's run i against B's run j for every i, j, and each side's spread; a
    detector's outputs between the detections each pair of plain runs matched (``lists``: A and B
    were measured so), as the sides' own noise on them is."""
    found: dict[str, OutputNoise] = {}
    keys = {"a": None, "b": dict(signature_map)}
    matches = PlainMatches()  # one match per pair of runs and group, shared by the group's outputs
    for a_key, a_tensor in runs_of["a"][0].outputs.items():
        b_key = signature_map.get(a_key, a_key)
        atol, rtol = tolerance.for_tensor(a_tensor)
        listed = output_list(lists, a_key)
        runs = {"a": [(c, c.plain_output(a_key)) for c in runs_of["a"]],
                "b": [(c, c.plain_output(b_key)) for c in runs_of["b"]]}
        runs = {side: [(c, v) for c, v in found_runs if v is not None] for side, found_runs in runs.items()}
        if not runs["a"] or not runs["b"] or runs["a"][0][1].shape != runs["b"][0][1].shape:
            continue

        def apart(x: tuple[Capture, Any], y: tuple[Capture, Any], kx: str, ky: str) -> tuple[float, bool, Any]:
            """How far two plain runs are (a detector's output: between matched detections), within tolerance."""
            m = compare_arrays(x[1], y[1], rtols=(rtol,))
            pair = plain_list(listed, x[0], y[0], x[1], y[1], rtol, keys[kx], keys[ky], matches)
            if pair is not None:
                return pair.size(m), pair.within(m, atol, rtol), m
            return (0.0 if m.identical else m.max_abs), m.within(atol, rtol), m

        record = OutputNoise(runs={"a": len(runs["a"]), "b": len(runs["b"])})
        for key, values in runs.items():
            spreads = [apart(values[0], v, key, key) for v in values[1:] if v[1].shape == values[0][1].shape]
            record.spread[key] = max((size for size, _, _ in spreads), default=0.0)
            record.spread_within_tolerance &= all(within for _, within, _ in spreads)
        for x in runs["a"]:
            for y in runs["b"]:
                if x[1].shape != y[1].shape:
                    continue
                size, within, m = apart(x, y, "a", "b")
                record.pairs += 1
                record.cross_identical &= m.identical
                record.cross_within_tolerance &= within
                record.cross_nonfinite |= bool(m.nan_mismatch or m.inf_mismatch)
                record.cross_max_abs = max(record.cross_max_abs, size)
                record.cross_closest = min(record.cross_closest, size)
        found[a_key] = record
    return found

