"""Judging a comparison: classifying its ops, replaying the origins alone, and measuring each
side's own noise where it is asked for or a replay shows it is needed, then judging again
(:meth:`Judging.run`). Called by :mod:`tracer.comparison.pipeline` once both sides are captured
and compared tensor by tensor.

Every child it needs is started as early as what it needs is known, and stopped if its job never
comes: the first noise repeat while the captures are compared (:func:`~tracer.comparison.noise.first_repeat_loading`,
the pipeline's), each later repeat while the one before captures, A's replay child while the last
repeat captures, and B's while A's replays run (:mod:`tracer.comparison.isolate`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from ..captures.launcher import PreparedChild, isolation_ahead
from ..captures.reader import Capture
from ..metrics import TensorMetrics
from ..runspec import Side
from ..safewrite import claim
from .align import Alignment, CaptureView
from .detection_lists import DetectionList
from .divergence import Divergence, Tolerance, classify
from .isolate import (IsolationResult, isolate_origins, load_state_variables, replay_side, replays_local,
                      weights_set_at_load)
from .noise import NONDETERMINISTIC_GPU, Noise, measure_noise, sides_to_repeat
from .pairing import is_capture
from .replay_choice import first_unshared_norm, to_isolate

__all__ = ["Judging"]


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
    noise: Noise = field(default_factory=Noise)
    loaded: set[str] = field(default_factory=set)  # variables whose value is set anew at each load
    first_repeat: PreparedChild | None = None  # the first noise repeat's child, loading since the captures
    replay_ahead: PreparedChild | None = None  # A's replay child, loading since the last noise repeat began

    def run(self, repeat: int | None, isolate: int) -> tuple[Divergence, dict[str, IsolationResult], Noise]:
        try:
            return self._run(repeat, isolate)
        finally:
            if self.replay_ahead is not None:
                self.replay_ahead.cancel()  # no origin to replay, or an error: nothing is left running
                self.replay_ahead = None

    def _run(self, repeat: int | None, isolate: int) -> tuple[Divergence, dict[str, IsolationResult], Noise]:
        runs, unmeasured = sides_to_repeat(self.targets, self.captures, repeat)
        why = {u["side"]: "" for u in unmeasured} | {key: ("`--repeat`" if repeat is not None else
                                                           f"side {key.upper()} {NONDETERMINISTIC_GPU}") for key in runs}
        if runs:
            self.noise = measure_noise(self.targets, self.captures, self.alignment, self.out, runs, self.console,
                                       self.signature_map, self.tolerance, why, lists=self.lists,
                                       first=self.first_repeat, then=self._replays_ahead(isolate))
        self.noise.not_measured = unmeasured
        at_load = weights_set_at_load(self.noise.per_tensor, self.views[0].graph)  # moved in the repeats
        divergence, isolation = self._classify_and_isolate(isolate, at_load)
        moved = _replays_that_moved(isolation, self.noise)
        for key in [key for key in moved if repeat is not None or is_capture(self.targets[key])]:
            because = ("it was given as a capture directory, which cannot be re-run here" if is_capture(self.targets[key])
                       else f"`--repeat {repeat}` did not repeat it")
            if all(u["side"] != key for u in self.noise.not_measured):
                self.noise.not_measured.append({"side": key, "why": f"{moved[key]}, and {because}"})
            del moved[key]
        self.loaded = load_state_variables(isolation, self.views[0].graph) | at_load
        if moved:  # a side's replay differed from its own capture: measure that side's noise, then judge again
            self.noise = measure_noise(self.targets, self.captures, self.alignment, self.out, {key: 2 for key in moved},
                                       self.console, self.signature_map, self.tolerance, moved, earlier=self.noise,
                                       lists=self.lists)
            first_isolation = isolation
            divergence, isolation = self._classify_and_isolate(isolate, self.loaded)
            # a variable set anew at each load is within the noise, by its replay's measurement, and so no
            # origin to replay again: its first replay's finding (load_state) stays, and with it no const_changed
            isolation = {**{n: r for n, r in first_isolation.items() if r.load_state}, **isolation}
            self.loaded |= load_state_variables(isolation, self.views[0].graph)
        elif self.loaded:  # the noise was measured before (--repeat): judge again, keeping what was replayed
            divergence = self._classify(self.loaded)
        return divergence, isolation, self.noise

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
        first, self.replay_ahead = self.replay_ahead, None  # used once: a second round starts its own
        try:
            return found, isolate_origins(top, self.alignment, *self.views, str(self.out / "work"), self.console,
                                          allow_unsafe_ops=self.permits, repeat_noise=self.noise.known(self.alignment),
                                          lists=self.lists, first=first)
        finally:
            if first is not None:
                first.cancel()  # A's replays are over, or never ran (no model here): nothing is left running

    def _replays_ahead(self, isolate: int) -> Callable[[int], None] | None:
        """Where replays are likely (isolation asked for, some tensor differs, A's model is here), A's
        replay child is started once the last noise repeat's child is up: it loads its model while that
        repeat captures and the noise is read, not after (40 s for the 35,000-op stand-in on the H200)."""
        if not isolate or not replays_local(self.views[0]) or all(m.identical for m in self.metrics.values()):
            return None

        def start(beside: int) -> None:
            self.replay_ahead = isolation_ahead(replay_side(self.captures["a"], self.permits["a"]), beside)
        return start


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
