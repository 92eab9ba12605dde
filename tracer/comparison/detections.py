"""Detector outputs compared as detections: matched between the sides by class and IoU, per image.

After non-max suppression a detector's outputs are lists, not tensors: row ``k`` of
``detection_boxes`` is the k-th best detection of its image, so one detection whose score moves
past another's, or one that changes class, shifts every row after it. Compared index by index,
that reads as boxes off by the size of an image and classes "off by 2"; no tolerance means
anything there. Here the detections of each image are matched instead: greedily by A's score,
first to an unmatched B detection of the same class with IoU >= the threshold (``matched``), then,
among those left, to one of another class (``changed_class``); A's detections left over
``disappeared``, B's ``appeared``. Matched detections give their score and box differences (IoU,
largest coordinate difference, in the outputs' own units), judged with the outputs' tolerances;
classes and counts are exact.

Which outputs are detections: the signature keys the TF Object Detection API's exporters write
(``detection_boxes``, ``detection_scores``, ``detection_classes``, ``num_detections``, plus the
per-detection ``detection_multiclass_scores``, ``detection_anchor_indices``, ``detection_keypoints``,
``detection_keypoint_scores``, ``detection_masks``; boxes ``[ymin, xmin, ymax, xmax]``), KerasCV's
NMS decoder's (``boxes``, ``confidence``, ``classes``, ``num_detections``; padded with -1; boxes in
the model's ``bounding_box_format``, which the export does not record: ``xyxy`` assumed unless
given), or the keys named with ``--detections boxes=KEY,scores=KEY[,classes=KEY][,count=KEY]
[,format=F][,iou=T]``. Plain numpy on the plain runs' outputs; no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import TftraceError
from ..metrics import TensorMetrics, compare_arrays

__all__ = ["DetectionSpec", "Detections", "ImageMatch", "MatchedRows", "parse_spec", "recognise", "compare_detections",
           "match_image", "valid_detections", "matched_rows", "detections_verdict", "detections_of", "BOX_FORMATS",
           "IOU_THRESHOLD", "ROLES"]

IOU_THRESHOLD = 0.5
ROLES = ("boxes", "scores", "classes", "count")
# KerasCV's bounding_box formats (keras_cv.bounding_box.convert_format); "rel_" ones scale both axes,
# which leaves every IoU as it is, so they are read as their absolute twins.
BOX_FORMATS = ("yxyx", "xyxy", "xywh", "center_xywh", "center_yxhw",
               "rel_yxyx", "rel_xyxy", "rel_xywh", "rel_center_xywh", "rel_center_yxhw")
CHANGES_KEPT = 50  # report.json lists the first this many changed detections (the counts are all of them)

OD_API = {"boxes": "detection_boxes", "scores": "detection_scores", "classes": "detection_classes",
          "count": "num_detections"}
OD_API_PER_DETECTION = ("detection_multiclass_scores", "detection_anchor_indices", "detection_keypoints",
                        "detection_keypoint_scores", "detection_masks", "detection_features")
KERAS_CV = {"boxes": "boxes", "scores": "confidence", "classes": "classes", "count": "num_detections"}


@dataclass(frozen=True)
class DetectionSpec:
    """One group of outputs that together are a detector's detections, by signature key (A's)."""

    keys: Mapping[str, str]  # role (ROLES) -> signature key; boxes and scores always present
    convention: str  # "object_detection_api", "keras_cv" or "option"
    box_format: str = "yxyx"
    box_format_source: str = ""
    iou_threshold: float = IOU_THRESHOLD
    per_detection: tuple[str, ...] = ()  # outputs with a row per detection (detection_multiclass_scores)

    def outputs(self) -> list[str]:
        """Every signature key this group owns: these are judged as detections, not index by index."""
        return [*self.keys.values(), *self.per_detection]

    def to_json(self) -> dict[str, Any]:
        return {"keys": dict(self.keys), "convention": self.convention, "box_format": self.box_format,
                "box_format_source": self.box_format_source, "iou_threshold": self.iou_threshold,
                "per_detection": list(self.per_detection)}


def parse_spec(value: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``--detections boxes=KEY,scores=KEY[,classes=KEY][,count=KEY][,format=F][,iou=T]`` (or the
    same as a dict) -> a checked dict; the keys are checked against the signature once it is known."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        items = {}
        for item in (p.strip() for p in value.split(",") if p.strip()):
            name, sep, given = item.partition("=")
            if not sep or not given:
                raise TftraceError(f"--detections item {item!r} is not NAME=VALUE",
                                   "e.g. --detections boxes=detection_boxes,scores=detection_scores,"
                                   "classes=detection_classes,count=num_detections")
            items[name.strip()] = given.strip()
    else:
        items = {str(k): v for k, v in dict(value).items()}
    unknown = sorted(set(items) - {*ROLES, "format", "iou"})
    if unknown:
        raise TftraceError(f"--detections does not know {', '.join(unknown)}",
                           f"name outputs as {', '.join(r + '=KEY' for r in ROLES)}, and optionally format=F, iou=T")
    missing = [r for r in ("boxes", "scores") if r not in items]
    if missing:
        raise TftraceError(f"--detections needs {' and '.join(r + '=KEY' for r in missing)}",
                           "e.g. --detections boxes=boxes,scores=scores,classes=classes,count=valid")
    fmt = str(items.get("format", "yxyx"))
    if fmt not in BOX_FORMATS:
        raise TftraceError(f"--detections format={fmt!r} is not a box format", f"use one of {', '.join(BOX_FORMATS)}")
    try:
        iou = float(items.get("iou", IOU_THRESHOLD))
    except (TypeError, ValueError):
        iou = -1.0
    if not 0.0 < iou <= 1.0:
        raise TftraceError(f"--detections iou={items.get('iou')!r} is not an IoU threshold in (0, 1]",
                           "e.g. iou=0.5")
    return {"keys": {r: str(items[r]) for r in ROLES if r in items}, "format": fmt, "iou": iou,
            "format_given": "format" in items}


def recognise(output_keys: list[str], given: Mapping[str, Any] | None = None) -> list[DetectionSpec]:
    """The groups of detections among a signature's output keys: the one ``given`` (parse_spec's;
    a key it names that the signature lacks is an error), else those recognised by name."""
    if given:
        absent = [k for k in given["keys"].values() if k not in output_keys]
        if absent:
            raise TftraceError(f"--detections names {', '.join(map(repr, absent))}, which A's signature does not "
                               f"output (its outputs: {', '.join(sorted(output_keys)) or 'none'})",
                               "name the signature's output keys (A's; --map pairs B's)")
        source = "given with --detections" if given.get("format_given") else "--detections without format=: yxyx assumed"
        return [DetectionSpec(dict(given["keys"]), "option", given["format"], source, given["iou"])]
    found = []
    for convention, names, fmt, source in (
        ("object_detection_api", OD_API, "yxyx", "the Object Detection API's convention"),
        ("keras_cv", KERAS_CV, "xyxy",
         "assumed: a KerasCV export does not record its bounding_box_format (give it with --detections format=F)"),
    ):
        keys = {role: key for role, key in names.items() if key in output_keys}
        needed = ("boxes", "scores") if convention == "object_detection_api" else ("boxes", "scores", "classes")
        if all(r in keys for r in needed):
            extra = tuple(k for k in OD_API_PER_DETECTION if k in output_keys) if convention == "object_detection_api" \
                else ()
            found.append(DetectionSpec(keys, convention, fmt, source, IOU_THRESHOLD, extra))
    return found


# ---- matching one image ---------------------------------------------------------------------------


def corners(boxes: np.ndarray, fmt: str) -> np.ndarray:
    """``[N, 4]`` boxes in ``fmt`` -> ``[N, 4]`` (min0, min1, max0, max1), the axes in the format's
    order: an IoU does not depend on which axis is y."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    base = fmt.removeprefix("rel_")
    if base in ("yxyx", "xyxy"):
        return b
    if base == "xywh":
        return np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], axis=1)
    # center_xywh, center_yxhw: centre then size
    return np.concatenate([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], axis=1)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every corner box of ``a`` with every one of ``b``. Boxes of no area (clipped to an
    image's edge) overlap nothing, except the same box on the other side: IoU 1."""
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0.0, None), axis=-1)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0.0, None), axis=-1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0.0, None), axis=-1)
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
    same = np.all(a[:, None, :] == b[None, :, :], axis=-1)
    return np.where((union <= 0) & same, 1.0, np.nan_to_num(out, nan=0.0))


@dataclass
class Detections:
    """One side's detections of one image: the valid rows only."""

    rows: np.ndarray  # indices into the padded outputs
    boxes: np.ndarray  # [N, 4] as the model gave them
    scores: np.ndarray  # [N]
    classes: np.ndarray | None  # [N] integers, None when the group has no classes

    def one(self, i: int) -> dict[str, Any]:
        return {"index": int(self.rows[i]), "score": float(self.scores[i]),
                "class": None if self.classes is None else int(self.classes[i]),
                "box": [float(v) for v in self.boxes[i]]}


@dataclass
class ImageMatch:
    """What matching one image's detections found: pairs (A row, B row) and the rest."""

    matched: list[tuple[int, int]] = field(default_factory=list)
    changed_class: list[tuple[int, int]] = field(default_factory=list)
    disappeared: list[int] = field(default_factory=list)  # A's
    appeared: list[int] = field(default_factory=list)  # B's

    @property
    def changes(self) -> int:
        """Detections that changed class, disappeared or appeared: what no tolerance excuses."""
        return len(self.changed_class) + len(self.disappeared) + len(self.appeared)


def match_image(a: Detections, b: Detections, fmt: str, threshold: float) -> tuple[ImageMatch, np.ndarray]:
    """Greedy by A's score (highest first): same class and IoU >= ``threshold`` first, then, among
    the detections left, any class (a changed class). Returns the match and the IoU matrix."""
    iou = iou_matrix(corners(a.boxes, fmt), corners(b.boxes, fmt))
    order = np.argsort(-a.scores, kind="stable")
    taken_b: set[int] = set()
    paired_a: dict[int, int] = {}
    result = ImageMatch()
    for same_class in (True, False):
        for i in (int(i) for i in order):
            if i in paired_a:
                continue
            best, best_iou = -1, threshold
            for j in range(len(b.scores)):
                if j in taken_b or iou[i, j] < best_iou:
                    continue
                classes_agree = a.classes is None or int(a.classes[i]) == int(b.classes[j])
                if classes_agree != same_class:
                    continue
                if iou[i, j] > best_iou or best < 0:
                    best, best_iou = j, float(iou[i, j])
            if best >= 0:
                paired_a[i] = best
                taken_b.add(best)
                (result.matched if same_class else result.changed_class).append((i, best))
    result.disappeared = [i for i in range(len(a.scores)) if i not in paired_a]
    result.appeared = [j for j in range(len(b.scores)) if j not in taken_b]
    return result, iou


# ---- a whole group, every image ------------------------------------------------------------------


Tol = Callable[[str], tuple[float, float]]  # signature key -> (atol, rtol)


def valid_detections(arrays: Mapping[str, np.ndarray], image: int) -> Detections:
    """Image ``image``'s detections: the first ``count`` rows where a count is output, else the
    rows with a positive score (padding: 0 after combined NMS, -1 from KerasCV) and a class >= 0."""
    scores = np.asarray(arrays["scores"][image], dtype=np.float64).reshape(-1)
    classes = arrays.get("classes")
    cls = None if classes is None else np.rint(np.asarray(classes[image], dtype=np.float64).reshape(-1)).astype(np.int64)
    if "count" in arrays:
        n = int(np.rint(float(np.asarray(arrays["count"][image]).reshape(-1)[0])))
        rows = np.arange(min(max(n, 0), len(scores)))
    else:
        keep = np.isfinite(scores) & (scores > 0)
        if cls is not None:
            keep &= cls >= 0
        rows = np.flatnonzero(keep)
    boxes = np.asarray(arrays["boxes"][image], dtype=np.float64).reshape(-1, 4)
    return Detections(rows, boxes[rows], scores[rows], None if cls is None else cls[rows])


def _shape_problem(spec: DetectionSpec, arrays: Mapping[str, np.ndarray], side: str) -> str | None:
    """Why ``side``'s arrays are not detections (numbers shaped [images, detections, ...]), or None."""
    for role, value in arrays.items():
        if value.dtype.kind not in "biuf":
            return f"{side}'s {spec.keys[role]!r} holds {value.dtype} values, not numbers"
    boxes, scores = arrays["boxes"], arrays["scores"]
    if boxes.ndim != 3 or boxes.shape[-1] != 4:
        return f"{side}'s {spec.keys['boxes']!r} has shape {list(boxes.shape)}, not [images, detections, 4]"
    if scores.shape != boxes.shape[:2]:
        return f"{side}'s {spec.keys['scores']!r} has shape {list(scores.shape)}, not {list(boxes.shape[:2])}"
    if "classes" in arrays and arrays["classes"].shape != boxes.shape[:2]:
        return f"{side}'s {spec.keys['classes']!r} has shape {list(arrays['classes'].shape)}, not {list(boxes.shape[:2])}"
    count = arrays.get("count")
    if count is not None and (count.ndim == 0 or count.reshape(count.shape[0], -1).shape != (boxes.shape[0], 1)):
        return f"{side}'s {spec.keys['count']!r} has shape {list(arrays['count'].shape)}, not [{boxes.shape[0]}]"
    return None


def _counts() -> dict[str, Any]:
    return {"a": 0, "b": 0, "matched": 0, "appeared": 0, "disappeared": 0, "changed_class": 0,
            "matched_beyond_tolerance": 0, "max_score_diff": None, "min_iou": None, "max_box_diff": None}


def _fold(total: dict[str, Any], part: dict[str, Any]) -> None:
    for key in ("a", "b", "matched", "appeared", "disappeared", "changed_class", "matched_beyond_tolerance"):
        total[key] += part[key]
    for key, pick in (("max_score_diff", max), ("min_iou", min), ("max_box_diff", max)):
        if part[key] is not None:
            total[key] = part[key] if total[key] is None else pick(total[key], part[key])


def compare_detections(spec: DetectionSpec, a: Mapping[str, np.ndarray | None], b: Mapping[str, np.ndarray | None],
                       tolerance: Tol) -> dict[str, Any]:
    """The report's entry of one group: per image and in total, what matched, appeared,
    disappeared or changed class, and how far matched detections moved (``a`` and ``b``: role or
    per-detection key -> the side's plain output; a None is an output the side does not have)."""
    out: dict[str, Any] = {**spec.to_json(), "compared": False, "not_compared": None, "verdict": None,
                           "total": None, "images": [], "changes": [], "per_detection_max_abs": {}}
    roles = [r for r in ROLES if r in spec.keys]
    missing = [f"{side}'s {spec.keys[r]!r}" for side, got in (("A", a), ("B", b)) for r in roles if got.get(r) is None]
    if missing:
        out["not_compared"] = f"no value for {', '.join(missing)}"
        return out
    arrays = {side: {r: np.asarray(got[r]) for r in roles} for side, got in (("A", a), ("B", b))}
    for side in ("A", "B"):
        problem = _shape_problem(spec, arrays[side], side)
        if problem:
            out["not_compared"] = problem
            return out
    if arrays["A"]["boxes"].shape[0] != arrays["B"]["boxes"].shape[0]:
        out["not_compared"] = (f"A has {arrays['A']['boxes'].shape[0]} images, B "
                               f"{arrays['B']['boxes'].shape[0]}")
        return out
    score_tol, box_tol = tolerance(spec.keys["scores"]), tolerance(spec.keys["boxes"])
    total, per_image = _counts(), []
    for image in range(arrays["A"]["boxes"].shape[0]):
        da, db = valid_detections(arrays["A"], image), valid_detections(arrays["B"], image)
        match, iou = match_image(da, db, spec.box_format, spec.iou_threshold)
        row = _image_entry(image, da, db, match, iou, score_tol, box_tol, out["changes"])
        out["images"].append(row)
        _fold(total, row)
        per_image.append((da, db, match))
    extras: dict[str, float | None] = {}
    within: dict[str, bool | None] = {}
    for key in spec.per_detection:
        rows = matched_rows(a.get(key), b.get(key), per_image)
        m = None if rows is None else rows.compare(tolerance(key)[1])
        extras[key] = None if m is None else m.max_abs
        within[key] = None if m is None else m.within(*tolerance(key))
    out["per_detection_max_abs"] = extras
    out["per_detection_within_tolerance"] = within
    out["total"] = total
    out["compared"] = True
    measured = [k for k, w in extras.items() if w is not None]
    identical = all(np.array_equal(arrays["A"][r], arrays["B"][r], equal_nan=True) for r in roles) and all(
        np.array_equal(np.asarray(a[k]), np.asarray(b[k]), equal_nan=True) for k in measured)
    changes = total["appeared"] + total["disappeared"] + total["changed_class"]
    matched_within = not total["matched_beyond_tolerance"] and all(within[k] for k in measured)
    out["verdict"] = detections_verdict(identical, changes, matched_within)
    return out


def detections_verdict(identical: bool, changes: int, matched_within: bool) -> str:
    """The one rule that judges lists of detections, a detector's outputs and the tensors inside
    that hold the same lists alike: ``identical`` when every array is bitwise equal; else
    ``diverged`` when a detection changed class, disappeared or appeared (``changes``: another
    answer, whatever the tolerance) or a matched detection differs beyond tolerance; else
    ``within_tolerance``, however the rows were ordered."""
    if identical:
        return "identical"
    return "diverged" if changes or not matched_within else "within_tolerance"


@dataclass(frozen=True)
class MatchedRows:
    """The rows of one per-detection array (``[images, detections, ...]``) that hold matched
    detections, A's and B's side by side, image by image: what such an array is compared by."""

    a: np.ndarray  # [n, ...]: A's row of each matched detection
    b: np.ndarray  # [n, ...]: the row of B's detection it matched
    at: np.ndarray  # [n, 2]: (image, row) of each in A's array

    def compare(self, rtol: float) -> TensorMetrics:
        """A's rows against B's element by element, as any tensor is (:func:`tracer.metrics.compare_arrays`,
        exact for ``within(atol, rtol)``); the worst elements are indexed in A's array."""
        m = compare_arrays(self.a, self.b, rtols=(rtol,))
        worst = tuple(((*(int(v) for v in self.at[index[0]]), *index[1:]), va, vb) for index, va, vb in m.worst)
        return replace(m, worst=worst)


def matched_rows(va: Any, vb: Any, per_image: Sequence[tuple[Detections, Detections, ImageMatch]]
                 ) -> MatchedRows | None:
    """The rows of ``va`` (A's) and ``vb`` (B's) that hold each matched detection of ``per_image``
    (image by image: A's detections, B's, their match); None when they cannot be read so (absent on
    a side, not ``[images, detections, ...]`` alike, fewer images than were matched)."""
    if va is None or vb is None:
        return None
    va, vb = np.asarray(va), np.asarray(vb)
    if va.ndim < 2 or va.shape[1:] != vb.shape[1:] or min(len(va), len(vb)) < len(per_image):
        return None
    pairs = [(image, int(da.rows[i]), int(db.rows[j])) for image, (da, db, match) in enumerate(per_image)
             for i, j in match.matched]
    pairs = [p for p in pairs if p[1] < va.shape[1] and p[2] < vb.shape[1]]
    at = np.array(pairs, dtype=np.int64).reshape(-1, 3)
    return MatchedRows(va[at[:, 0], at[:, 1]], vb[at[:, 0], at[:, 2]], at[:, :2])


def _image_entry(image: int, da: Detections, db: Detections, match: ImageMatch, iou: np.ndarray,
                 score_tol: tuple[float, float], box_tol: tuple[float, float], changes: list[dict[str, Any]]
                 ) -> dict[str, Any]:
    row = {"image": image, **_counts(), "a": len(da.scores), "b": len(db.scores), "matched": len(match.matched),
           "appeared": len(match.appeared), "disappeared": len(match.disappeared),
           "changed_class": len(match.changed_class)}
    for i, j in match.matched:
        score = abs(da.scores[i] - db.scores[j])
        box = float(np.max(np.abs(da.boxes[i] - db.boxes[j])))
        beyond = (score > score_tol[0] + score_tol[1] * abs(da.scores[i])
                  or np.any(np.abs(da.boxes[i] - db.boxes[j]) > box_tol[0] + box_tol[1] * np.abs(da.boxes[i])))
        row["matched_beyond_tolerance"] += int(bool(beyond))
        row["max_score_diff"] = max(row["max_score_diff"] or 0.0, float(score))
        row["max_box_diff"] = max(row["max_box_diff"] or 0.0, box)
        row["min_iou"] = min(row["min_iou"] if row["min_iou"] is not None else 1.0, float(iou[i, j]))
    def keep(kind: str, i: int | None, j: int | None) -> None:
        if len(changes) < CHANGES_KEPT:
            changes.append({"image": image, "kind": kind, "a": None if i is None else da.one(i),
                            "b": None if j is None else db.one(j),
                            "iou": None if i is None or j is None else float(iou[i, j])})
    for i, j in match.changed_class:
        keep("changed_class", i, j)
    for i in match.disappeared:
        keep("disappeared", i, None)
    for j in match.appeared:
        keep("appeared", None, j)
    return row


# ---- from two captures -----------------------------------------------------------------------------


def _output_value(view: Any, key: str, own: str | None = None) -> np.ndarray | None:
    """Signature output ``key`` (the view's key: A's, B's renamed to A's by ``--map``) as the plain run
    computed it, read under ``own`` (the capture's own key, which ``--map`` never renames), else as
    captured, else None."""
    plain = view.capture.plain_output(own or key)
    if plain is not None:
        return np.asarray(plain)
    tensor = view.graph.outputs.get(key)
    if tensor is None or not view.capture.has(tensor):
        return None
    try:
        return np.asarray(view.capture.tensor(tensor))
    except TftraceError:
        return None


def detections_of(view_a: Any, view_b: Any, tolerance: Any, signature_map: Mapping[str, str],
                  given: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every group of detections of A's signature (:func:`recognise`), compared on the plain runs'
    outputs: report.json's ``detections``. B's view names its outputs by A's keys once ``--map`` is
    applied (:func:`tracer.comparison.pairing.apply_signature_map`); its capture, by its own
    (``signature_map``: A's key -> B's). Asking the view for B's own key found nothing, and a group
    whose keys were mapped was left uncompared."""
    specs = recognise(list(view_a.graph.outputs), given)
    found = []
    for spec in specs:
        wanted = {**spec.keys, **{k: k for k in spec.per_detection}}
        a = {role: _output_value(view_a, key) for role, key in wanted.items()}
        b = {role: (_output_value(view_b, key, signature_map.get(key, key)) if key in view_b.graph.outputs else None)
             for role, key in wanted.items()}
        found.append(compare_detections(spec, a, b, lambda key: tolerance.for_tensor(view_a.graph.outputs.get(key, key))))
    return found
