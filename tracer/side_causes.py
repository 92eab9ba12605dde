"""The causes in one side's own behaviour, not in what sets the sides apart: a side whose outputs
fetching every tensor moved (the observer effect), or whose model changes its own variables on
every run. They are named from the report's ``observer_effect`` (each side's plain runs against
its instrumented run), and only where the shift could explain something: a shift within the
outputs' own run-to-run noise, within the comparison's tolerance, or negligible beside the
sides' difference explains none of it.
"""

from __future__ import annotations

from typing import Any

from .comparison.detection_groups import matched_figures

__all__ = ["side_causes", "NEGLIGIBLE_SHIFT"]


def side_causes(report: dict[str, Any]) -> dict[str, str]:
    """The causes in one side's own behaviour, each with its evidence: a side whose outputs
    fetching moved (the observer effect), or whose model changes its own state on every run."""
    found: dict[str, str] = {}
    for side_key, side in (("a", report.get("observer_effect", {}).get("a")), ("b", report.get("observer_effect", {}).get("b"))):
        if side and side.get("explained_by_state"):
            found.setdefault("state", f"on side {side_key.upper()}, the model changes its own variables on every run "
                                      f"({', '.join(side.get('stateful_ops', [])[:3])}).")
        elif (side and not side.get("outputs_identical", True) and not _within_output_noise(report, side)
              and not _negligible_shift(report, side) and not _within_tolerance_shift(report, side)):
            found.setdefault("observation", f"on side {side_key.upper()}, fetching every tensor moved the outputs.")
    return found


def _shifts(observer: dict[str, Any]) -> dict[str, Any]:
    """A side's plain-vs-instrumented shift per output, under A's keys, as the report's outputs are
    keyed (B's own keys differ under --map: its ``a_keys`` say which is which)."""
    a_keys = observer.get("a_keys") or {}
    return {a_keys.get(key, key): shift for key, shift in (observer.get("outputs_max_abs_diff") or {}).items()}


def _within_output_noise(report: dict[str, Any], observer: dict[str, Any]) -> bool:
    """Whether a side's plain-vs-instrumented shift is no larger than its outputs' measured
    run-to-run noise (``--repeat``): then observation is not shown to be the cause."""
    shifts = _shifts(observer)
    outputs = report.get("outputs") or {}
    noise = {k: (o or {}).get("noise_max_abs") for k, o in outputs.items()}
    if not shifts or any(noise.get(k) is None for k in shifts):
        return False
    return all(isinstance(v, (int, float)) and v <= noise[k] for k, v in shifts.items())


NEGLIGIBLE_SHIFT = 0.1  # a plain-vs-instrumented shift below this fraction of the sides' difference explains none of it


def _negligible_shift(report: dict[str, Any], observer: dict[str, Any]) -> bool:
    """Whether a side's plain-vs-instrumented shift is too small to explain the difference between
    the sides (1e-7 next to 0.9 was once given as a cause): under NEGLIGIBLE_SHIFT of the outputs'
    own max |A - B| on every output it moved. A detector's outputs are held against what their matched
    detections moved between the sides (report.json's groups), as the shift is measured: their
    index-by-index max |A - B| is the size of a box wherever NMS re-listed two near-tied detections."""
    shifts = _shifts(observer)
    outputs = report.get("outputs") or {}
    if not shifts:
        return False
    as_detections = matched_figures(report.get("detections"))
    for key, shift in shifts.items():
        between = as_detections.get(key, (outputs.get(key) or {}).get("max_abs"))
        if not isinstance(shift, (int, float)) or not isinstance(between, (int, float)):
            return False
        if shift > NEGLIGIBLE_SHIFT * between:
            return False
    return True


def _within_tolerance_shift(report: dict[str, Any], observer: dict[str, Any]) -> bool:
    """Whether a side's plain-vs-instrumented shift is within the comparison's absolute tolerance on
    every output: a float32 ulp or a few (1.19e-07 at 1.0) cannot move an output across the line the
    verdict draws, and the plain runs it would explain fetch nothing. The terminal's "Observer
    effect" line still says it; the folded detector with oneDNN on listed it as a cause."""
    atol = (report.get("tolerance") or {}).get("atol")
    shifts = (observer.get("outputs_max_abs_diff") or {}).values()
    return isinstance(atol, (int, float)) and bool(shifts) and all(
        isinstance(shift, (int, float)) and shift <= atol for shift in shifts)
