"""Detection lists between runs other than A's and B's captured ones, measured as A's and B's are.

A tensor that holds a detector's lists of detections is judged between the detections A's and B's
outputs matched (:mod:`tracer.comparison.detection_lists`): NMS lists two near-tied detections in either
order, and row k against row k then reads as a box off by its size. Whatever such a difference is held
against has to be measured the same way, or the re-ordering comes back on the other side of the
comparison:

* the run-to-run noise of a side (two runs of it) and the closest A and B come over every pair of runs
  (:mod:`tracer.comparison.noise`). On the H200 the fp32 detector's lists came out in another order
  between two processes of one side (near-tied scores, autotuned convolutions): read index by index
  that was noise of 0.402 on A and 0.551 on B, which every list's difference was judged against and
  the headline gave as the sides' noise, while its outputs matched as detections moved by 0.

Each is matched by :func:`~tracer.comparison.detection_lists.match_lists` and judged by the one rule
(:func:`~tracer.comparison.detections.detections_verdict`); :meth:`DetectionList.size` is the one
number a difference and a noise are compared by.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .detection_lists import DetectionList, match_lists, run_outputs
from .detections import DetectionSpec
from ..errors import TftraceError

__all__ = ["Naming", "lists_between"]


@dataclass(frozen=True)
class Naming:
    """How one run names A's tensors and signature keys: A's own runs as they are, B's through the
    alignment (``tensors``) and ``--map`` (``keys``)."""

    tensors: Mapping[str, str] | None = None  # A's tensor -> this run's; None: A's own names
    keys: Mapping[str, str] = field(default_factory=dict)  # A's signature key -> this run's, where renamed

    def tensor(self, a_tensor: str) -> str | None:
        return a_tensor if self.tensors is None else self.tensors.get(a_tensor)


def _groups(lists: Mapping[str, DetectionList]) -> Iterable[tuple[DetectionSpec, list[DetectionList]]]:
    """The lists A and B were measured between matched detections, by their group of detections: the
    others were judged index by index, and so is whatever they are held against."""
    found: dict[tuple[str, ...], list[DetectionList]] = {}
    for listed in lists.values():
        if listed.spec is not None and listed.matched is not None:
            found.setdefault(listed.group, []).append(listed)
    return ((members[0].spec, members) for members in found.values() if members[0].spec is not None)


def lists_between(x: Any, y: Any, lists: Mapping[str, DetectionList], rtol: Callable[[str], float],
                  x_names: Naming = Naming(), y_names: Naming = Naming()) -> dict[str, DetectionList]:
    """A's list tensor -> its lists in captures ``x`` and ``y`` (two runs of one side, or a run of A and
    one of B) between the detections those runs' outputs matched, for every tensor of ``lists`` (A's and
    B's) measured so; ``rtol``: A's tensor -> its rtol. A tensor either run lacks is left out."""
    found: dict[str, DetectionList] = {}
    for spec, members in _groups(lists):
        matched = match_lists(spec, run_outputs(x, spec, x_names.keys), run_outputs(y, spec, y_names.keys))
        if matched is None:
            continue
        for listed in members:
            tx, ty = x_names.tensor(listed.tensor), y_names.tensor(listed.tensor)
            if tx is None or ty is None or not x.has(tx) or not y.has(ty):
                continue
            try:
                vx, vy = x.tensor(tx), y.tensor(ty)
            except TftraceError:
                continue
            measured = matched.measure(listed.tensor, listed.output, vx, vy, rtol(listed.tensor))
            if measured is not None:
                found[listed.tensor] = measured
    return found
