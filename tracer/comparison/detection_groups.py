"""What report.json's ``detections`` groups say, read back per signature key.

:func:`tracer.comparison.detections.compare_detections` writes one entry per group of a detector's
outputs (what matched, appeared, disappeared or changed class, how far matched detections moved).
Everything that judges or measures those outputs afterwards (the compare's verdict per output, the
same net of the sides' noise, diagnose's verdict and effect per experiment) reads them from these
entries, so a detector's outputs are taken as their matched detections wherever they are judged, not
row by row: NMS lists near-tied detections in either order. Plain dicts in, plain values out; no
numpy, no TensorFlow, and tolerant of a report written by an older tftrace.
"""

from __future__ import annotations

from typing import Any

__all__ = ["detection_verdicts", "detections_net_of_noise", "detections_summary", "matched_figures"]


def detection_verdicts(entries: list[dict[str, Any]]) -> dict[str, str]:
    """Signature key -> the verdict of the detections it belongs to, for every output of a group
    that was compared: these outputs are judged as detections, not index by index."""
    out = {}
    for entry in entries:
        if entry.get("compared") and entry.get("verdict"):
            measured = [k for k, w in (entry.get("per_detection_max_abs") or {}).items() if w is not None]
            for key in [*entry["keys"].values(), *measured]:
                out[key] = entry["verdict"]
    return out


def detections_net_of_noise(as_detections: dict[str, str], as_arrays: dict[str, str],
                             groups: list[dict[str, Any]]) -> dict[str, str]:
    """A detector's outputs are judged as detections (matched by class and IoU), except where the
    sides' own runs move them: a group that diverges as detections while each of its outputs, taken
    array by array over every pair of runs, is no further from the other side than a side is from
    itself (``within_noise`` at worst, and some output moved by itself) is within the noise — its
    detections change between two runs of one side as much as between A and B. Measured only where
    the noise was (``as_arrays`` then holds ``within_noise``); otherwise the detections decide."""
    judged = dict(as_detections)
    for group in groups:
        keys = [k for k in (group.get("keys") or {}).values() if k in as_detections]
        if not keys or as_detections[keys[0]] != "diverged":
            continue
        arrays = [as_arrays.get(k) for k in keys]
        if "within_noise" in arrays and all(v in ("identical", "within_tolerance", "within_noise") for v in arrays):
            measured = [k for k, w in (group.get("per_detection_max_abs") or {}).items() if w is not None]
            for key in [*keys, *measured]:
                judged[key] = "within_noise"
    return judged


def detections_summary(entries: Any) -> list[dict[str, Any]]:
    """What diagnose keeps of a report's ``detections`` per experiment: each group's keys, whether it
    was compared, its totals and per-detection differences, and its discrete outputs (classes and
    count: never given a tolerance)."""
    out = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("keys"), dict):
            continue
        keys = {str(r): str(k) for r, k in entry["keys"].items()}
        out.append({"keys": keys, "compared": bool(entry.get("compared")), "verdict": entry.get("verdict"),
                    "total": entry.get("total") if isinstance(entry.get("total"), dict) else None,
                    "per_detection_max_abs": entry.get("per_detection_max_abs") or {},
                    "discrete": [keys[r] for r in ("classes", "count") if r in keys]})
    return out


def matched_figures(groups: Any) -> dict[str, float]:
    """Signature key -> how far a detector's output moved between the detections the compare matched on
    the plain runs (``groups``: report.json's ``detections``), for each compared group where no detection
    appeared, disappeared or changed class: boxes and scores by the group's largest matched difference,
    classes and count 0 (matched detections share them), a per-detection output by its matched rows. A
    group with such a change keeps its row-by-row figures, as :meth:`DetectionList.size` does; so does
    one not compared. Row by row, NMS listing near-tied detections in another order is a box off by its
    size: the experiment's effect read as that, not as what the detections moved."""
    found: dict[str, float] = {}
    for group in groups if isinstance(groups, list) else []:
        total = group.get("total") if isinstance(group, dict) else None
        keys = group.get("keys") if isinstance(group, dict) else None
        if not group.get("compared") or not isinstance(total, dict) or not isinstance(keys, dict):
            continue
        if any(total.get(kind) for kind in ("appeared", "disappeared", "changed_class")):
            continue
        same = group.get("verdict") == "identical"
        moved = {"boxes": total.get("max_box_diff"), "scores": total.get("max_score_diff")}
        for role, key in keys.items():
            found[str(key)] = 0.0 if same else float(moved.get(role) or 0.0)
        for key, value in (group.get("per_detection_max_abs") or {}).items():
            if isinstance(value, (int, float)):
                found[str(key)] = 0.0 if same else float(value)
    return found
