"""diagnose's plain-output verdict judges a detector's outputs as the compare judged its detections.

Helper review, 2026-12-04: compare judges a detector's outputs between matched detections, but
diagnose's own verdict on the plain runs read them row by row, so NMS listing two near-tied
detections in the other order (a box off by its size, a class off by one) made an experiment
diverged and sent diagnose walking op by op for a difference the matched detections did not have.
"""

from __future__ import annotations

import numpy as np

from tracer.comparison.divergence import Tolerance
from tracer.diagnosis.outcomes import plain_verdict
from tracer.metrics import compare_arrays

BOXES_A = np.array([[[0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0]]], np.float32)
CLASSES_A = np.array([[1.0, 2.0]], np.float32)
SCORES_A = np.array([[0.625, 0.6240234375]], np.float32)
GROUP = {"keys": {"boxes": "detection_boxes", "classes": "detection_classes", "scores": "detection_scores"},
         "compared": True, "verdict": "identical", "per_detection_max_abs": {}}


def _reordered() -> dict:
    """B lists A's two detections in the other order: row by row everything moved, as detections nothing."""
    return {"detection_boxes": compare_arrays(BOXES_A, BOXES_A[:, ::-1]),
            "detection_classes": compare_arrays(CLASSES_A, CLASSES_A[:, ::-1]),
            "detection_scores": compare_arrays(SCORES_A, SCORES_A[:, ::-1])}


def test_a_reordered_detection_list_is_judged_as_its_detections() -> None:
    metrics = _reordered()
    assert metrics["detection_boxes"].max_abs == 2.0  # row by row: a box off by its size
    assert plain_verdict(metrics, Tolerance(), []) == "diverged"  # no detections compared: row by row, as before
    assert plain_verdict(metrics, Tolerance(), [GROUP]) == "identical"


def test_the_other_outputs_and_a_diverged_group_still_decide() -> None:
    logits = compare_arrays(np.zeros((1, 3), np.float32), np.full((1, 3), 0.5, np.float32))
    assert plain_verdict({**_reordered(), "logits": logits}, Tolerance(), [GROUP]) == "diverged"
    assert plain_verdict(_reordered(), Tolerance(), [{**GROUP, "verdict": "diverged"}]) == "diverged"
    near = compare_arrays(np.zeros((1, 3), np.float32), np.full((1, 3), 1e-7, np.float32))
    assert plain_verdict({**_reordered(), "logits": near}, Tolerance(), [{**GROUP, "verdict": "within_tolerance"}]) \
        == "within_tolerance"
