"""diagnose's plain-output verdict judges a detector's outputs as the compare judged its detections.

Helper review, 2026-12-04: compare judges a detector's outputs between matched detections, but
diagnose's own verdict on the plain runs read them row by row, so NMS listing two near-tied
detections in the other order (a box off by its size, a class off by one) made an experiment
diverged and sent diagnose walking op by op for a difference the matched detections did not have.
"""

from __future__ import annotations

import io
from pathlib import Path
from dataclasses import replace

import numpy as np
import pytest

from conftest import build_fixture, run_cli
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


# ---- the experiment's effect: max_abs_output_diff -------------------------------------------------------------


def test_a_groups_matched_figures_stand_for_its_outputs_row_by_row_ones() -> None:
    """report.json's group holds what its matched detections moved: boxes and scores by their largest matched
    difference, classes and count 0; a group where a detection appeared, disappeared or changed class, or
    not compared, keeps its row-by-row figures."""
    from tracer.comparison.detection_groups import matched_figures  # noqa: PLC0415
    from tracer.diagnosis.outcomes import _max_abs  # noqa: PLC0415

    group = {**GROUP, "verdict": "within_tolerance", "per_detection_max_abs": {"detection_multiclass_scores": 2.0 ** -11},
             "total": {"appeared": 0, "disappeared": 0, "changed_class": 0, "max_box_diff": 2.0 ** -6,
                       "max_score_diff": 2.0 ** -9}}
    figures = matched_figures([group])
    assert figures == {"detection_boxes": 2.0 ** -6, "detection_scores": 2.0 ** -9, "detection_classes": 0.0,
                       "detection_multiclass_scores": 2.0 ** -11}
    metrics = _reordered()
    assert _max_abs(metrics) == 2.0  # row by row: a box off by its size
    assert _max_abs(metrics, figures) == 2.0 ** -6
    assert matched_figures([{**group, "total": {**group["total"], "disappeared": 1}}]) == {}
    assert matched_figures([{**group, "compared": False}]) == {}
    assert set(matched_figures([{**group, "verdict": "identical"}]).values()) == {0.0}


@pytest.fixture(scope="module")
def detector_captures(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fp32 detector and its float16-heads twin (tests/fixtures/nms_fp16_detector.py), captured on the CPU:
    B lists some near-tied detections in the other order (row by row boxes 0.359 apart, matched 3.46e-05)."""
    root = tmp_path_factory.mktemp("fp16_captures")
    models = build_fixture("nms_fp16_detector.py", root / "models")
    env = {"TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": "-1"}
    for name, model in (("a", "savedmodel"), ("b", "savedmodel_fp16")):
        proc = run_cli("capture", str(models / "cf2" / model), "--inputs", str(models / "images.npz"), "--onednn", "off",
                       "--out", str(root / name), env=env)
        assert proc.returncode == 0, proc.stderr
    return root / "a", root / "b"


@pytest.mark.slow
@pytest.mark.parametrize("observed_apart", [False, True])
def test_the_experiments_effect_on_a_detector_is_what_its_matched_detections_moved(
        detector_captures: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        observed_apart: bool) -> None:
    """diagnose's effect of an experiment (``max_abs_output_diff``, what its answers rank and quote) was the
    row-by-row figure of a detector's outputs: 0.359 for the float16 heads, a box off by its size where NMS
    listed two near-tied detections in the other order, while matched detections moved by 1.25e-04 (a
    score). Now it is the matched figure, as captured (instrumented: the compare's detection lists) and, where
    a side's plain run differs from its instrumented one (forced here: on the CPU they agree), as the plain
    runs compute them (the compare's group)."""
    from rich.console import Console  # noqa: PLC0415

    from tracer.captures.reader import Capture  # noqa: PLC0415
    from tracer.diagnosis import outcomes  # noqa: PLC0415

    cap_a, cap_b = (Capture.open(path) for path in detector_captures)
    if observed_apart:
        observer = Capture.observer.fget
        monkeypatch.setattr(Capture, "observer", property(lambda self: replace(observer(self), outputs_identical=False)))
    result: dict = {"notes": [], "verdict": None}
    outcomes._compare(result, None, cap_a, cap_b, tmp_path / "r", Tolerance(), Console(file=io.StringIO()), "test",
                      False, False)
    report = result.pop("_report")
    assert report["outputs"]["detection_boxes"]["max_abs"] == pytest.approx(0.35944, abs=1e-5)  # row by row
    assert result["max_abs_output_diff"] == pytest.approx(1.2487e-04, rel=1e-3)
    assert result["outputs"]["detection_boxes"] == pytest.approx(3.463e-05, rel=1e-3)
    assert (result["outputs"]["detection_classes"], result["outputs"]["num_detections"]) == (0.0, 0.0)
    if observed_apart:
        plain = result["plain_outputs"]["max_abs"]
        assert plain["detection_boxes"] == pytest.approx(3.463e-05, rel=1e-3)
        assert plain["detection_scores"] == pytest.approx(1.2487e-04, rel=1e-3)
        assert result["instrumented_max_abs_output_diff"] == pytest.approx(1.2487e-04, rel=1e-3)


def test_repeats_in_one_process_and_the_observation_measure_a_detector_between_matched_detections() -> None:
    """The ``repeat_process`` and ``observation`` experiments compare a run's outputs with other runs' (tensor ->
    value): a detector's outputs recognised by their keys are measured between the detections each pair of
    runs matched, the largest over the pairs; row by row the re-listed boxes read 2.0 apart."""
    from tracer.diagnosis.outcomes import _as_detections  # noqa: PLC0415

    outputs = {"detection_boxes": "boxes:0", "detection_scores": "scores:0", "detection_classes": "classes:0",
               "logits": "logits:0"}
    first = {"boxes:0": BOXES_A, "scores:0": SCORES_A, "classes:0": CLASSES_A, "logits:0": np.zeros((1, 3), np.float32)}
    moved = {**first, "scores:0": SCORES_A + np.float32(2.0 ** -12)}
    relisted = {"boxes:0": BOXES_A[:, ::-1], "scores:0": SCORES_A[:, ::-1], "classes:0": CLASSES_A[:, ::-1],
                "logits:0": first["logits:0"]}
    tolerance = Tolerance(atol=1e-6, rtol=1e-5)
    assert _as_detections(outputs, first, [relisted, moved], tolerance)[0] == {
        "detection_boxes": 0.0, "detection_scores": 2.0 ** -12, "detection_classes": 0.0}
    assert _as_detections({"logits": "logits:0"}, first, [relisted], tolerance) == ({}, {})


def test_repeats_in_one_process_and_the_observation_judge_a_detector_between_matched_detections() -> None:
    """The same experiments' verdict, by the compare's rule for lists of detections: a detector only
    re-listed by NMS is within tolerance (not bitwise equal; every matched detection agrees), one whose
    matched scores moved by 2^-8 is diverged, one that lost a detection is diverged. Row by row the
    re-listed run was diverged (boxes 2.0 apart). Another output still decides for itself."""
    from tracer.diagnosis.outcomes import _as_detections, _outputs_verdict  # noqa: PLC0415

    tolerance = Tolerance(atol=1e-6, rtol=1e-5)
    outputs = {"detection_boxes": "boxes:0", "detection_scores": "scores:0", "detection_classes": "classes:0",
               "logits": "logits:0"}
    first = {"boxes:0": BOXES_A, "scores:0": SCORES_A, "classes:0": CLASSES_A, "logits:0": np.zeros((1, 3), np.float32)}
    relisted = {"boxes:0": BOXES_A[:, ::-1], "scores:0": SCORES_A[:, ::-1], "classes:0": CLASSES_A[:, ::-1],
                "logits:0": first["logits:0"]}
    lost = {**first, "scores:0": np.array([[0.625, 0.0]], np.float32), "classes:0": np.array([[1.0, -1.0]], np.float32)}

    def verdict(*others: dict) -> str:
        metrics = {k: max((compare_arrays(first[t], o[t], rtols=(tolerance.rtol,)) for o in others),
                          key=lambda m: (not m.identical, m.max_abs)) for k, t in outputs.items()}
        return _outputs_verdict(metrics, tolerance, _as_detections(outputs, first, list(others), tolerance)[1])

    assert verdict(first) == "identical"
    assert verdict(relisted) == "within_tolerance"
    assert verdict(relisted, {**first, "scores:0": SCORES_A + np.float32(2.0 ** -8)}) == "diverged"
    assert verdict(relisted, {**first, "scores:0": SCORES_A + np.float32(2.0 ** -22)}) == "within_tolerance"
    assert verdict(lost) == "diverged"
    assert verdict(relisted, {**first, "logits:0": np.ones((1, 3), np.float32)}) == "diverged"
