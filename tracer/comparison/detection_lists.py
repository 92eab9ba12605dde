"""Intermediate tensors that are lists of detections, measured as the detections are.

A detector's outputs after non-max suppression are lists: row k is the k-th best detection of its
image, and :mod:`tracer.comparison.detections` matches them between the sides instead of reading
them index by index. The tensors inside the graph that hold those very rows carry the same lists:
the stack after the per-image NMS loop (``TensorListStack``, a TF1 ``TensorArrayGatherV3``), the
clip of a ``tf.cond`` that follows it, the ``Identity`` that names the output. Compared index by
index they show what the outputs would: two detections whose scores swapped read as a box off by
its whole size (0.359 on the fp16 detector, whose matched boxes moved by 3.46e-05).

A tensor holds a detection list when its rows are an output's rows: it is that output, or it
reaches it through ops that keep every row where it is (:data:`ROW_KEEPING`: identities, casts,
elementwise arithmetic and clips, a cond's branches), and it has the output's ``[images,
detections]`` leading shape on both sides. The walk stops at any other op, so a tensor before the
NMS (in the anchors' order) is never one. Each such tensor is measured between the detections the
outputs' matching paired, per image (as a per-detection output is), and judged by the rule that judges
the outputs (:func:`tracer.comparison.detections.detections_verdict`): a detection that appeared,
disappeared or changed class is beyond tolerance whatever its rows measure. That judgement is the op's
(:func:`tracer.comparison.divergence.classify`): its status, its colour in the graph, whether it can be
the first divergence. The index-by-index figure stays in its report entry only as such.

The same matching measures those tensors between any two runs (:func:`match_lists`, :class:`ListMatch`),
so that whatever a list is held against is measured as the list is: two runs of one side (its run-to-run
noise), A's and B's replays of an origin alone, their fetch-alone replays in ``diagnose``
(:mod:`tracer.comparison.list_runs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .align import Alignment, CaptureView
from .detections import (DetectionSpec, Detections, ImageMatch, detections_verdict, match_image, matched_rows,
                         recognise, valid_detections)
from ..errors import TftraceError
from ..metrics import TensorMetrics
from ..opgraph import OpGraph, tensor_op

__all__ = ["ROW_KEEPING", "DetectionList", "ListMatch", "list_tensors", "match_lists", "measure_detection_lists",
           "run_outputs"]

# Ops whose output keeps the rows of its [images, detections, ...] input where they are.
ROW_KEEPING = frozenset({
    "Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient", "CheckNumerics", "EnsureShape", "Cast",
    "ClipByValue", "Minimum", "Maximum", "Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "Neg", "Abs",
    "Round", "Floor", "Ceil", "Sigmoid", "Relu", "Select", "SelectV2",
    "Switch", "RefSwitch", "Merge", "RefMerge", "If", "StatelessIf",
})

PerImage = list[tuple[Detections, Detections, ImageMatch]]


@dataclass(frozen=True)
class DetectionList:
    """A tensor that holds a detector's lists of detections, measured between the matched detections of
    two runs: A's and B's (the op's judgement), or two runs of one side (its run-to-run noise)."""

    tensor: str  # A's name of it
    output: str  # the signature key (A's) whose rows it holds
    matched: TensorMetrics | None  # one run's rows of matched detections against the other's; None: ``why``
    changes: int  # detections of its group that changed class, disappeared or appeared
    spec: DetectionSpec | None = None  # the group of detections whose rows it holds (A's keys)
    why: str | None = None

    @property
    def group(self) -> tuple[str, ...]:
        """The signature keys (A's) of its group of detections."""
        return tuple(self.spec.outputs()) if self.spec is not None else (self.output,)

    def verdict(self, index: TensorMetrics, atol: float, rtol: float) -> str | None:
        """``identical``, ``within_tolerance`` or ``diverged`` by :func:`detections_verdict` (``index``:
        its index-by-index metrics, which say only whether it is bitwise equal); None when it was not
        measurable, and is then judged index by index."""
        if self.matched is None:
            return None
        return detections_verdict(index.identical, self.changes, self.matched.within(atol, rtol))

    def within(self, index: TensorMetrics, atol: float, rtol: float) -> bool:
        """Within tolerance as :meth:`verdict` judges it (identical included), else index by index."""
        judged = self.verdict(index, atol, rtol)
        return index.within(atol, rtol) if judged is None else judged != "diverged"

    def size(self, index: TensorMetrics) -> float:
        """How far apart the two runs' lists are, as one number a run-to-run noise can be held against
        (both measured so): the largest difference between matched detections, 0.0 for lists that only
        order the same detections otherwise. Where a detection appeared, disappeared or changed class, or
        the rows could not be paired, no matching measures the change, and the index-by-index figure
        (``index``: row k against row k) stands for it."""
        if index.identical:
            return 0.0
        if self.matched is None or self.changes:
            return index.max_abs
        return 0.0 if self.matched.identical else self.matched.max_abs

    def to_json(self) -> dict[str, Any]:
        """The report's ``detection_list`` of its op."""
        return {"output": self.output, "measured": "index_by_index" if self.matched is None else "matched_detections",
                "matched_rows": None if self.matched is None else int(self.matched.shape[0]), "changes": self.changes,
                "why": self.why}


@dataclass(frozen=True)
class ListMatch:
    """One group's detections matched between two runs, image by image (each run's detections and their
    match, as :func:`~tracer.comparison.detections.compare_detections` makes it), and the ``[images,
    detections]`` shape of its lists: what measures every tensor holding those lists between the runs."""

    spec: DetectionSpec
    per_image: PerImage
    shape: tuple[int, int]

    @property
    def changes(self) -> int:
        """Detections that changed class, disappeared or appeared between the two runs."""
        return sum(match.changes for _dx, _dy, match in self.per_image)

    def measure(self, tensor: str, key: str, vx: Any, vy: Any, rtol: float) -> DetectionList | None:
        """One list tensor's two values (``tensor``: A's name of it, holding the rows of output ``key``)
        between matched detections; None when they are not shaped as the output's lists on both runs
        (then it is no list, and stays measured index by index)."""
        vx, vy = np.asarray(vx), np.asarray(vy)
        if vx.ndim < 2 or vy.ndim < 2 or vx.shape[:2] != self.shape or vy.shape[:2] != self.shape \
                or vx.shape[2:] != vy.shape[2:]:
            return None
        if vx.dtype.kind not in "biuf" or vy.dtype.kind not in "biuf":
            return None
        rows = matched_rows(vx, vy, self.per_image)
        if rows is None:
            return DetectionList(tensor, key, None, self.changes, self.spec,
                                 "its rows could not be paired as the detections were")
        return DetectionList(tensor, key, rows.compare(rtol), self.changes, self.spec)


def match_lists(spec: DetectionSpec, x: Mapping[str, Any], y: Mapping[str, Any]) -> ListMatch | None:
    """``spec``'s detections of two runs matched image by image (``x``, ``y``: role -> that run's output,
    None where it has none); None when they cannot be read or are not shaped as detections."""
    if any(x.get(role) is None or y.get(role) is None for role in spec.keys):
        return None
    arrays = [{role: np.asarray(run[role]) for role in spec.keys} for run in (x, y)]
    boxes_x, boxes_y = arrays[0]["boxes"], arrays[1]["boxes"]
    if boxes_x.ndim != 3 or boxes_x.shape != boxes_y.shape:
        return None
    try:
        per_image = []
        for image in range(boxes_x.shape[0]):
            dx, dy = valid_detections(arrays[0], image), valid_detections(arrays[1], image)
            per_image.append((dx, dy, match_image(dx, dy, spec.box_format, spec.iou_threshold)[0]))
    except (IndexError, ValueError):
        return None
    return ListMatch(spec, per_image, (int(boxes_x.shape[0]), int(boxes_x.shape[1])))


def run_outputs(capture: Any, spec: DetectionSpec, keys: Mapping[str, str] | None = None, *, plain: bool = False
                ) -> dict[str, Any]:
    """Role -> the group's output as one run computed it; None where it has none. By default its
    instrumented run (the run its intermediates come from, whose lists they are matched by), else its
    plain run; ``plain``: its plain run alone (the signature's outputs fetched, as in production), which
    the plain outputs are matched by. One reader for both, so the two never read a key differently.
    ``keys``: A's signature key -> this run's (``--map``); the key is looked up in the capture's own
    manifest, which the signature map never renames."""
    found = {}
    for role, key in spec.keys.items():
        own = (keys or {}).get(key, key)
        value = None
        tensor = None if plain else capture.outputs.get(own)
        if tensor is not None and capture.has(tensor):
            try:
                value = np.asarray(capture.tensor(tensor))
            except TftraceError:
                value = None
        if value is None:
            stored = capture.plain_output(own)
            value = None if stored is None else np.asarray(stored)
        found[role] = value
    return found


def list_tensors(graph: OpGraph, output: str) -> list[str]:
    """A's tensors whose rows are those of output tensor ``output``: it, and what reaches it through
    :data:`ROW_KEEPING` ops (inputs of rank 2 or more, or unknown: a scalar bound of a clip is not
    a list). Shapes are checked against the values when measured."""
    found: list[str] = []
    stack = [output]
    while stack:
        tensor = stack.pop()
        if tensor in found or tensor_op(tensor) not in graph:
            continue
        found.append(tensor)
        op = tensor_op(tensor)
        if graph.op_type(op) in ROW_KEEPING:
            stack.extend(t for t in graph.data_inputs(op) if _may_be_a_list(graph, t))
    return found


def _may_be_a_list(graph: OpGraph, tensor: str) -> bool:
    try:
        shape = graph.output_info(tensor).get("shape")
    except (IndexError, KeyError):
        return False
    return shape is None or len(shape) >= 2


def measure_detection_lists(view_a: CaptureView, view_b: CaptureView, alignment: Alignment, tolerance: Any,
                            groups: list[dict[str, Any]], signature_map: Mapping[str, str],
                            given: Mapping[str, Any] | None = None) -> dict[str, DetectionList]:
    """A's tensor -> its :class:`DetectionList`, for every compared tensor that holds a detection
    list of a group the outputs' matching compared (``groups``: report.json's ``detections``).
    ``tolerance`` (a :class:`~tracer.comparison.divergence.Tolerance`): each tensor's rtol, for which
    its matched rows' metrics answer ``within`` exactly, as every tensor's do."""
    compared = {tuple(sorted((g.get("keys") or {}).items())) for g in groups if g.get("compared")}
    pairs = {p.a: p.b for node in alignment.nodes.values() for p in node.tensors if p.comparable and p.b}
    found: dict[str, DetectionList] = {}
    for spec in recognise(list(view_a.graph.outputs), given):
        if tuple(sorted(spec.keys.items())) not in compared:
            continue
        matched = match_lists(spec, run_outputs(view_a.capture, spec), run_outputs(view_b.capture, spec, signature_map))
        if matched is None:  # the outputs' detections were not readable as such on the captured run
            continue
        for key in spec.outputs():
            output = view_a.graph.outputs.get(key)
            if output is None:
                continue
            for tensor in list_tensors(view_a.graph, output):
                if tensor not in found and tensor in pairs:
                    try:
                        va, vb = view_a.capture.tensor(tensor), view_b.capture.tensor(pairs[tensor])
                    except TftraceError:
                        continue
                    measured = matched.measure(tensor, key, va, vb, tolerance.for_tensor(tensor)[1])
                    if measured is not None:
                        found[tensor] = measured
    return found
