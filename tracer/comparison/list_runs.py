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
  the headline gave as the sides' noise, while its outputs matched as detections moved by 0;
* the replays of an origin that holds lists (:func:`companions` plans what they fetch with it,
  :func:`replayed_lists` matches them for :mod:`tracer.comparison.judge`), and diagnose's fetch-alone
  replays of every tensor (:func:`lists_of_values`).

Each is matched by :func:`~tracer.comparison.detection_lists.match_lists` and judged by the one rule
(:func:`~tracer.comparison.detections.detections_verdict`); :meth:`DetectionList.size` is the one
number a difference and a noise are compared by.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .detection_lists import ROW_KEEPING, DetectionList, ListMatch, list_tensors, match_lists, run_outputs
from .detections import DetectionSpec
from ..errors import TftraceError
from ..metrics import TensorMetrics, compare_arrays
from ..opgraph import OpGraph, tensor_op

__all__ = ["Naming", "PlainMatches", "lists_between", "lists_of_values", "companions", "replayed_lists",
           "plain_list", "outputs_apart", "judged_apart", "observed_detections"]


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


def lists_of_values(x: Mapping[str, Any], y: Mapping[str, Any], lists: Mapping[str, DetectionList],
                    outputs: Mapping[str, str], rtol: Callable[[str], float]) -> dict[str, DetectionList]:
    """The same for two runs given as values (``x``, ``y``: A's tensor name -> that run's value, B's
    re-keyed by A's names; ``outputs``: A's signature key -> A's output tensor): diagnose's fetch-alone
    replays, which hold the outputs among every other tensor."""
    found: dict[str, DetectionList] = {}
    for spec, members in _groups(lists):
        tensors = {role: outputs.get(key) for role, key in spec.keys.items()}
        matched = match_lists(spec, {role: x.get(t) for role, t in tensors.items() if t},
                              {role: y.get(t) for role, t in tensors.items() if t})
        if matched is None:
            continue
        for listed in members:
            if listed.tensor in x and listed.tensor in y:
                measured = matched.measure(listed.tensor, listed.output, x[listed.tensor], y[listed.tensor],
                                           rtol(listed.tensor))
                if measured is not None:
                    found[listed.tensor] = measured
    return found


def companions(graph: OpGraph, listed: DetectionList, lists: Mapping[str, DetectionList]) -> dict[str, str] | None:
    """Role -> A's tensor holding that role's list where the origin ``listed`` is born, for replaying it
    with the origin and matching the replays as detections; None where its rows are not born there.

    A list op that keeps its input's rows in place (:data:`ROW_KEEPING`: the outputs' Identities, a clip)
    is replayed fed A's captured rows on both sides, in A's order: its row k is the same detection on
    both, and index by index is between the same detections. The order is made where a list is born (the
    NMS op, the stack after a per-image NMS loop): there the other roles' lists are born too, each the one
    tensor of its role's lists that no row-keeping op makes (a role with none, or several, and the
    origin's rows cannot be paired: None). The count, one number per image and so no list, is where the
    walk up from its output through row-keeping ops ends; without one, a detection is a row of positive
    score, as where a group has no count."""
    spec = listed.spec
    if spec is None or listed.matched is None or graph.op_type(tensor_op(listed.tensor)) in ROW_KEEPING:
        return None
    found: dict[str, str] = {}
    for role, key in spec.keys.items():
        output = graph.outputs.get(key)
        if output is None:
            return None
        if role == "count":
            count = _born_count(graph, output)
            if count is not None:
                found[role] = count
            continue
        born = [t for t in list_tensors(graph, output) if t in lists and graph.op_type(tensor_op(t)) not in ROW_KEEPING]
        if len(born) != 1:
            return None
        found[role] = born[0]
    return found if listed.tensor in found.values() else None


def _born_count(graph: OpGraph, output: str) -> str | None:
    """The tensor an output of one number per image copies through row-keeping ops of one input, or None."""
    tensor = output
    for _ in range(len(graph)):
        op = tensor_op(tensor)
        if op not in graph:
            return None
        if graph.op_type(op) not in ROW_KEEPING:
            return tensor
        inputs = graph.data_inputs(op)
        if len(inputs) != 1:
            return None
        tensor = inputs[0]
    return None


def replayed_lists(detections: Mapping[str, Any], tensor: str, x: Mapping[str, Any], y: Mapping[str, Any]
                   ) -> DetectionList | None:
    """An origin's list ``tensor`` in two runs of it alone (A's and B's replays, or a side's capture and
    its replay) between the detections those runs matched: ``x``, ``y``: role -> that run's list where
    the origin is born (:func:`companions`), the origin's among them; ``detections``: the plan's record
    of them (``output``, ``box_format``, ``iou_threshold``). None where they cannot be matched so."""
    roles = tuple(r for r in ("boxes", "scores", "classes", "count") if r in x and r in y)
    spec = DetectionSpec({role: role for role in roles}, "option", str(detections["box_format"]),
                         iou_threshold=float(detections["iou_threshold"]))
    matched = match_lists(spec, x, y)
    own = next((role for role, r in detections["roles"].items() if r["a_tensor"] == tensor), None)
    if matched is None or own is None or own not in x or own not in y:
        return None
    return matched.measure(tensor, str(detections["output"]), x[own], y[own], 0.0)


class PlainMatches:
    """The plain runs' detections matched once per pair of runs and group of detections.

    Every output of a group (a detector's boxes, scores, classes and count) is measured between the same
    matched detections: matching them again for each output key repeated one match four times over for
    every pair of runs (each side's spread, then A against B over every pair). Keyed by the two runs (held
    here, so their ids stay theirs) and the group's keys, as :func:`lists_between` matches once per pair."""

    def __init__(self) -> None:
        self._found: dict[tuple[int, int, tuple[tuple[str, str], ...]], tuple[Any, Any, ListMatch | None]] = {}

    def between(self, spec: DetectionSpec, x: Any, y: Any, x_keys: Mapping[str, str] | None = None,
                y_keys: Mapping[str, str] | None = None) -> ListMatch | None:
        """``spec``'s detections in the plain runs of captures ``x`` and ``y`` (A's keys named in each
        through ``x_keys``/``y_keys``), matched image by image; None where they cannot be matched."""
        key = (id(x), id(y), tuple(sorted(spec.keys.items())))
        if key not in self._found:
            self._found[key] = (x, y, match_lists(spec, run_outputs(x, spec, x_keys, plain=True),
                                                  run_outputs(y, spec, y_keys, plain=True)))
        return self._found[key][2]


def plain_list(listed: DetectionList | None, x: Any, y: Any, vx: Any, vy: Any, rtol: float,
               x_keys: Mapping[str, str] | None = None, y_keys: Mapping[str, str] | None = None,
               matches: PlainMatches | None = None) -> DetectionList | None:
    """A detection output's plain values in two runs (``vx``, ``vy``: of captures ``x`` and ``y``, two
    runs of one side or a run of A and one of B) between the detections those plain runs matched, for
    an output A and B were measured on so (``listed``: its :class:`DetectionList`); None otherwise, and
    then it is read index by index. ``matches``: the matches already made, shared by the other outputs of
    the group (one match per pair of runs). On the H200 the fp32 detector's plain runs listed near-tied
    detections in either order from one process to the next: index by index the classes of A and B
    read 1 apart "in every pair of runs", beyond a noise that never re-ordered the same way, and the
    verdict was DIVERGED while its 80 matched detections agreed within the noise."""
    if listed is None or listed.spec is None or listed.matched is None:
        return None
    matched = (matches or PlainMatches()).between(listed.spec, x, y, x_keys, y_keys)
    return None if matched is None else matched.measure(listed.tensor, listed.output, vx, vy, rtol)


def outputs_apart(specs: Iterable[DetectionSpec], x: Mapping[str, Any], y: Mapping[str, Any]) -> dict[str, float]:
    """Signature key -> how far two runs' values of it are, for each output of a group of detections
    (``specs``) that both runs hold (``x``, ``y``: key -> that run's value, under the keys ``specs``
    name): :meth:`DetectionList.size` between the detections the two runs matched, so an output whose
    runs only list the same detections in another order is 0.0 apart, not a box off by its size; the
    index-by-index figure where a detection appeared, disappeared or changed class, or the output is no
    list (a count). Left out: a group not matchable as detections, an output shaped otherwise in the two
    runs or with NaN or Inf where the other has none, which have no such number. What the observer
    effect (a side's plain run against its instrumented run) measures a detector's outputs by: on the
    H200 it read 0.242 index by index for a pair whose matched detections agreed."""
    return {key: size for key, (size, _) in judged_apart(specs, x, y, 0.0, 0.0).items()}


def judged_apart(specs: Iterable[DetectionSpec], x: Mapping[str, Any], y: Mapping[str, Any], atol: float,
                 rtol: float) -> dict[str, tuple[float, str]]:
    """Signature key -> (how far apart, as :func:`outputs_apart` says; ``identical``,
    ``within_tolerance`` or ``diverged``) for the outputs :func:`outputs_apart` measures, from one
    match of the two runs' detections. The verdict is the compare's for a list between matched
    detections (:meth:`DetectionList.verdict`: a detection that appeared, disappeared or changed class
    is beyond tolerance), index by index where the output is no list. diagnose's same-process repeat
    and observation experiments judge a detector's outputs so, not row by row."""
    judged: dict[str, tuple[float, str]] = {}
    for key, (m, listed) in _measured_apart(specs, x, y, rtol).items():
        size = listed.size(m) if listed is not None else 0.0 if m.identical else m.max_abs
        verdict = listed.verdict(m, atol, rtol) if listed is not None else None
        judged[key] = (size, verdict or ("identical" if m.identical else
                                         "within_tolerance" if m.within(atol, rtol) else "diverged"))
    return judged


def _measured_apart(specs: Iterable[DetectionSpec], x: Mapping[str, Any], y: Mapping[str, Any], rtol: float
                    ) -> dict[str, tuple[TensorMetrics, DetectionList | None]]:
    """Key -> (its index-by-index metrics, its list between matched detections or None where it is no
    list), for the outputs :func:`outputs_apart` describes."""
    found: dict[str, tuple[TensorMetrics, DetectionList | None]] = {}
    for spec in specs:
        matched = match_lists(spec, {role: x.get(key) for role, key in spec.keys.items()},
                              {role: y.get(key) for role, key in spec.keys.items()})
        if matched is None:
            continue
        for key in spec.outputs():
            if x.get(key) is None or y.get(key) is None:
                continue
            vx, vy = np.asarray(x[key]), np.asarray(y[key])
            if vx.shape != vy.shape:
                continue
            m = compare_arrays(vx, vy, rtols=(rtol,) if rtol else ())
            if m.nan_mismatch or m.inf_mismatch:
                continue
            found[key] = (m, matched.measure(key, key, vx, vy, rtol))
    return found


def observed_detections(capture: Any, specs: Iterable[DetectionSpec], keys: Mapping[str, str] | None = None
                        ) -> dict[str, float]:
    """The observer effect on a detector's outputs: the capture's own signature key -> how far its plain
    run's value is from its instrumented run's (:func:`outputs_apart`, between the detections the two
    runs matched), for each output of ``specs`` (A's keys; ``keys``: A's key -> this capture's, ``--map``)
    whose plain and captured values the capture holds. Fetching every tensor can move near-tied scores
    and NMS then lists them in another order: index by index (the manifest's ``outputs_max_abs_diff``,
    made in the capture child, which knows no groups of detections) that reads as a box off by its size.
    Empty when the two runs agreed bit for bit."""
    if capture.observer.outputs_identical:
        return {}
    specs = list(specs)
    own = {key: (keys or {}).get(key, key) for spec in specs for key in spec.outputs()}
    plain: dict[str, Any] = {}
    observed: dict[str, Any] = {}
    for key, mine in own.items():
        tensor, stored = capture.outputs.get(mine), capture.plain_output(mine)
        if tensor is None or stored is None or not capture.has(tensor):
            continue
        try:
            observed[key] = capture.tensor(tensor)
        except TftraceError:
            continue
        plain[key] = stored
    return {own[key]: size for key, size in outputs_apart(specs, plain, observed).items()}
