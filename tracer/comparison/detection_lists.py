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

__all__ = ["ROW_KEEPING", "DetectionList", "list_tensors", "measure_detection_lists"]

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
    """A's tensor that holds a detector's lists of detections, measured between matched detections."""

    tensor: str
    output: str  # the signature key whose rows it holds
    matched: TensorMetrics | None  # A's rows of matched detections against B's; None: not measurable (``why``)
    changes: int  # detections of its group that changed class, disappeared or appeared
    group: tuple[str, ...] = ()  # the signature keys of its group of detections
    why: str | None = None

    def verdict(self, index: TensorMetrics, atol: float, rtol: float) -> str | None:
        """``identical``, ``within_tolerance`` or ``diverged`` by :func:`detections_verdict` (``index``:
        its index-by-index metrics, which say only whether it is bitwise equal); None when it was not
        measurable, and is then judged index by index."""
        if self.matched is None:
            return None
        return detections_verdict(index.identical, self.changes, self.matched.within(atol, rtol))

    def to_json(self) -> dict[str, Any]:
        """The report's ``detection_list`` of its op."""
        return {"output": self.output, "measured": "index_by_index" if self.matched is None else "matched_detections",
                "matched_rows": None if self.matched is None else int(self.matched.shape[0]), "changes": self.changes,
                "why": self.why}


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


def _captured(view: CaptureView, key: str) -> np.ndarray | None:
    """Output ``key`` as the instrumented run computed it (the run the intermediates come from), else
    as the plain run did, else None."""
    tensor = view.graph.outputs.get(key)
    if tensor is not None and view.capture.has(tensor):
        try:
            return np.asarray(view.capture.tensor(tensor))
        except TftraceError:
            pass
    plain = view.capture.plain_output(key)
    return None if plain is None else np.asarray(plain)


def _matches(spec: DetectionSpec, view_a: CaptureView, view_b: CaptureView,
             signature_map: Mapping[str, str]) -> tuple[PerImage, tuple[int, int]] | None:
    """Per image, (A's detections, B's, their match), as :func:`compare_detections` makes them, on the
    instrumented run's outputs; and the ``[images, detections]`` shape of the lists. None when
    they cannot be read or are not shaped as detections."""
    arrays = {}
    for side, view, rename in (("a", view_a, {}), ("b", view_b, signature_map)):
        got = {role: _captured(view, rename.get(key, key)) for role, key in spec.keys.items()}
        if any(v is None for v in got.values()):
            return None
        arrays[side] = got
    boxes_a, boxes_b = arrays["a"]["boxes"], arrays["b"]["boxes"]
    if boxes_a.ndim != 3 or boxes_a.shape[:1] != boxes_b.shape[:1] or boxes_a.shape[1:] != boxes_b.shape[1:]:
        return None
    try:
        per_image = []
        for image in range(boxes_a.shape[0]):
            da, db = valid_detections(arrays["a"], image), valid_detections(arrays["b"], image)
            per_image.append((da, db, match_image(da, db, spec.box_format, spec.iou_threshold)[0]))
    except (IndexError, ValueError):
        return None
    return per_image, (int(boxes_a.shape[0]), int(boxes_a.shape[1]))


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
        matched = _matches(spec, view_a, view_b, signature_map)
        for key in spec.outputs():
            output = view_a.graph.outputs.get(key)
            if output is None:
                continue
            for tensor in list_tensors(view_a.graph, output):
                if tensor not in found and tensor in pairs:
                    measured = _measure(view_a, view_b, tensor, pairs[tensor], key, tuple(spec.outputs()), matched,
                                        tolerance.for_tensor(tensor)[1])
                    if measured is not None:
                        found[tensor] = measured
    return found


def _measure(view_a: CaptureView, view_b: CaptureView, ta: str, tb: str, key: str, group: tuple[str, ...],
             matched: tuple[PerImage, tuple[int, int]] | None, rtol: float) -> DetectionList | None:
    """One list tensor between matched detections; None when its values are not shaped as the
    output's lists on both sides (then it is no list, and stays judged index by index)."""
    if matched is None:  # the outputs' detections were not readable as such on the captured run
        return None
    try:
        va, vb = np.asarray(view_a.capture.tensor(ta)), np.asarray(view_b.capture.tensor(tb))
    except TftraceError:
        return None
    per_image, lists = matched
    if va.ndim < 2 or vb.ndim < 2 or va.shape[:2] != lists or vb.shape[:2] != lists or va.shape[2:] != vb.shape[2:]:
        return None
    if va.dtype.kind not in "biuf" or vb.dtype.kind not in "biuf":
        return None
    changes = sum(match.changes for _da, _db, match in per_image)
    rows = matched_rows(va, vb, per_image)
    if rows is None:
        return DetectionList(ta, key, None, changes, group, "its rows could not be paired as the detections were")
    return DetectionList(ta, key, rows.compare(rtol), changes, group)
