"""diagnose's captures: each distinct run captured once, the next ones' children loading ahead."""

from __future__ import annotations

import os
import re
from pathlib import Path

from rich.console import Console

from ..captures.inputs import ONE_ARRAY_REFUSAL
from ..captures.launcher import PREPARE_HEADROOM, PreparedChild, capture as capture_side, children_that_fit
from ..captures.reader import Capture
from ..errors import TftraceError
from ..runspec import Side
from .plan import Run

__all__ = ["Captures", "captures_ahead", "held_whole", "MAX_AHEAD", "PREPARE_HEADROOM"]

MAX_AHEAD = 4  # capture children loading their model while another captures


class Captures:
    """Each distinct run captured once, in ``DIR/captures/NN_<what>``.

    Captures run one at a time, but most of a capture child's life is importing TensorFlow and
    loading the model (65% of a GPU diagnose's process-seconds on the H200). So the children of
    the next runs (:meth:`expect`) are started ahead, up to ``ahead`` of them, and load while the
    run at hand is captured; each gets its job when its turn comes. Nothing is timed from a
    capture (costs are timed again, alone: :mod:`tracer.diagnosis.costs`), so the overlap changes
    no answer; only one child at a time runs its model.
    """

    def __init__(self, root: Path, quiet: Console, ahead: int = 0) -> None:
        self.root, self.quiet, self.ahead = root, quiet, ahead
        self.done: dict[str, Capture] = {}
        self._upcoming: list[Run] = []  # the runs expected next, in order
        self._loading: dict[str, PreparedChild] = {}  # run key -> its child, started ahead

    def load_ahead(self, count: int) -> None:
        """From the next :meth:`get` on, let up to ``count`` children load ahead. diagnose decides
        it once the base side is captured: how many fit in memory depends on that model's weights."""
        self.ahead = count

    def has(self, run: Run) -> bool:
        return run.key() in self.done

    def expect(self, runs: list[Run]) -> None:
        """The runs to be asked for next, in this order (a run asked for out of turn is still
        captured). A child loading for a run no longer expected (the stage before asked for it
        no more) is stopped, so that it neither waits to the end nor takes a place ahead."""
        self._upcoming = [r for r in runs if not self.has(r)]
        expected = {r.key() for r in self._upcoming}
        for key in [key for key in self._loading if key not in expected]:
            self._loading.pop(key).cancel()

    def get(self, run: Run) -> Capture:
        key = run.key()
        if key not in self.done:
            self._upcoming = [r for r in self._upcoming if r.key() != key]
            child = self._loading.pop(key, None)
            self._start_ahead()
            slug = re.sub(r"[^A-Za-z0-9]+", "_", run.describe).strip("_")[:60] or "side"
            path = self.root / f"{len(self.done):02d}_{slug}"
            try:
                self.done[key] = capture_side(run.side, path, force=True, console=self.quiet, prepared=child)
            except TftraceError as exc:
                other = self._takes_other_inputs(exc, run)
                if other is None:
                    raise
                raise other from exc
        return self.done[key]

    def _takes_other_inputs(self, refusal: TftraceError, run: Run) -> TftraceError | None:
        """The error for a run that refused, as a signature of several inputs, the one array (a
        plain ``.npy``) the base side took: another artifact (``--savedmodel``) that takes other
        inputs than the model. No inputs file feeds both, since every run gets the same examples."""
        refused = ONE_ARRAY_REFUSAL.search(refusal.problem)
        base = next(iter(self.done.values()), None)
        if refused is None or base is None or len(base.inputs) != 1:
            return None
        count, keys = refused.groups()
        return TftraceError(
            f"the --savedmodel {run.side.artifact.path} has {count} inputs ({keys}) and the model one "
            f"({next(iter(base.inputs))}), and diagnose runs both on the same examples",
            "give --savedmodel the SavedModel exported from MODEL, which takes the model's inputs; no --inputs file "
            "feeds one array to one and several to the other")

    def _start_ahead(self) -> None:
        for run in self._upcoming:
            if len(self._loading) >= self.ahead:
                return
            key = run.key()
            if key not in self._loading and key not in self.done:
                try:
                    self._loading[key] = PreparedChild(run.side, prepare=True)
                except (OSError, TftraceError):
                    continue  # said when that run is asked for, as its own capture's error, not this one's

    def close(self) -> None:
        """Stop the children started ahead for runs never asked for (an error, a refused run)."""
        for child in self._loading.values():
            child.cancel()
        self._loading.clear()

    def __enter__(self) -> Captures:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def captures_ahead(side: Side, cpus: int | None = None, available: int | None = None,
                   per_child: int = PREPARE_HEADROOM) -> int:
    """How many capture children may load ahead of the one at work: one per four cores (at
    least one where there are two), at most :data:`MAX_AHEAD`, and only as many as memory
    holds, each counted at ``per_child`` bytes beside the working child's --max-memory and
    :data:`PREPARE_HEADROOM`."""
    cpus = (os.cpu_count() or 1) if cpus is None else cpus
    by_cores = 0 if cpus < 2 else max(1, min(MAX_AHEAD, cpus // 4))
    return min(by_cores, children_that_fit(per_child, side.max_memory, available))


def held_whole(capture: Capture) -> int:
    """The bytes of a capture's tensors that do not grow with the batch (the weights, mostly):
    what a child that has loaded the model holds before it runs, beyond TensorFlow itself. A
    weight and its read both count, so this errs high."""
    layout = capture.tensor_layout
    return sum(int(capture.record(name).get("size_bytes") or 0) for name in capture.tensor_names
               if layout.get(name) != "rows")
