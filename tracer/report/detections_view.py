"""What report.json's ``detections`` says, in the words the terminal, report.md and report.html share.

A detector's outputs after NMS are compared as detections (:mod:`tracer.comparison.detections`):
one headline per group of outputs (what was matched, how, and what changed), a row per image, a
line per changed detection. Read back from JSON written by any tftrace, so every reader tolerates a
missing or wrong-typed field; model strings are returned as they are, each renderer escapes them.
"""

from __future__ import annotations

from typing import Any

from ..comparison.statuses import verdict_label
from .numbers import fmt

__all__ = ["detection_groups", "detection_headline", "detection_outputs", "image_header", "image_rows",
           "change_text", "changed_images", "changes_text", "list_note", "index_by_index", "observer_note"]

BOX_WORDS = {"yxyx": "[ymin, xmin, ymax, xmax]", "xyxy": "[xmin, ymin, xmax, ymax]", "xywh": "[x, y, width, height]",
             "center_xywh": "[x centre, y centre, width, height]", "center_yxhw": "[y centre, x centre, height, width]"}
CONVENTIONS = {"object_detection_api": "the Object Detection API's output names", "keras_cv": "KerasCV's output names",
               "option": "named with --detections"}
COUNTS = ("matched", "appeared", "disappeared", "changed_class")


def detection_groups(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's groups of detections (none in a report made before tftrace matched them)."""
    groups = report.get("detections")
    return [g for g in groups if isinstance(g, dict)] if isinstance(groups, list) else []


def detection_outputs(report: dict[str, Any]) -> set[str]:
    """Signature keys judged as detections: their index-by-index rows are not what decides."""
    out: set[str] = set()
    for group in detection_groups(report):
        if group.get("compared"):
            keys = group.get("keys") if isinstance(group.get("keys"), dict) else {}
            out.update(str(k) for k in keys.values())
    return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _boxes(group: dict[str, Any]) -> str:
    fmt_name = str(group.get("box_format") or "")
    base = fmt_name.removeprefix("rel_")
    words = BOX_WORDS.get(base, fmt_name or "?")
    return f"{'relative ' if fmt_name.startswith('rel_') else ''}{words}"


def detection_headline(group: dict[str, Any]) -> str:
    """``detection_boxes, …: 49 of 50 matched, 0 appeared, 0 disappeared, 1 changed class; …``."""
    keys = group.get("keys") if isinstance(group.get("keys"), dict) else {}
    names = ", ".join(str(v) for v in keys.values()) or "?"
    how = (f"{CONVENTIONS.get(str(group.get('convention')), str(group.get('convention')))}; boxes {_boxes(group)}"
           f"{' (' + str(group['box_format_source']) + ')' if group.get('box_format_source') else ''}; matched by "
           f"{'class and ' if 'classes' in keys else ''}IoU ≥ {fmt(group.get('iou_threshold'))}, greedy by A's score")
    if not group.get("compared"):
        return f"{names} ({how}): not compared: {group.get('not_compared') or 'no reason recorded'}"
    total = group.get("total") if isinstance(group.get("total"), dict) else {}
    counts = (f"{_int(total.get('matched'))} of {_int(total.get('a'))} matched (B has {_int(total.get('b'))}), "
              f"{_int(total.get('appeared'))} appeared, {_int(total.get('disappeared'))} disappeared, "
              f"{_int(total.get('changed_class'))} changed class")
    matched = ""
    if _int(total.get("matched")):
        beyond = _int(total.get("matched_beyond_tolerance"))
        matched = (f"; matched detections: scores within {fmt(total.get('max_score_diff'))}, IoU ≥ "
                   f"{fmt(total.get('min_iou'), 4)}, box coordinates within {fmt(total.get('max_box_diff'))} "
                   + (f"({beyond} beyond tolerance)" if beyond else "(all within tolerance)"))
    extra = group.get("per_detection_max_abs") if isinstance(group.get("per_detection_max_abs"), dict) else {}
    extras = "".join(f"; {k} of matched detections within {fmt(v)}" for k, v in extra.items() if v is not None)
    verdict = verdict_label(group["verdict"]) if group.get("verdict") else ""
    return f"{names} ({how}): {verdict + ': ' if verdict else ''}{counts}{matched}{extras}"


def image_header() -> list[str]:
    return ["image", "A", "B", "matched", "appeared", "disappeared", "changed class", "max score diff", "min IoU",
            "max box diff"]


def image_rows(group: dict[str, Any], only_changed: bool = False) -> list[list[str]]:
    """One row per image (``only_changed``: the images where a detection appeared, disappeared or
    changed class; matched ones beyond tolerance are counted in the headline)."""
    rows = []
    for image in group.get("images") or []:
        if not isinstance(image, dict):
            continue
        if only_changed and not any(_int(image.get(k)) for k in COUNTS[1:]):
            continue
        rows.append([str(image.get("image")), str(_int(image.get("a"))), str(_int(image.get("b"))),
                     *(str(_int(image.get(k))) for k in COUNTS), fmt(image.get("max_score_diff")),
                     fmt(image.get("min_iou"), 4), fmt(image.get("max_box_diff"))])
    return rows


def changed_images(group: dict[str, Any]) -> int:
    return len(image_rows(group, only_changed=True))


def _one(d: Any) -> str:
    if not isinstance(d, dict):
        return "?"
    box = d.get("box") if isinstance(d.get("box"), list) else []
    cls = f"class {d.get('class')}, " if d.get("class") is not None else ""
    return f"{cls}score {fmt(d.get('score'))}, box [{', '.join(fmt(v) for v in box)}] (row {d.get('index')})"


def change_text(change: dict[str, Any]) -> str:
    """``image 0: class 3 → 2 (score 0.889 → 0.889, IoU 1)``, or what appeared or disappeared."""
    kind = change.get("kind")
    a, b = change.get("a") if isinstance(change.get("a"), dict) else {}, \
        change.get("b") if isinstance(change.get("b"), dict) else {}
    where = f"image {change.get('image')}"
    if kind == "changed_class":
        return (f"{where}: class {a.get('class')} → {b.get('class')} (score {fmt(a.get('score'))} → "
                f"{fmt(b.get('score'))}, IoU {fmt(change.get('iou'), 4)}; A row {a.get('index')}, B row {b.get('index')})")
    if kind == "disappeared":
        return f"{where}: disappeared in B: {_one(a)}"
    if kind == "appeared":
        return f"{where}: appeared in B: {_one(b)}"
    return f"{where}: {kind}"


def changes_text(n: Any) -> str:
    """``"2 detections appeared, disappeared or changed class"``; empty for none (or no count)."""
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return ""
    return f"{n} detection{'s' if n != 1 else ''} appeared, disappeared or changed class"


def index_by_index(entry: dict[str, Any]) -> dict[str, Any] | None:
    """A node's or origin's ``index_by_index`` figures (an op holding detection lists), or None."""
    found = entry.get("index_by_index")
    return found if isinstance(found, dict) else None


def list_note(entry: dict[str, Any]) -> str:
    """What follows the figures of an op whose tensor holds detection lists: that they are between
    matched detections, what changed, and the index-by-index largest difference, named as such.
    ``", between matched detections; read index by index (row k of A against row k of B), up to 0.359"``;
    empty for any other op."""
    listed = entry.get("detection_list")
    if not isinstance(listed, dict) or listed.get("measured") != "matched_detections":
        return ""
    text = ", between matched detections"
    changed = changes_text(listed.get("changes"))
    if changed:
        text += f" ({changed})"
    index = index_by_index(entry) or {}
    if isinstance(index.get("max_abs"), (int, float)) and not isinstance(index.get("max_abs"), bool):
        text += f"; read index by index (row k of A against row k of B), up to {fmt(index['max_abs'])}"
    return text



def observer_note(side: Any) -> str:
    """What a side's ``observer_effect`` says of a detector's outputs, as a clause (empty when nothing):
    their figures are between the detections its plain and instrumented runs matched, and their
    index-by-index largest difference, which NMS re-ordering near-tied detections inflates, is only that."""
    if not isinstance(side, dict) or not isinstance(side.get("outputs_as_detections"), list):
        return ""
    keys = [str(k) for k in side["outputs_as_detections"]]
    if not keys:
        return ""
    index = side.get("outputs_index_by_index") if isinstance(side.get("outputs_index_by_index"), dict) else {}
    rows = [v for v in (index.get(k) for k in keys) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
    return (f"{shown} between the detections its plain and instrumented runs matched"
            + (f" (index by index up to {fmt(max(rows))})" if rows else ""))
