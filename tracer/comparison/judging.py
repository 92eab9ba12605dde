"""Judging a comparison: classifying its ops, replaying the origins alone, and measuring each
side's own noise where it is asked for or a replay shows it is needed, then judging again
(:meth:`Judging.run`). Called by :mod:`tracer.comparison.pipeline` once both sides are captured
and compared tensor by tensor.

Every child it needs is started as early as what it needs is known: the first noise repeat while
the captures are compared (:func:`~tracer.comparison.noise.first_repeat_child`, started by the
pipeline), each later repeat while the one before captures, A's replay child while the last repeat
captures, and B's while A's replays run (:mod:`tracer.comparison.isolate`). The children started
ahead of this stage are held by the pipeline's :class:`~tracer.captures.launcher.ChildrenAhead`,
which stops each one whose job never comes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from ..captures.launcher import ChildrenAhead, isolation_ahead
from ..captures.reader import Capture
from ..metrics import TensorMetrics
from ..runspec import Side
from ..safewrite import claim
from .align import Alignment, CaptureView
from .detection_lists import DetectionList
from .divergence import Divergence, Tolerance, classify
from .isolate import (IsolationResult, isolate_origins, judge_again, load_state_variables, replay_side,
                      replays_local, weights_set_at_load)
from .noise import Noise, RepeatPlan, measure_noise, plan_more
from .pairing import is_capture
from .replay_choice import first_unshared_norm, to_isolate

__all__ = ["Judging"]

MORE_RUNS = 2  # the further runs of a side whose replay moved where its runs repeated themselves
# the isolation verdicts a replay that moved from its capture may owe to run-to-run noise
_NOISE_MAY_EXPLAIN = frozenset({"own_error", "nondeterministic", "not_reproduced", "inherited"})


@dataclass
class Judging:
    """Classifying the ops, replaying the origins alone and measuring the sides' own noise where a
    replay shows it is needed, then judging again with it (:meth:`run`)."""

    targets: dict[str, str | Side]
    captures: dict[str, Capture]
    views: tuple[CaptureView, CaptureView]
    alignment: Alignment
    metrics: dict[str, TensorMetrics]
    tolerance: Tolerance
    out: Path
    console: Console
    signature_map: dict[str, str]
    permits: dict[str, bool]
    lists: dict[str, DetectionList] = field(default_factory=dict)  # judged between matched detections
    plan: RepeatPlan = field(default_factory=lambda: RepeatPlan({}, [], []))  # the noise's runs (noise.plan_repeats)
    # the children started ahead: "first_repeat" by the pipeline, "replay_a" here; its owner stops them
    ahead: ChildrenAhead = field(default_factory=ChildrenAhead)
    noise: Noise = field(default_factory=Noise)
    loaded: set[str] = field(default_factory=set)  # variables whose value is set anew at each load

    def run(self, repeat: int | None, isolate: int) -> tuple[Divergence, dict[str, IsolationResult], Noise]:
        plan = self.plan
        if plan.runs:
            self.noise = measure_noise(plan, self.captures, self.alignment, self.out, self.console,
                                       self.signature_map, self.tolerance, lists=self.lists,
                                       first=self.ahead.take("first_repeat"), then=self._replays_ahead(isolate))
        self.noise.not_measured = list(plan.unmeasured)
        at_load = weights_set_at_load(self.noise.per_tensor, self.views[0].graph)  # moved in the repeats
        divergence, isolation = self._classify_and_isolate(isolate, at_load)
        self.loaded = load_state_variables(isolation, self.views[0].graph) | at_load
        stale = bool(self.loaded)  # the variables drawn at load are within the noise: classify again with them
        while True:  # measure more where a replay shows the noise measured so far is not enough, then judge again
            moved = self._can_measure(_replays_that_moved(isolation, self.noise), repeat)
            missed = {} if repeat is not None else _repeats_that_missed(isolation, self.noise, self.alignment)
            if not moved and not missed:
                break
            runs = {key: 2 for key in moved} | {key: len(self.noise.runs[key]) + MORE_RUNS for key in missed}
            more = plan_more(self.targets, self.captures, runs, self.noise.runs, moved | missed)
            known = dict(self.noise.per_tensor)
            self.noise = measure_noise(more, self.captures, self.alignment, self.out, self.console, self.signature_map,
                                       self.tolerance, earlier=self.noise, lists=self.lists)
            if not moved and self.noise.per_tensor == known:  # the further runs moved nothing either
                stale = True  # the pairs of runs changed: classify again
                isolation = self._judged_again(missed, isolation)
                break
            earlier = isolation
            divergence, isolation = self._classify_and_isolate(isolate, self.loaded)
            stale = False
            # a variable set anew at each load is within the noise, by its replay's measurement, and so no
            # origin to replay again: its first replay's finding (load_state) stays, and with it no const_changed
            isolation = {**{n: r for n, r in earlier.items() if r.load_state}, **isolation}
            self.loaded |= load_state_variables(isolation, self.views[0].graph)
        if stale:
            divergence = self._classify(self.loaded)
        return divergence, isolation, self.noise

    def _judged_again(self, missed: dict[str, str], isolation: dict[str, IsolationResult]
                      ) -> dict[str, IsolationResult]:
        """The replays already made, judged again knowing that the ``missed`` sides' further whole runs
        repeated their origins bit for bit, where each one's replay had moved (no replay runs again)."""
        repeated = {name: tuple(side for side in (iso.replay_moved or ()) if side in missed)
                    for name, iso in isolation.items()}
        if not any(repeated.values()):
            return isolation
        return {**isolation, **judge_again(str(self.out / "work"), repeated, self.captures["b"])}

    def _can_measure(self, moved: dict[str, str], repeat: int | None) -> dict[str, str]:
        """``moved`` less the sides that cannot be run again here (a capture directory) or that
        ``--repeat`` was told not to repeat: those are named in the noise's ``not_measured``."""
        for key in [key for key in moved if repeat is not None or is_capture(self.targets[key])]:
            because = ("it was given as a capture directory, which cannot be re-run here" if is_capture(self.targets[key])
                       else f"`--repeat {repeat}` did not repeat it")
            if all(u["side"] != key for u in self.noise.not_measured):
                self.noise.not_measured.append({"side": key, "why": f"{moved[key]}, and {because}"})
        return {key: why for key, why in moved.items() if repeat is None and not is_capture(self.targets[key])}

    def _classify(self, drawn_at_load: frozenset[str] | set[str] = frozenset()) -> Divergence:
        self.noise.judge_pairs(self.alignment, self.metrics, self.tolerance, self.lists, self.signature_map)
        return classify(self.views[0].graph, self.alignment, self.metrics, self.tolerance, self.noise.per_tensor,
                        self.noise.closest, drawn_at_load, self.lists)

    def _classify_and_isolate(self, isolate: int, drawn_at_load: frozenset[str] | set[str] = frozenset()
                              ) -> tuple[Divergence, dict[str, IsolationResult]]:
        found = self._classify(drawn_at_load)
        top = to_isolate(found, isolate, first_unshared_norm(found, self.alignment, *self.views) if isolate else None)
        if not top:
            return found, {}
        claim(self.out, ["work"])
        return found, isolate_origins(top, self.alignment, *self.views, str(self.out / "work"), self.console,
                                      allow_unsafe_ops=self.permits, repeat_noise=self.noise.known(self.alignment),
                                      lists=self.lists, first=self.ahead.take("replay_a"))  # once: a round later starts its own

    def _replays_ahead(self, isolate: int) -> Callable[[int], None] | None:
        """Where replays are likely (isolation asked for, some tensor differs, A's model is here), A's
        replay child is started once the last noise repeat's child is up: it loads its model while that
        repeat captures and the noise is read, not after (40 s for the 35,000-op stand-in on the H200)."""
        if not isolate or not replays_local(self.views[0]) or all(m.identical for m in self.metrics.values()):
            return None

        def start(beside: int) -> None:
            self.ahead.hold("replay_a", isolation_ahead(replay_side(self.captures["a"], self.permits["a"]), beside))
        return start


def _repeats_that_missed(isolation: dict[str, IsolationResult], noise: Noise, alignment: Alignment
                         ) -> dict[str, str]:
    """Side -> why it is run :data:`MORE_RUNS` more times: its runs repeated an origin bit for bit
    (no run of either side moved it), yet its replay of that origin, in one more process, differed
    from its capture. The runs were then too few to show how the side moves (run s on the H200: B's
    two runs picked the same cuDNN kernels, its replay another). Once: a side with more than two runs
    is judged on them. Verdicts that explain a moved replay otherwise (a variable the runs write or
    that is drawn at load, a rewrite at run time) ask for nothing."""
    found: dict[str, str] = {}
    for name, iso in isolation.items():
        node = alignment.nodes.get(name)
        if iso.verdict not in _NOISE_MAY_EXPLAIN or iso.load_state or node is None or iso.noise_max_abs is None:
            continue
        if any(noise.per_tensor.get(pair.a, 0.0) > 0 for pair in node.tensors if pair.a):
            continue
        for side in iso.replay_moved or ():
            runs = len(noise.runs.get(side) or ())
            if side not in found and noise.measured(side) and runs == 2:
                found[side] = (f"its {runs} runs repeated `{name}` bit for bit, but its replay of it in one more "
                               f"process differed from its capture by up to {iso.noise_max_abs:.3g}")
    return found


def _replays_that_moved(isolation: dict[str, IsolationResult], noise: Noise) -> dict[str, str]:
    """Side -> why its noise is to be measured now: its replay of an origin differed from its own
    capture (the run may not repeat itself), and its noise is not measured yet."""
    found: dict[str, str] = {}
    for name, iso in isolation.items():
        for side in iso.replay_moved or ():
            if side not in found and not noise.measured(side):
                found[side] = (f"its replay of `{name}` differed from its own capture by up to "
                               f"{iso.noise_max_abs:.3g}")
    return found
